rule view:
    """Convert the raw profile into summary.json (Neuron summary fields and units) and a .pftrace."""
    input:
        record=rules.capture.output.record,
        trace=rules.capture.output.trace,
    output:
        summary=f"{WORKLOAD}/view/summary.json",
        pftrace=f"{WORKLOAD}/view/trace.pftrace",
        record=f"{WORKLOAD}/view/view.json",
    params:
        capture=subpath(input.record, parent=True),
        out=subpath(output.record, parent=True),
    log:
        f"{WORKLOAD}/logs/view.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep view --capture {params.capture:q} --out {params.out:q} > {log:q} 2>&1"
