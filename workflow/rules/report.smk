rule report:
    """results/<run>/report.html: one self-contained interactive page (also in `snakemake --report`)."""
    input:
        summary=SUMMARY,
        targets=rules.aggregate.output.targets,
        plan=rules.plan.output[0],
        history=rules.history.output[0],  # the page links results/history/history.html
        tunes=expand(f"{RUN}/tune/{{model}}/dispatch.json", model=TUNES),  # the page links each tune.html
    output:
        report(f"{RUN}/report.html", caption="../report/figures.rst", category="neuron-sweep"),
    log:
        f"{RUN}/logs/report.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep report --summary {input.summary:q} --targets {input.targets:q} --plan {input.plan:q} "
        "--out {output:q} > {log:q} 2>&1"
