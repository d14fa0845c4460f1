rule build:
    """Compile one workload (cpu: torch.export to .pt2) through the content-addressed cache."""
    output:
        record=f"{WORKLOAD}/build/build.json",
        artifact=f"{WORKLOAD}/build/{ARTIFACT['build']}",
    params:
        spec=spec_json,
        backend=BACKEND,
        out=subpath(output.record, parent=True),
    log:
        f"{WORKLOAD}/logs/build.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep build --backend {params.backend} --spec {params.spec:q} "
        "--cache-dir {CACHE_DIR:q} --out {params.out:q} > {log:q} 2>&1"
