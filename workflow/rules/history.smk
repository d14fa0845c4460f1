rule history:
    """Adds the finished run to results/history/ (one Parquet file per run, kept when results/<run> is
    overwritten by the next run of that name) and redraws results/history/history.html."""
    input:
        summary=SUMMARY,
        plan=rules.plan.output[0],
    output:
        f"{RUN}/history.json",
    log:
        f"{RUN}/logs/history.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep history --record {output:q} > {log:q} 2>&1"
