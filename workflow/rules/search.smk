SEARCHES = [e["name"] for e in CONFIG["suites"].get("custom", []) if e.get("search")] + [
    b["name"] for b in CONFIG.get("search", [])
]


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
    shell:
        "neuronsweep search run {params.config:q} --name {wildcards.name} --cores {threads} > {log:q} 2>&1"
