"""Autotune (`neuronsweep search`, docs/autotune.md): `driver` runs a search's rounds as Snakemake calls
and judges its finalists, `space` is the space and the strategies as Optuna sees them (and the replay that
resumes a search), `page` draws search.html; `tune` tunes a model (a search per GEMM shape and candidate,
the winners judged against the compiler's build), `dispatch` reads its table back, `tune_page` draws
tune.html; `checks` builds every search and tune of a config before any job. Above the stages and runs
it drives."""

FINALIST_ROUNDS = 5  # processes that time the finalists again (cpu): enough for verdict's t-test
