rule search:
    """Autotune a suites.custom entry's params or a top-level search:'s settings (docs/autotune.md): the driver runs its
    rounds as Snakemake calls of their own (run <run>-search-<name>, outputs apart from this run's), and
    resumes where a killed search stopped. Reruns when the config or the user's code changes."""
    input:
        config=workflow.configfiles,
        code=lambda wc: search_sources(wc.name),
    output:
        f"{RUN}/search/{{name}}/best.json",
    log:
        f"{RUN}/logs/search-{{name}}.log",
    conda:
        "../../envs/neuronsweep.yaml"
    threads: os.cpu_count() or 1  # its rounds take the cores, nothing beside it (Snakemake caps it at --cores)
    params:
        config=lambda wc: search_config(wc.name),
        snakefile=workflow.main_snakefile,  # its rounds run this workflow, wherever neuron-sweep is installed
    shell:
        "neuronsweep search run {params.config:q} --name {wildcards.name} --cores {threads} "
        "--snakefile {params.snakefile:q} > {log:q} 2>&1"


rule tune:
    """Tune a model (a suites.model entry's tune:, docs/autotune.md): per GEMM shape the fastest correct candidate,
    judged against the compiler's build, as a dispatch table and the time it saves. After the sweep (the forward's
    measured GEMM share projects the saving), beside the report (which links tune.html without waiting for it: a tune
    that fails as a whole costs the run its tune only); its rounds are Snakemake calls of their own (run
    <run>-tune-<model>), and it resumes where a killed tune stopped."""
    input:
        config=workflow.configfiles,
        code=lambda wc: tune_sources(wc.model),
        summary=SUMMARY,
    output:
        f"{RUN}/tune/{{model}}/dispatch.json",
    log:
        f"{RUN}/logs/tune-{{model}}.log",
    conda:
        "../../envs/neuronsweep.yaml"
    threads: os.cpu_count() or 1  # its rounds take the cores, nothing beside it (Snakemake caps it at --cores)
    params:
        config=lambda wc: search_config(wc.model),
        snakefile=workflow.main_snakefile,
    shell:
        "neuronsweep search run {params.config:q} --name {wildcards.model} --cores {threads} "
        "--snakefile {params.snakefile:q} > {log:q} 2>&1"
