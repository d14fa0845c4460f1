"""`neuronsweep search run CONFIG`: the fastest correct configuration of a user's kernel (a suites.custom
entry with a `search:` block: ParamSearch) or of run-level settings (a top-level `search:` entry:
SettingsSearch), found within a budget. A model's `tune:` (search/tune.py) runs a ParamSearch per shape.

A driver that calls the workflow once per round, not Snakemake checkpoints: each round's trials are
ordinary cases of the run `<run>-search-<name>` (readable ids, built and cached like any case, so a
rerun, a larger budget or a second search over an overlapping space reuses every build and measurement),
and a round's DAG holds that round's trials only, so Snakemake's re-evaluation never grows with the
search. The cost is one Snakemake start a round (seconds): `per_round` trials share it (search/calls.py).

Per round: the strategy proposes (search/space.py, search/strategy.py), the trials run as one
`snakemake --keep-going`, each trial's objective is the geometric mean of its cases' median latency (over
the entry's grid shapes, dtypes and impls: the same ranking as the geometric mean of the ratios to the
default configuration), and trials.csv is rewritten (search/trials.py). A failed or wrong (`correct:
false`) trial is kept with its reason and never wins. The default configuration is trial 0. At the end the
winner, the runner-up and the default are judged (search/finalists.py). `kill -9` at any point, then the
same command: the search resumes with the same proposals (replay) and never spends past its budget.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.atomic import replacing
from neuronsweep.backends import cpu_timing
from neuronsweep.backends.cores import default_threads
from neuronsweep.config import schema
from neuronsweep.config.backends import BACKENDS
from neuronsweep.config.run_config import RunConfig
from neuronsweep.config.suites import ConfigDocument, Suites
from neuronsweep.errors import UserError
from neuronsweep.host import devicelock
from neuronsweep.search import FINALIST_ROUNDS, build, calls, finalists, searches, strategy
from neuronsweep.search import space as search_space
from neuronsweep.search.space import Point
from neuronsweep.search.trials import PIPELINE, Best, TrialResult, as_listed, best, key
from neuronsweep.stages.run_setup import settle_run
from neuronsweep.store import layout
from neuronsweep.store.records import BuildRecord, CaptureRecord

SCREEN_CAPTURE: dict[str, int] = {"iterations": 5, "repeats": 1}  # the cheap rung's timing (capture overrides)
Say = Callable[[str], None]
Measure = Callable[[list[Point], int], list[TrialResult]]


def pick(cfg: ConfigDocument, name: str | None, source: str) -> tuple[str, dict]:
    """(kind, entry) of the config's search named `name`, or of its only one; one sentence otherwise."""
    found = searches(cfg)
    if name and name not in found:
        raise UserError(f"{source}: no search is named {name} (it has: {', '.join(found) or 'none'}); check --name.")
    if not name and len(found) != 1:
        if not found:
            raise UserError(f"{source}: no search: block (docs/autotune.md); add one to a suites.custom entry.")
        raise UserError(f"{source}: several searches ({', '.join(found)}); pass --name NAME.")
    return found[name] if name else next(iter(found.values()))


