rule view:
    """Convert the raw profile into summary.json (Neuron summary fields and units) and a .pftrace;
    on neuron also parquet (neuron-explorer) and the legacy json when configured; on xla the
    build's HLO module as the Instruction table (its op mix)."""
    input:
        **({"module": rules.build.output.artifact} if DESCRIPTION.view_reads_build else {}),
        record=rules.capture.output.record,
        profile=rules.capture.output.profile,
    output:
        *[f"{WORKLOAD}/view/{name}" for name in VIEW_OUTPUTS],
        summary=f"{WORKLOAD}/view/summary.json",
        record=f"{WORKLOAD}/view/view.json",
    log:
        f"{WORKLOAD}/logs/view.log",
    conda:
        "../../envs/neuronsweep.yaml"
    params:
        options=options("view"),
        capture=subpath(input.record, parent=True),
        out=subpath(output.record, parent=True),
    shell:
        "neuronsweep view --capture {params.capture:q} --out {params.out:q} --options {params.options:q} "
        "> {log:q} 2>&1"
