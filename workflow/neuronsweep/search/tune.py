"""Tune a model (a suites.model entry's `tune:` block, `neuronsweep search run CONFIG --name <model>`): per
GEMM shape the model runs, the fastest correct implementation among its candidates, as a dispatch table,
and the model time the table saves. A kind of search (search.KINDS["tune"]), in four steps:

1. The shapes (search/tune_shapes.py): the model's GEMMs as the model suite plans them (layers off), every
   unique (M, K, N, dtype) with how often each forward runs it. Their `compiler` build (the backend's own
   GEMM) is measured once, in one call of the workflow: each shape's default. With `settings:` (run-level
   keys: the compiler's flags), the compiler's build under each other combination of their values is
   measured the same way, a run of its own each (`<run>-tune-<model>-<hash>`), and is a candidate at every
   shape (`compiler[neuron.optlevel=1]`).
2. The searches (search/tune_search.py): shapes in order of count x default latency, so a budget cut short
   still covers the time that matters; per shape, each custom candidate is an ordinary ParamSearch over its
   own space, every trial a case of the run `<run>-tune-<model>`; the searches of SHAPES_TOGETHER shapes run
   together, a round of all of them one Snakemake call.
3. The judge (search/tune_table.py): each shape's fastest correct trial against the compiler's build, by
   analysis/verdict.py: a winner not judged faster is a `tie`, and the compiler is what the table ships.
4. What it writes (search/tune_table.py): dispatch.csv, dispatch.json (search/dispatch.py's Table, read
   back by a runtime), gain.csv (per forward: the GEMMs' time with the defaults and with the table, and the
   forward projected by its measured GEMM share) and tune.html.

Resumable at every step: the defaults, each candidate's search (its own trials.csv, in a folder named by the
candidate's source hash, so an edited kernel file is searched again and nothing else) and the judged
finalists are each recorded when done.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from neuronsweep.atomic import replacing
from neuronsweep.backends.cores import default_threads
from neuronsweep.config.suites import ConfigDocument, ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.search import FINALIST_ROUNDS, calls, tune_search, tune_shapes, tune_table
from neuronsweep.search.driver import ParamSearch, merged_round, screen_together
from neuronsweep.search.space import Point
from neuronsweep.search.trials import TrialResult
from neuronsweep.search.tune_block import TuneBlock, matrix_dims
from neuronsweep.search.tune_records import Searched, TuneState
from neuronsweep.search.tune_search import Call
from neuronsweep.search.tune_table import Judge
from neuronsweep.store import layout

SHAPES_TOGETHER = 8  # shapes searched together (a round of all of them one Snakemake call); the budget between
Say = Callable[[str], None]
Workflow = Callable[
    [ConfigDocument, str], tuple[pd.DataFrame, Path]
]  # (config, call's name) -> (its summary.csv, its log)


class Tune:
    """One model's tune: its block (search/tune_block.py: candidates, budget, run and folder), the backend its
    plan settles, and the calls it makes. `workflow` runs one config as a Snakemake call, `screen` halving's
    cheap rung of several searches and `judge` the winners against the compiler's build: the real ones unless
    given (tests give a measured landscape; everything else is what production runs)."""

    def __init__(
        self,
        cfg: ConfigDocument,
        entry: ModelEntry,
        source: str,
        cores: int | None = None,
        snakefile: str | Path | None = None,
        *,
        workflow: Workflow | None = None,
        screen: Call | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.block = TuneBlock.parse(cfg, entry, source)
        self.folder = self.block.folder
        self.cores = cores or default_threads()  # Snakemake's --cores per call: the CPUs this process may run on
        self.snakefile = snakefile  # the workflow its calls run (calls.workflow_snakefile)
        self.workflow = workflow or self._snakemake
        self.screen = screen or screen_together
        self.judge = judge
        self.backend = "cpu"  # settled when the model's GEMMs are planned (gemms())
        self.calls = 0  # calls of the workflow made for the searches (call-<n>; counted again on resume)
        self.checked: set[str] = set()  # the custom candidates planned at a shape already (tune_search)

    def _snakemake(self, cfg: ConfigDocument, name: str) -> tuple[pd.DataFrame, Path]:
        snakefile = calls.workflow_snakefile(self.snakefile)
        return calls.snakemake_round(cfg, self.folder / "rounds", name, self.cores, snakefile)

    # ------------------------------------------------------------------ step 1: the shapes
    def gemms(self) -> pd.DataFrame:
        """Every GEMM of every forward, as the model suite plans them (tune_shapes.plan_gemms); settles the backend."""
        gemms, self.backend = tune_shapes.plan_gemms(self.block.compiler_config(), self.block.where)
        return gemms

    def measure_defaults(self, gemms: pd.DataFrame, settings: Point | None = None) -> pd.DataFrame:
        """Each shape's compiler build measured (one workflow call for all): defaults.csv, or with `settings`
        settings/<run>.csv. Called on every run, resumed or not: Snakemake reruns what a changed setting
        touches and nothing else."""
        cfg = self.block.compiler_config(settings)
        summary, _ = self.workflow(cfg, cfg["run"] if settings else "defaults")
        out = tune_shapes.measured(gemms, summary, cfg["run"])
        path = self.folder / (f"settings/{cfg['run']}.csv" if settings else "defaults.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path) as tmp:
            out.to_csv(tmp, index=False)
        return out

    # ------------------------------------------------------------------ step 2: the searches
    def measure_together(self, batch: list[tuple[ParamSearch, list[Point]]], n_round: int) -> list[list[TrialResult]]:
        """One round of several shapes' searches as one call of the workflow; per search, a result per trial."""
        self.calls += 1
        summary, log = self.workflow(merged_round(batch), f"call-{self.calls}")
        return [[s.result_of(summary, t, log, self.block.run) for t in trials] for s, trials in batch]

    def _search(self, ordered: pd.DataFrame, state: TuneState, say: Say) -> None:
        """The shapes not searched with today's code, SHAPES_TOGETHER at a time while the budget allows; each
        chunk recorded in state.json when done."""
        block = self.block
        if not block.customs:
            return
        todo = [
            sh
            for _, sh in ordered.iterrows()
            if (done := state.shapes.get(str(sh["shape"]))) is None or done.code != block.digests
        ]
        for i in range(0, len(todo), SHAPES_TOGETHER):
            chunk = todo[i : i + SHAPES_TOGETHER]
            spent = (state.defaults_s or 0.0) + sum(state.chunks_s)
            last = max(state.chunks_s, default=0.0)
            if block.wall_s is not None and spent + last > float(block.wall_s):
                say(
                    f"tune {block.entry['name']}: stopped before shape {chunk[0]['shape']}: {spent:.0f} s spent, "
                    f"{SHAPES_TOGETHER} shapes took up to {last:.0f} s, budget {block.wall_s} s"
                )
                return
            t0 = time.monotonic()
            found, log = tune_search.search_shapes(
                block, chunk, say, self.measure_together, self.screen, self.cores, self.snakefile, self.checked
            )
            state.chunks_s.append(time.monotonic() - t0)
            state.calls.extend(log)
            state.shapes.update({sid: Searched(c, dict(block.digests)) for sid, c in found.items()})
            state.write(self.folder / "state.json")
            say(f"tune {block.entry['name']}: {len(state.shapes)} of {len(ordered)} shapes searched")

    # ------------------------------------------------------------------ the whole tune
    def drive(self, say: Say = print, rounds: int = FINALIST_ROUNDS) -> str:
        """Run or resume the tune (`tune_all`); the line naming its dispatch.json."""
        self.tune_all(say, rounds)
        return f"dispatch.json: {self.folder / 'dispatch.json'}"

    def tune_all(self, say: Say = print, rounds: int = FINALIST_ROUNDS) -> dict:
        """Defaults, then the shapes' searches within the budget (SHAPES_TOGETHER at a time, the most model
        time first), then the judged table and its gain: {"dispatch": table, "gain": gain}."""
        block = self.block
        self.folder.mkdir(parents=True, exist_ok=True)
        with calls.only_driver(self.folder / "driver.lock"):
            gemms = self.gemms()
            state = self._state()
            self.calls = len(list((self.folder / "rounds").glob("call-*.yaml")))
            t0 = time.monotonic()
            defaults = self.measure_defaults(gemms)
            variants = {label: self.measure_defaults(gemms, chosen) for label, chosen in block.variants.items()}
            if state.defaults_s is None:  # a resumed tune keeps what its first measuring took
                state.defaults_s = time.monotonic() - t0
            if block.wall_s is not None and state.defaults_s > float(block.wall_s):
                raise UserError(
                    f"{block.where}.budget.wall_seconds is {block.wall_s}, less than measuring each shape's "
                    f"compiler build{' under each setting' if block.variants else ''} once took "
                    f"({state.defaults_s:.0f} s); raise it."
                )
            ordered = tune_shapes.order(gemms, defaults)
            self._search(ordered, state, say)
            table = tune_table.rows(block, gemms, defaults, variants, state, self.backend)
            tune_table.judge(block, table, self.backend, rounds, say, self.judge)
            forward = layout.suite_csv(block.cfg["run"], f"model-{block.entry['name']}-forward")
            gained = tune_table.gain(gemms, table, pd.read_csv(forward) if forward.is_file() else None)
            tune_table.write(block, table, gained)
        return {"dispatch": table, "gain": gained}

    def _state(self) -> TuneState:
        return TuneState.read(self.folder / "state.json")

    def status_lines(self) -> list[str]:
        """`neuronsweep search status`: the shapes searched and left, and the saving so far."""
        block = self.block
        lines = [
            f"tune {block.entry['name']} ({block.strategy}, candidates {', '.join(block.candidates)}): {self.folder}"
        ]
        defaults = self.folder / "defaults.csv"
        if not defaults.is_file():
            return [*lines, "no shape measured yet: `neuronsweep search run CONFIG --name MODEL` starts it"]
        measured = pd.read_csv(defaults)
        searched = len(self._state().shapes)
        ok = int((measured["status"] == "ok").sum())
        if block.customs:
            lines.append(f"shapes: {searched} of {ok} searched, {ok - searched} left")
        if block.variants:
            lines.append(f"settings: {', '.join(block.variants)}, each measured at every shape with the defaults")
        gain = self.folder / "gain.csv"
        for r in pd.read_csv(gain).itertuples() if gain.is_file() else ():
            if isinstance(getattr(r, "saving_pct", None), float) and not math.isnan(r.saving_pct):
                lines.append(
                    f"  {r.phase} b{r.batch} s{r.seq} {r.dtype}: GEMMs {r.gemm_default_s * 1e3:.3g} -> "
                    f"{r.gemm_tuned_s * 1e3:.3g} ms ({r.saving_pct:.1f} % saved)"
                )
        return lines


__all__ = ["SHAPES_TOGETHER", "Tune", "matrix_dims"]