class Search:
    """One search: its folder (results/<run>/search/<name>/), its trials so far, its budget, and how one
    trial is measured. What a trial is differs by kind: ParamSearch (a suites.custom entry's params, a
    round one Snakemake call) and SettingsSearch (run-level settings, a run a trial)."""

    def __init__(
        self,
        cfg: ConfigDocument,
        entry: dict,
        source: str,
        cores: int | None = None,
        snakefile: str | Path | None = None,
    ) -> None:
        self.cfg, self.entry = cfg, entry
        self.cores = cores or default_threads()  # Snakemake's --cores per round: the CPUs this process may run on
        self.snakefile = snakefile  # the workflow its rounds run (None: calls.workflow_snakefile finds it)
        where = f"{source}: {self.named()}"
        self.space = search_space.parse(self.block(where), entry.get("params") or {}, where)
        budget = entry["search"].get("budget") or {}
        size = self.space.size()
        self.max_trials = int(budget.get("trials") or size or 0)
        if not self.max_trials:
            raise UserError(f"{where}: search.budget.trials is needed for a space this large; set it.")
        self.wall_s = budget.get("wall_seconds")
        self.max_builds = budget.get("builds")  # cases built and measured in full (cached or not)
        self.device_s = budget.get("device_seconds")  # seconds the trials held the device (lock spans)
        self.per_round = int(
            entry["search"].get("per_round") or schema.schema_default("suites.custom.search.per_round")
        )
        self.importance: dict[str, float] | None = None  # Optuna's, once the rounds are done (tpe, random, grid)
        self.run = f"{cfg['run']}-search-{entry['name']}"
        self.folder = layout.search_dir(cfg["run"], "search", entry["name"])

    @property
    def trials_csv(self) -> Path:
        """The search's record."""
        return self.folder / "trials.csv"

    def named(self) -> str:
        """How messages name this search in the config."""
        raise NotImplementedError

    def block(self, where: str) -> dict:
        """The search block the space is parsed from."""
        return self.entry["search"]

    def run_of(self, params: Point) -> str:
        """The run a trial's cases are in."""
        return self.run

    def preflight_config(self) -> ConfigDocument:
        """The config a round of the default configuration would run (what preflight plans)."""
        raise NotImplementedError

    def check_values(self, where: str) -> None:
        """Refuse, before any trial, a listed value that would not make a valid trial (none to check here)."""

    def labels(self) -> Point:
        """The labels every case of this search has in a round's summary beside its params (none here)."""
        return {}

    # ------------------------------------------------------------------ the record
    def recorded(self) -> pd.DataFrame:
        """trials.csv as far as the search got (empty before its first round)."""
        if not self.trials_csv.is_file():
            return pd.DataFrame()
        return pd.read_csv(self.trials_csv, keep_default_na=False, na_values=[""])

    def write(self, table: pd.DataFrame) -> None:
        """trials.csv replaced whole by `table`."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if "cases" in table:  # a count: a row without one (NaN) must not make the column 3.0, 4.0 ...
            table = table.assign(cases=table["cases"].astype("Int64"))
        with replacing(self.trials_csv) as tmp:
            table.to_csv(tmp, index=False)

    def params_of(self, row: pd.Series | dict) -> Point:
        """A recorded trial's params as the space has them (a conditional param that did not apply is absent)."""
        out = {}
        for name, spec in self.space.params.items():
            value = row.get(f"param.{name}") if hasattr(row, "get") else row[f"param.{name}"]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            values = search_space.values_of(spec)
            out[name] = int(value) if values is None else as_listed(value, values)
        return out

    def spent(self, table: pd.DataFrame) -> tuple[int, float]:
        """(trials measured, wall seconds spent in rounds) so far."""
        if table.empty:
            return 0, 0.0
        measured = table[table["measured"].map(verdict.flag)]
        configurations = {key(self.params_of(r)) for _, r in measured.iterrows()}
        return len(configurations), float(table.drop_duplicates(["round", "effort"])["round_s"].sum())

    def cases_per_trial(self) -> int:
        """The cases one configuration runs: the entry's grid points x dtypes x impls."""
        points = math.prod(len(v) if isinstance(v, list) else 1 for v in (self.entry.get("grid") or {}).values())
        return max(1, points * len(self.entry.get("dtype") or [1]) * len(self.entry.get("impl") or [1]))

    def builds_spent(self, table: pd.DataFrame) -> int:
        """The cases built so far, for the builds budget."""
        if table.empty or "cases" not in table:
            return 0
        full = table[table["measured"].map(verdict.flag) & (table.get("effort", PIPELINE) == PIPELINE)]
        return int(full["cases"].fillna(self.cases_per_trial()).sum())

    # ------------------------------------------------------------------ one round
    def preflight(self) -> None:
        """Plan the default configuration as a round would (the function loads, every param of the space
        is a keyword of it, a case runs on this backend): a bad search is one sentence here, not a
        failed round."""
        where = self.preflight_named()
        setup = settle_run(RunConfig.of(schema.validate(self.preflight_config(), source=where)))
        self.check_values(where)
        if not setup.plan.workloads:
            why = next(iter(setup.plan.unsupported.values()), "no case is planned")
            raise UserError(f"{where}: no case of it runs on {setup.backend} ({why}); search it where it runs.")

    def preflight_named(self) -> str:
        """How preflight's sentences name this search."""
        return self.named()

    def measure(self, trials: list[Point], n_round: int, capture: dict[str, int] | None = None) -> list[TrialResult]:
        """Run the trials; per trial: status, objective, reason, its cases."""
        raise NotImplementedError

    def screen(self, trials: list[Point], n_round: int) -> list[TrialResult]:
        """Halving's cheap rung (a suite's params only: ParamSearch)."""
        raise NotImplementedError

    def _snakemake(self, cfg: ConfigDocument, name: str) -> tuple[pd.DataFrame, Path]:
        snakefile = calls.workflow_snakefile(self.snakefile)
        return calls.snakemake_round(cfg, self.folder / "rounds", name, self.cores, snakefile)

    def _device_seconds(self, wids: list[str], run: str) -> float | None:
        """Seconds the trial's cases held the device: each capture's lock span, and a neuron build's
        (it runs on the cores); None when no record says."""
        workloads, held = layout.any_workloads_dir(run), []
        if workloads is None:
            return None
        for wid in wids:
            case = workloads / wid
            for kind in (CaptureRecord, BuildRecord):
                if not (case / kind.STAGE / kind.FILE).is_file():
                    continue
                try:
                    record = kind.read(case / kind.STAGE)
                except UserError:  # a damaged record costs the trial this figure, not the search
                    continue
                span = record.device_span if isinstance(record, CaptureRecord) else record.details.get("device_span")
                held.append(_span_seconds(span))
        known = [s for s in held if s is not None]
        return sum(known) if known else None

    def result_of(self, summary: pd.DataFrame, params: Point, log: Path, run: str) -> TrialResult:
        """One trial's result from a round's summary.csv: its cases' status, objective and costs."""
        rows = summary
        for name, value in (self.labels() | params).items():  # a tune's round holds every shape's trials
            rows = rows[rows[name].astype(str) == str(value)] if name in rows else rows.iloc[0:0]
        if rows.empty:
            return {
                "status": "missing",
                "objective_s": None,
                "reason": f"no case of this trial in summary.csv; see {log}",
            }
        if (rows["status"] != "unsupported").any():  # an impl this backend cannot run is not the trial's
            rows = rows[rows["status"] != "unsupported"]
        ok = rows["status"] == "ok"
        facts: TrialResult = {
            "run": run,
            "cases": len(rows),
            "device_s": self._device_seconds(list(rows["workload_id"]), run),
            "workload_ids": ";".join(rows["workload_id"]),
            "build_s": float(rows["compile_s"].fillna(0).sum()) if "compile_s" in rows else None,
            "cache_hits": int(rows["cache_hit"].map(verdict.flag).sum()) if "cache_hit" in rows else None,
        }
        if not ok.all():
            first = rows[~ok].iloc[0]
            return facts | {
                "status": str(first["status"]),
                "objective_s": None,
                "reason": f"{first['workload_id']}: {first['reason']}",
            }
        lat = rows["latency_median_s"].astype(float)
        spread = rows["latency_spread_s"].astype(float).max() if "latency_spread_s" in rows else None
        return facts | {
            "status": "ok",
            "objective_s": float(math.exp(lat.map(math.log).mean())),
            "latency_spread_s": None if spread is None or math.isnan(spread) else float(spread),
            "reason": "",
        }

    # ------------------------------------------------------------------ the loop and the winner
    def run_rounds(
        self, say: Say = print, measure: Measure | None = None, screen: Measure | None = None
    ) -> pd.DataFrame:
        """Propose, measure and record until the budget is spent (search/strategy.py); returns the trials
        table. `measure` and `screen`: (trials, round) -> results (the workflow's, unless given)."""
        if measure is None:  # the real workflow: its mistakes first, in one sentence, before any round
            self.preflight()
        self.folder.mkdir(parents=True, exist_ok=True)
        with calls.only_driver(self.folder / "driver.lock"):
            if self.space.strategy == "halving":
                self.importance = None
                return strategy.halving(self, say, measure or self.measure, screen or self.screen)
            table, self.importance = strategy.rounds(self, say, measure or self.measure)
            return table

    def conclude(self, table: pd.DataFrame, rounds: int = FINALIST_ROUNDS, say: Say = print) -> Best:
        """best.json: the winner, its speed-up over the default configuration with the evidence."""
        return finalists.conclude(self, table, rounds, say)

    def drive(self, say: Say, rounds: int) -> str:
        """The search run or resumed to the end of its budget and concluded; the line naming best.json."""
        best_json = self.conclude(self.run_rounds(say=say), rounds=rounds, say=say)
        found = self.folder / "best.json"
        return f"best.json: {found}" if best_json.get("winner") else f"no winner: {best_json.get('why')}"

    def status_lines(self) -> list[str]:
        """`neuronsweep search status`: the budget spent, the best so far and every failed trial's reason."""
        table = self.recorded()
        measured, spent = self.spent(table)
        lines = [f"search {self.entry['name']} ({self.space.strategy}, seed {self.space.seed}): {self.folder}"]
        if table.empty:
            return [*lines, "no round done yet: `neuronsweep search run CONFIG` starts it"]
        budget = f"{measured} of {self.max_trials} trials"
        if self.wall_s is not None:
            budget += f", {spent:.0f} of {self.wall_s} s"
        if "device_s" in table:
            budget += f", {table['device_s'].fillna(0).sum():.1f} device seconds" + (
                f" of {self.device_s}" if self.device_s is not None else ""
            )
        lines.append(f"rounds done: {int(table['round'].max()) + 1}; budget spent: {budget}")
        top = best(table)
        found = f"{top['objective_s'] * 1e6:.2f} us at {self.params_of(top)}" if top is not None else "none correct yet"
        lines.append(f"best so far: {found}")
        bad = table[table["status"] != "ok"]
        return lines + [f"  trial {int(r['trial'])} {r['status']}: {r['reason']}" for _, r in bad.iterrows()]


