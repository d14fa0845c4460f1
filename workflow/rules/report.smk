rule report:
    """results/<run>/report.html, self-contained, and its figures (also in `snakemake --report`)."""
    input:
        summary=SUMMARY,
        plan=rules.plan.output[0],
    output:
        html=f"{RUN}/report.html",
        figures=report(
            directory(f"{RUN}/report"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="neuron-sweep",
        ),
    log:
        f"{RUN}/logs/report.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep report --summary {input.summary:q} --plan {input.plan:q} --out {output.html:q} "
        "--figures {output.figures:q} > {log:q} 2>&1"
