rule plan:
    """The planned scenarios and workloads; rewritten only when the plan changes (a param)."""
    output:
        f"{RUN}/plan.json",
    log:
        f"{RUN}/logs/plan.log",
    conda:
        "../../envs/neuronsweep.yaml"
    params:
        plan=PLAN_JSON,
        staged=PLAN_STAGED,  # the same plan, written when the workflow was read (run_setup.stage_plan)
    shell:
        "cp {params.staged:q} {output:q} && echo 'plan: {output}' > {log:q}"


rule aggregate:
    """One summary.csv row per scenario, with a status column; roofline_targets.csv puts every
    workload on trn1, inf2 and trn2 (tile counts, ideal compute and memory time, the bound)."""
    input:
        plan=rules.plan.output[0],
        metrics=expand(f"{WORKLOAD}/metrics.json", wid=PLAN.workloads),
    output:
        summary=SUMMARY,
        targets=f"{RUN}/roofline_targets.csv",
    log:
        f"{RUN}/logs/aggregate.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep aggregate --plan {input.plan:q} --out {output.summary:q} --targets-out {output.targets:q} "
        "2>&1 | tee {log:q}"
