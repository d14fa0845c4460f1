rule report:
    """results/<run>/report.html: one self-contained interactive page (also in `snakemake --report`)."""
    input:
        summary=SUMMARY,
        targets=rules.aggregate.output.targets,
        plan=rules.plan.output[0],
        history=rules.history.output[0],  # the page links results/history/history.html
    output:
        report(f"{RUN}/report.html", caption="../report/figures.rst", category="neuron-sweep"),
    log:
        f"{RUN}/logs/report.log",
    conda:
        "../../envs/neuronsweep.yaml"
    params:
        # the page links each model's tune.html, and does not wait for the tunes: a tune that fails as a
        # whole must not cost the run its report (it is the sweep's page; the tune's is its own)
        tunes=TUNES,
    shell:
        "neuronsweep report --summary {input.summary:q} --targets {input.targets:q} --plan {input.plan:q} "
        "--tunes {params.tunes:q} --out {output:q} > {log:q} 2>&1"
