rule build:
    """Compile one workload through the content-addressed cache (cpu: torch.export to .pt2;
    neuron: torch-xla + neuronx-cc to a NEFF, found through a compile cache of its own)."""
    output:
        record=f"{WORKLOAD}/build/build.json",
        artifact=f"{WORKLOAD}/build/{ARTIFACT['build']}",
    params:
        spec=spec_json,
        backend=BACKEND,
        options=options("build"),
        out=subpath(output.record, parent=True),
    log:
        f"{WORKLOAD}/logs/build.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep build --backend {params.backend} --spec {params.spec:q} --options {params.options:q} "
        "--cache-dir {CACHE_DIR:q} --out {params.out:q} > {log:q} 2>&1"
