rule extract:
    """Normalize one workload's build, capture and view records into metrics.json (docs/metrics.md)."""
    input:
        summary=rules.view.output.summary,
        capture=rules.capture.output.record,
        build=rules.build.output.record,
    output:
        f"{WORKLOAD}/metrics.json",
    log:
        f"{WORKLOAD}/logs/extract.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep extract --summary-json {input.summary:q} --capture-json {input.capture:q} "
        "--build-json {input.build:q} --out {output:q} > {log:q} 2>&1"