class ParamSearch(Search):
    """A suites.custom entry's params (its `search:` block): every trial a case of the run
    `<run>-search-<name>`, a round of trials one Snakemake call. A tune's search at one GEMM shape is one too,
    in the tune's run and folder, its cases told apart from other shapes' by `shape_labels`."""

    def __init__(
        self,
        cfg: ConfigDocument,
        entry: dict,
        source: str,
        cores: int | None = None,
        snakefile: str | Path | None = None,
        *,
        run: str | None = None,
        folder: Path | None = None,
        shape_labels: Point | None = None,
    ) -> None:
        super().__init__(cfg, entry, source, cores, snakefile)
        self.run = run or self.run
        self.folder = folder or self.folder
        self.shape_labels = shape_labels or {}

    def named(self) -> str:
        """'suites.custom (<name>)'."""
        return f"suites.custom ({self.entry['name']})"

    def preflight_named(self) -> str:
        """'suites.custom (<name>) search'."""
        return f"suites.custom ({self.entry['name']}) search"

    def labels(self) -> Point:
        """A tune's shape (m, k, n, dtype under the entry's names): its cases among every shape's."""
        return self.shape_labels

    def preflight_config(self) -> ConfigDocument:
        """A round of the default configuration."""
        return self.round_config([self.space.default])

    def round_config(self, trials: list[Point], capture: dict[str, int] | None = None) -> ConfigDocument:
        """The sweep config of one round: the entry's cases at each trial's params, as one suite."""
        entry = {k: v for k, v in self.entry.items() if k != "search"}
        fixed = entry.get("params") or {}
        entries = [{**entry, "params": {**fixed, **{k: [v] for k, v in t.items()}}} for t in trials]
        cfg = {**self.cfg, "run": self.run, "suites": {"custom": entries}}
        cfg.pop("search", None)  # a round is never a search of its own (no nested search target)
        if capture:
            cfg["capture"] = {**self.cfg.get("capture", {}), **capture}
        return cast(ConfigDocument, cfg)  # the validated document, its run and suites this round's

    def measure(self, trials: list[Point], n_round: int, capture: dict[str, int] | None = None) -> list[TrialResult]:
        """The trials as one Snakemake call; per trial: status, objective, reason, its cases."""
        summary, log = self._snakemake(
            self.round_config(trials, capture), f"round-{n_round}{'-screen' if capture else ''}"
        )
        return [self.result_of(summary, t, log, self.run) for t in trials]

    def screen(self, trials: list[Point], n_round: int) -> list[TrialResult]:
        """The cheap rung: on cpu, every configuration's cases run eagerly in one fresh process (one
        torch import for all), a few iterations each; on another backend, the workflow with a short capture."""
        return screen_together([(self, trials)], n_round)[0]


