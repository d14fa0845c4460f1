"""Autotune (`neuronsweep search`, docs/autotune.md): `driver` runs a search's rounds as Snakemake calls
and judges its finalists, `space` is the space and the strategies as Optuna sees them (and the replay that
resumes a search), `page` draws search.html. Above the stages and runs it drives."""

FINALIST_ROUNDS = 5  # processes that time the finalists again (cpu): enough for verdict's t-test
