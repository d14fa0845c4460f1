rule capture:
    """Run the built workload: profile the nth of num_exec executions, then time `iterations` runs.

    Holds the exclusive neuron_device resource (the default profile limits it to 1) and, inside the
    job, an OS lock (capture.device_lock) so that captures of two Snakemake processes never overlap.
    On cpu it takes every core, so a measurement never shares the CPU with builds. On neuron a
    device out-of-memory fails attempt 1 and the retry captures with --single-io.
    """
    input:
        record=rules.build.output.record,
        artifact=rules.build.output.artifact,
    output:
        record=f"{WORKLOAD}/capture/capture.json",
        profile=f"{WORKLOAD}/capture/{ARTIFACT['capture']}",
    params:
        warmup=CAPTURE["warmup"],
        iterations=CAPTURE["iterations"],
        repeats=CAPTURE["repeats"],
        num_exec=CAPTURE["num_exec"],
        nth_exec=CAPTURE["nth_exec"],
        options=options("capture"),
        build=subpath(input.record, parent=True),
        out=subpath(output.record, parent=True),
    threads: workflow.cores
    resources:
        neuron_device=1,
        attempt=lambda wildcards, attempt: attempt,
    retries: 1 if ON_NEURON else 0
    log:
        f"{WORKLOAD}/logs/capture.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep capture --build {params.build:q} --out {params.out:q} "
        "--warmup {params.warmup} --iterations {params.iterations} --repeats {params.repeats} "
        "--num-exec {params.num_exec} --nth-exec {params.nth_exec} --threads {threads} "
        "--attempt {resources.attempt} --device-lock {DEVICE_LOCK:q} --options {params.options:q} "
        "> {log:q} 2>&1"


rule calibrate:
    """cpu: the host's measured peak FLOP/s per dtype and copy bandwidth, the roofline's ceiling.
    Cached per machine in the compile cache, so it is measured once per host and thread count."""
    output:
        CALIBRATION,
    threads: workflow.cores
    resources:
        neuron_device=1,
    log:
        f"{RUN}/logs/calibrate.log",
    conda:
        "../../envs/neuronsweep.yaml"
    shell:
        "neuronsweep calibrate --threads {threads} --cache-dir {CACHE_DIR:q} --out {output:q} > {log:q} 2>&1"