class SettingsSearch(Search):
    """A top-level `search:` entry: dotted config keys (the compiler's flags, a built-in kernel's tile),
    every trial the config with its settings in a run of its own, `<run>-search-<name>-<hash>`."""

    def named(self) -> str:
        """'search <name>'."""
        return f"search {self.entry['name']}"

    def preflight_config(self) -> ConfigDocument:
        """The default configuration's trial."""
        return self.trial_config(self.space.default)

    def check_values(self, where: str) -> None:
        """Every listed value a valid setting, before any trial runs."""
        for name, values in self.space.params.items():
            for value in search_space.values_of(values) or []:
                schema.validate(self.trial_config({**self.space.default, name: value}), source=f"{where}: {name}")

    def block(self, where: str) -> dict:
        """The search block with its default: each key's value in the config unless search.default gives one."""
        block = self.entry["search"]
        default = dict(block.get("default") or {})
        for name, values in block["space"].items():
            here = config_setting(self.cfg, name)
            if here is NO_KEY:
                raise UserError(f"{where}: search.space names {name}, which is no key of the config; fix it.")
            if name not in default:
                if here not in values:
                    raise UserError(
                        f"{where}: {name} is {here!r} in the config, which search.space.{name} does not list; "
                        "add it, or give search.default."
                    )
                default[name] = here
        return {**block, "default": default}

    def run_of(self, params: Point) -> str:
        """A run a trial, named by a hash of its settings (a setting may be any text)."""
        return f"{self.run}-{settings_digest(params)}"

    def trial_config(self, params: Point) -> ConfigDocument:
        """A run-level trial's config: the user's with the trial's settings, only the searched suites."""
        cfg = copy.deepcopy(self.cfg)
        cfg.pop("search", None)
        for name, value in params.items():
            set_setting(cfg, name, value)
        wanted = self.entry["search"].get("suites")
        suites: dict[str, Any] = dict(cfg["suites"])
        if wanted:
            suites = {k: v for k, v in suites.items() if k in wanted}
        suites.get("custom", [])[:] = [{k: v for k, v in e.items() if k != "search"} for e in suites.get("custom", [])]
        cfg["suites"] = cast(Suites, suites)
        return cast(ConfigDocument, {**cfg, "run": self.run_of(params)})  # the user's, the trial's settings in it

    def measure(self, trials: list[Point], n_round: int, capture: dict[str, int] | None = None) -> list[TrialResult]:
        """One Snakemake call a trial (each its own run); per trial: status, objective, reason, its cases."""
        out = []
        for i, t in enumerate(trials):
            summary, log = self._snakemake(self.trial_config(t), f"round-{n_round}-{i}")
            out.append(self.result_of(summary, {}, log, self.run_of(t)))
        return out


