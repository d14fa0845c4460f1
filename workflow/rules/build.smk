rule build:
    """Compile one workload through the content-addressed cache (cpu: torch.export to .pt2;
    neuron: torch-xla + neuronx-cc to a NEFF, found through a compile cache of its own)."""
    input:
        user_code=user_sources,
    output:
        record=f"{WORKLOAD}/build/build.json",
        artifact=f"{WORKLOAD}/build/{ARTIFACT['build']}",
    log:
        f"{WORKLOAD}/logs/build.log",
    wildcard_constraints:
        wid=f"(?!{COLLECTIVE_WID})[a-z0-9][a-z0-9._-]*",
    conda:
        "../../envs/neuronsweep.yaml"
    resources:
        neuron_device=1 if ON_DEVICE else 0,  # a neuron build runs the workload on the device
    params:
        spec=spec_json,
        backend=BACKEND,
        options=options("build"),
        out=subpath(output.record, parent=True),
    shell:
        "neuronsweep build --backend {params.backend} --spec {params.spec:q} --options {params.options:q} "
        "--out {params.out:q} "
        "> {log:q} 2>&1"


use rule build as build_collective with:
    output:
        record=f"{WORKLOAD}/build/build.json",
        artifact=f"{WORKLOAD}/build/{COLLECTIVE_ARTIFACT}",
    wildcard_constraints:
        wid=COLLECTIVE_WID,
    resources:
        neuron_device=1 if DESCRIPTION.compiles_collectives else 0,  # neuron runs it on `world` cores
