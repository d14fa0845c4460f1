rule extract:
    """Normalize one workload's build, capture and view records into metrics.json (docs/metrics.md)."""
    input:
        **({"profile_json": f"{WORKLOAD}/view/profile.json"} if HAS_PROFILE_JSON else {}),
        **({"calibration": CALIBRATION} if HAS_HOST_PEAKS else {}),
        summary=rules.view.output.summary,
        capture=rules.capture.output.record,
        build=rules.build.output.record,
    output:
        f"{WORKLOAD}/metrics.json",
    log:
        f"{WORKLOAD}/logs/extract.log",
    conda:
        "../../envs/neuronsweep.yaml"
    params:
        profile_json=lambda wildcards, input: (
            f"--profile-json {shlex.quote(input.profile_json)}" if HAS_PROFILE_JSON else ""
        ),
        calibration=lambda wildcards, input: f"--calibration {shlex.quote(input.calibration)}" if HAS_HOST_PEAKS else "",
        track_patterns=json.dumps(dict(RUN_CONFIG.track_patterns)),
    shell:
        "neuronsweep extract --summary-json {input.summary:q} --capture-json {input.capture:q} "
        "--build-json {input.build:q} {params.profile_json} {params.calibration} "
        "--track-patterns {params.track_patterns:q} --out {output:q} > {log:q} 2>&1"
