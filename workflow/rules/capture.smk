rule capture:
    """Run the built workload: profile the nth of num_exec executions, then time `iterations` runs.

    Takes every core (a measurement must not share the CPU with builds) and the exclusive
    neuron_device resource, which the default profile limits to 1.
    """
    input:
        record=rules.build.output.record,
        artifact=rules.build.output.artifact,
    output:
        record=f"{WORKLOAD}/capture/capture.json",
        trace=f"{WORKLOAD}/capture/{ARTIFACT['capture']}",
    params:
        warmup=CAPTURE["warmup"],
        iterations=CAPTURE["iterations"],
        num_exec=CAPTURE["num_exec"],
        nth_exec=CAPTURE["nth_exec"],
        build=subpath(input.record, parent=True),
        out=subpath(output.record, parent=True),
    threads: workflow.cores
    resources:
        neuron_device=1,
    log:
        f"{WORKLOAD}/logs/capture.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep capture --build {params.build:q} --out {params.out:q} "
        "--warmup {params.warmup} --iterations {params.iterations} "
        "--num-exec {params.num_exec} --nth-exec {params.nth_exec} --threads {threads} > {log:q} 2>&1"
