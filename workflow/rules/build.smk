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
    resources:
        neuron_device=1 if ON_NEURON else 0,  # a neuron build runs the workload on the device
    log:
        f"{WORKLOAD}/logs/build.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep build --backend {params.backend} --spec {params.spec:q} --options {params.options:q} "
        "--cache-dir {CACHE_DIR:q} --device-lock {DEVICE_LOCK:q} {SLOT_ARGS} --timeout {TIMEOUTS[build]} --out {params.out:q} "
        "> {log:q} 2>&1"