# ---------------------------------------------------------------------- several searches at once
def merged_round(batch: list[tuple[ParamSearch, list[Point]]]) -> ConfigDocument:
    """One config running several searches' trials (a tune's shapes, its candidates): their suites.custom
    entries side by side in the first search's run."""
    cfg = batch[0][0].round_config([])
    cfg["suites"] = {"custom": [e for s, trials in batch for e in s.round_config(trials)["suites"]["custom"]]}
    return cfg


def screen_together(batch: list[tuple[ParamSearch, list[Point]]], n_round: int) -> list[list[TrialResult]]:
    """Halving's cheap rung of several searches at once (a tune's shapes): on cpu one fresh process times
    every configuration of every search eagerly (one torch import for all), a few iterations each; on
    another backend, each search's workflow with a short capture. Per call, a result per trial."""
    first = batch[0][0]
    cfg = merged_round(batch)
    setup = settle_run(RunConfig.of(schema.validate(cfg, source=f"search {first.entry['name']}")))
    if not BACKENDS[setup.backend].retimed_here:  # its programs run on a device: each search's own workflow
        return [s.measure(trials, n_round, capture=SCREEN_CAPTURE) for s, trials in batch]
    cases = [
        [
            sc.workload_id
            for sc in setup.plan.scenarios
            if _labelled(sc.labels, {**s.shape_labels, **t}) and sc.workload_id in setup.plan.workloads
        ]
        for s, trials in batch
        for t in trials
    ]
    jobs: list[cpu_timing.ScreenJob] = [
        {
            "spec": setup.plan.workloads[w],
            "threads": default_threads(),
            "warmup": 2,
            "iterations": SCREEN_CAPTURE["iterations"],
        }
        for wids in cases
        for w in wids
    ]
    lock = first.cfg.get("capture", {}).get("device_lock") or schema.schema_default("capture.device_lock")
    with devicelock.held(lock, f"neuronsweep search {first.entry['name']}: screening") as span:
        got = iter(cpu_timing.screen_in_process(jobs, timeout_s=600 + 10 * len(jobs)))
        held_s = time.time() - span["acquired_unix"]
    results: list[TrialResult] = []
    for wids in cases:
        taken = [next(got) for _ in wids]
        errors = [f"{w}: {r['error']}" for w, r in zip(wids, taken) if "error" in r]
        if not wids or errors:
            why = errors[0] if errors else "no case of this configuration is supported here"
            results.append({"status": "failed", "objective_s": None, "reason": why, "cases": len(wids)})
            continue
        medians = [statistics.median(r["samples"]) for r in taken]
        results.append(
            {
                "status": "ok",
                "objective_s": math.exp(sum(map(math.log, medians)) / len(medians)),
                "reason": "",
                "cases": len(wids),
                "workload_ids": ";".join(wids),
                "device_s": held_s / len(cases),  # the screen's lock span, shared alike
            }
        )
    it = iter(results)
    return [[next(it) for _ in trials] for _, trials in batch]


