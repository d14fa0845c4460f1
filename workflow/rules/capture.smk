rule capture:
    """Run the built workload: profile the nth of num_exec executions, then time `iterations` runs.

    Takes one neuron_device resource (as many as the machine has device slots: slots.py) and, inside
    the job, a free slot's OS locks (beside capture.device_lock), so that captures of two Snakemake
    processes never share a NeuronCore. On cpu there is one slot and a capture takes every core, so a
    measurement never shares the CPU with builds. On neuron a device out-of-memory fails attempt 1 and
    the retry captures with --single-io.
    """
    input:
        record=rules.build.output.record,
        artifact=lambda wildcards: build_artifact(wildcards.wid),
    output:
        record=f"{WORKLOAD}/capture/capture.json",
        profile=f"{WORKLOAD}/capture/{ARTIFACT['capture']}",
    log:
        f"{WORKLOAD}/logs/capture.log",
    retries: DESCRIPTION.capture_retries
    conda:
        "../../envs/neuronsweep.yaml"
    threads: CAPTURE_THREADS
    resources:
        neuron_device=1,
        attempt=lambda wildcards, attempt: attempt,
    params:
        warmup=CAPTURE.warmup,
        iterations=CAPTURE.iterations,
        repeats=CAPTURE.repeats,
        num_exec=CAPTURE.num_exec,
        nth_exec=CAPTURE.nth_exec,
        in_processes="--rounds-in-processes" if CAPTURE.rounds_in_processes else "",
        options=options("capture"),
        build=subpath(input.record, parent=True),
        out=subpath(output.record, parent=True),
    shell:
        "neuronsweep capture --build {params.build:q} --out {params.out:q} "
        "--warmup {params.warmup} --iterations {params.iterations} --repeats {params.repeats} "
        "--num-exec {params.num_exec} --nth-exec {params.nth_exec} --threads {threads} "
        "--attempt {resources.attempt} {params.in_processes} --options {params.options:q} > {log:q} 2>&1"


rule calibrate:
    """cpu: the host's measured peak FLOP/s for each dtype the sweep uses, and copy bandwidth: the
    roofline's ceiling. Bounded to a few seconds per dtype; cached per machine in the compile cache;
    measured under the device lock, so no capture runs beside it."""
    output:
        CALIBRATION,
    log:
        f"{RUN}/logs/calibrate.log",
    conda:
        "../../envs/neuronsweep.yaml"
    threads: host_threads()
    resources:
        neuron_device=1,
    params:
        dtypes=CALIBRATION_DTYPES,
    shell:
        "neuronsweep calibrate --threads {threads} --dtypes {params.dtypes} --out {output:q} > {log:q} 2>&1"