def _labelled(labels: Point, params: Point) -> bool:
    return all(str(labels.get(k)) == str(v) for k, v in params.items())


def _span_seconds(span: object) -> float | None:
    """How long a devicelock.held span held the device (None: no span, or one without both ends)."""
    if not isinstance(span, dict):
        return None
    try:
        return float(span["released_unix"]) - float(span["acquired_unix"])
    except (KeyError, TypeError, ValueError):
        return None


def load(config_path: str, name: str | None, cores: int | None = None, snakefile: str | None = None) -> Search:
    """The search `name` of a config file (its only one when None): a custom or a config search."""
    cfg = schema.load(config_path)
    kind, entry = pick(cfg, name, config_path)
    found = build(kind, cfg, entry, config_path, cores, snakefile)
    if not isinstance(found, Search):
        raise UserError(f"{config_path}: {name} is a {kind}, not a search of params or settings.")
    return found


NO_KEY = object()  # config_setting's answer for a key neither the config nor its schema has


def config_setting(cfg: ConfigDocument, dotted: str) -> object:
    """A dotted run-level key's value: the config's, else the schema's default for a key it leaves out
    (suites.matmul.nki_tile.n; None where that default is null, as neuron.auto_cast's), else NO_KEY."""
    node: Any = cfg  # walked by the dotted key's parts
    try:
        for part in dotted.split("."):
            node = node[part]
        return node
    except (KeyError, TypeError):
        pass
    try:
        return schema.schema_default(dotted)
    except (KeyError, TypeError):
        return NO_KEY


def settings_digest(settings: Point) -> str:
    """A short hash of run-level settings: the name of the run that measures them (a setting may be any text)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]


def set_setting(cfg: ConfigDocument, dotted: str, value: object) -> None:
    """Set a dotted key in a config, making the sections it needs."""
    *parents, last = dotted.split(".")
    node: Any = cfg  # walked by the dotted key's parts
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
