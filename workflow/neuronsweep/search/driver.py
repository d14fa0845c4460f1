"""`neuronsweep search run CONFIG`: the fastest correct configuration of a user's kernel (a suites.custom
entry with a `search:` block: ParamSearch) or of run-level settings (a top-level `search:` entry:
SettingsSearch), found within a budget. A model's `tune:` (search/tune.py) runs a ParamSearch per shape.

A driver that calls the workflow once per round, not Snakemake checkpoints: each round's trials are
ordinary cases of the run `<run>-search-<name>` (readable ids, built and cached like any case, so a
rerun, a larger budget or a second search over an overlapping space reuses every build and measurement),
and a round's DAG holds that round's trials only, so Snakemake's re-evaluation never grows with the
search. The cost is one Snakemake start a round (seconds): `per_round` trials share it.

Per round: the strategy proposes (search/space.py), the trials run as one `snakemake --keep-going`,
each trial's objective is the geometric mean of its cases' median latency (over the entry's grid shapes,
dtypes and impls: the same ranking as the geometric mean of the ratios to the default configuration),
and trials.csv is rewritten. A failed or wrong (`correct: false`) trial is kept with its reason and never
wins. The default configuration is trial 0. At the end, on cpu, the winner, the runner-up and the default
are timed again in fresh processes, every one of them in each (runs/interleave.py), and judged by
analysis/verdict.py: the winner's speed-up over the default with its 95 % interval, and "tie" where the
best two are not told apart. `kill -9` at any point, then the same command: the search resumes with the
same proposals (replay, search_space.py) and never spends past its budget.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TypedDict

import pandas as pd
import yaml

from neuronsweep.analysis import verdict
from neuronsweep.atomic import replacing, write_json
from neuronsweep.backends import cpu_timing
from neuronsweep.backends.cores import default_threads
from neuronsweep.config import schema
from neuronsweep.config.backends import BACKENDS
from neuronsweep.errors import UserError
from neuronsweep.host import devicelock
from neuronsweep.runs import interleave
from neuronsweep.search import FINALIST_ROUNDS, searches
from neuronsweep.search import page as search_page
from neuronsweep.search import space as search_space
from neuronsweep.stages.run_setup import settle_run
from neuronsweep.store import layout
from neuronsweep.store.records import BuildRecord, CaptureRecord, Timing
from neuronsweep.store.records import timing as stored_timing


class TrialResult(TypedDict, total=False):
    """What measuring one configuration gave: a row of trials.csv less its params and round bookkeeping."""

    status: str  # ok, failed, wrong, unsupported, missing
    objective_s: float | None  # the geometric mean of its cases' median latency (ok only)
    reason: str  # why not ok: its first case's reason, with the case's id
    cases: int  # cases it ran (grid points x dtypes x impls)
    workload_ids: str  # those cases, joined by ";" (a CSV cell)
    latency_spread_s: float | None  # the largest spread of its cases' timings
    device_s: float | None  # seconds its cases held the device
    run: str  # the run its cases are in
    build_s: float | None
    cache_hits: int | None


SCREEN, PIPELINE = "screen", "pipeline"  # trials.csv's effort: halving's cheap rung, or the workflow's cases
SCREEN_CAPTURE = {"iterations": 5, "repeats": 1}  # the cheap rung's timing


def pick(cfg: dict, name: str | None, source: str) -> tuple[str, dict]:
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
    """One search: its folder (results/<run>/search/<name>/), its trials so far, its budget, the strategy's
    loop and the finalists. What a trial is differs by kind: ParamSearch (a suites.custom entry's params, a
    round one Snakemake call) and SettingsSearch (run-level settings, a run a trial)."""

    def __init__(
        self, cfg: dict, entry: dict, source: str, cores: int | None = None, snakefile: str | Path | None = None
    ):
        self.cfg, self.entry = cfg, entry
        self.cores = cores or default_threads()  # Snakemake's --cores per round: the CPUs this process may run on
        self.snakefile = snakefile  # the workflow its rounds run (None: workflow_snakefile finds it each round)
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
        self._importance: dict | None = None  # Optuna's, once the rounds are done (tpe, random, grid)
        self.run = f"{cfg['run']}-search-{entry['name']}"
        self.folder = Path("results") / cfg["run"] / "search" / entry["name"]
        self.trials_csv = self.folder / "trials.csv"
        self.shape_labels: dict = {}  # a tune's search: the labels of its one shape (its rounds share a call)

    def named(self) -> str:
        """How messages name this search in the config."""
        raise NotImplementedError

    def block(self, where: str) -> dict:
        """The search block the space is parsed from."""
        return self.entry["search"]

    def run_of(self, params: dict) -> str:
        """The run a trial's cases are in."""
        return self.run

    def preflight_config(self) -> dict:
        """The config a round of the default configuration would run (what preflight plans)."""
        raise NotImplementedError

    def check_values(self, where: str) -> None:
        """Refuse, before any trial, a listed value that would not make a valid trial (none to check here)."""

    # ------------------------------------------------------------------ the record
    def recorded(self) -> pd.DataFrame:
        """trials.csv as far as the search got (empty before its first round)."""
        if not self.trials_csv.is_file():
            return pd.DataFrame()
        return pd.read_csv(self.trials_csv, keep_default_na=False, na_values=[""])

    def params_of(self, row) -> dict:
        """A recorded trial's params as the space has them (a conditional param that did not apply is absent)."""
        out = {}
        for name, spec in self.space.params.items():
            value = row.get(f"param.{name}") if hasattr(row, "get") else row[f"param.{name}"]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            values = search_space.values_of(spec)
            out[name] = int(value) if values is None else _as_listed(value, values)
        return out

    def spent(self, table: pd.DataFrame) -> tuple[int, float]:
        """(trials measured, wall seconds spent in rounds) so far."""
        if table.empty:
            return 0, 0.0
        measured = table[table["measured"].map(verdict.flag)]
        configurations = {_key(self.params_of(r)) for _, r in measured.iterrows()}
        return len(configurations), float(table.drop_duplicates(["round", "effort"])["round_s"].sum())

    def preflight(self) -> None:
        """Plan the default configuration as a round would (the function loads, every param of the space
        is a keyword of it, a case runs on this backend): a bad search is one sentence here, not a
        failed round."""
        where = self.preflight_named()
        setup = settle_run(schema.validate(self.preflight_config(), source=where))
        self.check_values(where)
        if not setup.plan.workloads:
            why = next(iter(setup.plan.unsupported.values()), "no case is planned")
            raise UserError(f"{where}: no case of it runs on {setup.backend} ({why}); search it where it runs.")

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
    def preflight_named(self) -> str:
        """How preflight's sentences name this search."""
        return self.named()

    def measure(self, trials: list[dict], n_round: int, capture: dict | None = None) -> list[TrialResult]:
        """Run the trials; per trial: status, objective, reason, its cases."""
        raise NotImplementedError

    def _snakemake(self, cfg: dict, name: str) -> tuple[pd.DataFrame, Path]:
        return snakemake_round(cfg, self.folder / "rounds", name, self.cores, workflow_snakefile(self.snakefile))

    def _device_seconds(self, wids: list[str], run: str) -> float | None:
        """Seconds the trial's cases held the device: each capture's lock span, and a neuron build's
        (it runs on the cores); None when no record says."""
        workloads, held = _workloads_dir(run), []
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

    def result_of(self, summary: pd.DataFrame, params: dict, log: Path, run: str) -> TrialResult:
        """One trial's result from a round's summary.csv: its cases' status, objective and costs."""
        rows = summary
        for name, value in self.shape_labels.items():  # a tune's round holds every shape's trials
            rows = rows[rows[name].astype(str) == str(value)] if name in rows else rows.iloc[0:0]
        for name, value in params.items():
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
            facts.update(
                {
                    "status": str(first["status"]),
                    "objective_s": None,
                    "reason": f"{first['workload_id']}: {first['reason']}",
                }
            )
            return facts
        lat = rows["latency_median_s"].astype(float)
        spread = rows["latency_spread_s"].astype(float).max() if "latency_spread_s" in rows else None
        facts.update(
            {
                "status": "ok",
                "objective_s": float(math.exp(lat.map(math.log).mean())),
                "latency_spread_s": None if spread is None or math.isnan(spread) else float(spread),
                "reason": "",
            }
        )
        return facts

    # ------------------------------------------------------------------ the loop
    def run_rounds(self, say=print, measure=None, screen=None) -> pd.DataFrame:
        """Propose, measure and record until the budget is spent; returns the trials table. `measure`
        and `screen`: (trials, round) -> results, replaced in tests."""
        if measure is None:  # the real workflow: its mistakes first, in one sentence, before any round
            self.preflight()
        measure = measure or self.measure
        self.folder.mkdir(parents=True, exist_ok=True)
        with only_driver(self.folder / "driver.lock"):
            if self.space.strategy == "halving":
                return self._halving(say, measure, screen or self.screen)
            return self._rounds(say, measure)

    def _rounds(self, say, measure) -> pd.DataFrame:
        table = self.recorded()
        study = search_space.Study(self.space)
        study.replay(
            [
                [(self.params_of(r), _objective(r)) for _, r in rows.iterrows()]
                for _, rows in table.groupby("round", sort=True)
            ]
            if not table.empty
            else []
        )
        measured, spent = self.spent(table)
        n_round = int(table["round"].max()) + 1 if not table.empty else 0
        size = self.space.size()
        while measured < self.max_trials:
            last = table[table["round"] == n_round - 1]["round_s"] if not table.empty else pd.Series(dtype=float)
            estimate = float(last.iloc[0]) if len(last) else 0.0
            over = self._device_over(table, n_round)
            if over:
                say(over)
                break
            if self.wall_s is not None and spent + estimate > float(self.wall_s):
                say(
                    f"search: stopped before round {n_round}: {spent:.0f} s spent, a round takes about "
                    f"{estimate:.0f} s, budget {self.wall_s} s"
                )
                break
            seen = {_key(self.params_of(r)) for _, r in table.iterrows()}
            if size is not None and len(seen) >= size:
                say(f"search: every one of the {size} points of the space is measured")
                break
            room = min(self.per_round, self.max_trials - measured)
            if self.max_builds is not None:
                room = min(room, (int(self.max_builds) - self.builds_spent(table)) // self.cases_per_trial())
                if room <= 0:
                    say(f"search: stopped before round {n_round}: the budget of {self.max_builds} builds is spent")
                    break
            asked: list = []
            new: list[dict] = []
            rows: list[dict] = []
            for _ in range(3 * self.per_round):  # a repeated proposal is told the earlier result, not run
                if len(new) >= room:
                    break
                trial = study.ask()
                asked.append(trial)
                if _key(trial.params) in seen | {_key(p) for p in new}:
                    continue
                new.append(trial.params)
            t0 = time.monotonic()
            results = {_key(p): r for p, r in zip(new, measure(new, n_round))} if new else {}
            round_s = time.monotonic() - t0
            earlier = {_key(self.params_of(r)): r for _, r in table.iterrows()}
            for trial in asked:
                key = _key(trial.params)
                if key in results:
                    got, fresh = results.pop(key), True
                else:
                    prior = earlier[key] if key in earlier else next(r for r in rows if _key(_params(r)) == key)
                    got = {
                        "status": prior["status"],
                        "objective_s": _objective(prior),
                        "reason": "same point as an earlier trial",
                    }
                    fresh = False
                study.tell(trial, got["objective_s"] if got["status"] == "ok" else None)
                rows.append(
                    {
                        "trial": len(table) + len(rows),
                        "round": n_round,
                        **{f"param.{k}": v for k, v in trial.params.items()},
                    }
                    | {"measured": fresh, "round_s": round_s, "effort": PIPELINE}
                    | got
                )
            table = pd.concat([table, pd.DataFrame(rows)], ignore_index=True)
            self._write(table)
            measured, spent = measured + len(new), spent + round_s
            if not new:  # 3 x per_round proposals, every one measured already: the sampler has converged
                say(f"search: stopped after round {n_round}: the strategy proposes only points measured already")
                break
            best = _best(table)
            say(
                f"search {self.entry['name']}: round {n_round} done, {measured} of {self.max_trials} trials, "
                + (
                    f"best so far {best['objective_s'] * 1e6:.1f} us at {self.params_of(best)}"
                    if best is not None
                    else "no correct trial yet"
                )
            )
            n_round += 1
        self._importance = study.importance()
        return table

    # ------------------------------------------------------------------ halving
    def _halving(self, say, measure, screen) -> pd.DataFrame:
        """Successive halving, measurement effort as the resource: budget.trials configurations screened
        (cpu: timed eagerly in one process, about their measured time each; elsewhere a short capture),
        then the best 1/eta of them and the default measured in full (the workflow: build, profile,
        correctness). Each rung is recorded when done; a resumed search skips what is."""
        table = self.recorded()
        configs = search_space.points(self.space, self.max_trials)
        rungs = [configs]
        for rung in (0, 1):
            todo = self._pending(table, rungs[rung], rung)
            over = self._device_over(table, rung) if todo else None
            if over:
                say(over)
                break
            if todo:
                t0 = time.monotonic()
                results = (screen if rung == 0 else measure)(todo, rung)
                round_s = time.monotonic() - t0
                rows = [
                    {"trial": len(table) + i, "round": rung, **{f"param.{k}": v for k, v in t.items()}}
                    | {"measured": True, "round_s": round_s, "effort": SCREEN if rung == 0 else PIPELINE}
                    | got
                    for i, (t, got) in enumerate(zip(todo, results))
                ]
                table = pd.concat([table, pd.DataFrame(rows)], ignore_index=True)
                self._write(table)
                say(f"search {self.entry['name']}: rung {rung} done ({len(todo)} configurations, {round_s:.0f} s)")
            if rung == 0:
                screened = table[(table["effort"] == SCREEN) & (table["status"] == "ok")].sort_values("objective_s")
                keep = max(1, math.ceil(len(configs) / self.space.eta))
                survivors = [self.params_of(r) for _, r in screened.head(keep).iterrows()]
                if self.max_builds is not None:  # the full rung builds; the default is one of them
                    survivors = survivors[: max(0, int(self.max_builds) // self.cases_per_trial() - 1)]
                if self.space.default not in survivors:
                    survivors.append(dict(self.space.default))  # the speed-up is over it: measured in full too
                rungs.append(survivors)
        self._importance = None
        return table

    def _device_over(self, table: pd.DataFrame, n_round: int) -> str | None:
        """Why no round may start: the device seconds spent, plus what the last round took, would pass
        budget.device_seconds (None: it may)."""
        if self.device_s is None or table.empty or "device_s" not in table:
            return None
        spent = float(table["device_s"].fillna(0).sum())
        last = float(table[table["round"] == table["round"].max()]["device_s"].fillna(0).sum())
        if spent + last <= float(self.device_s):
            return None
        return (
            f"search: stopped before round {n_round}: {spent:.1f} device seconds spent, a round takes about "
            f"{last:.1f}, budget {self.device_s}"
        )

    def _pending(self, table: pd.DataFrame, configs: list[dict], rung: int) -> list[dict]:
        done = set()
        if not table.empty:
            effort = SCREEN if rung == 0 else PIPELINE
            done = {_key(self.params_of(r)) for _, r in table[table["effort"] == effort].iterrows()}
        return [c for c in configs if _key(c) not in done]

    def screen(self, trials: list[dict], n_round: int) -> list[TrialResult]:
        """Halving's cheap rung (a suite's params only: ParamSearch)."""
        raise NotImplementedError

    def _write(self, table: pd.DataFrame) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if "cases" in table:  # a count: a row without one (NaN) must not make the column 3.0, 4.0 ...
            table = table.assign(cases=table["cases"].astype("Int64"))
        with replacing(self.trials_csv) as tmp:
            table.to_csv(tmp, index=False)

    # ------------------------------------------------------------------ the winner
    def conclude(self, table: pd.DataFrame, rounds: int = FINALIST_ROUNDS, say=print) -> dict:
        """best.json: the winner, its speed-up over the default configuration with the evidence."""
        full = table["effort"] == PIPELINE if "effort" in table else True
        ok = table[(table["status"] == "ok") & table["measured"].map(verdict.flag) & full].sort_values("objective_s")
        default_rows = ok[ok.apply(lambda r: self.params_of(r) == self.space.default, axis=1)]
        out: dict = {
            "suite": self.entry["name"],
            "strategy": self.space.strategy,
            "seed": self.space.seed,
            "trials": len({_key(self.params_of(r)) for _, r in table.iterrows()}),
            "failed_or_wrong": int((table["status"] != "ok").sum()),
            "default": self.space.default,
            "importance": self._importance,
        }
        if ok.empty:
            out |= {"winner": None, "why": "no trial was ok and correct"}
            write_json(self.folder / "best.json", out)
            return out
        best = ok.iloc[0]
        out |= {"winner": self.params_of(best), "winner_objective_s": float(best["objective_s"])}
        if out["winner"] == self.space.default:
            out["winner_is_default"] = True  # no speed-up to claim: the default was the fastest measured
        if not default_rows.empty:
            out["default_objective_s"] = float(default_rows.iloc[0]["objective_s"])
            out["speedup_stored"] = out["default_objective_s"] / out["winner_objective_s"]
        out |= self._finalists(ok, default_rows, rounds, say)
        write_json(self.folder / "best.json", out)
        with replacing(self.folder / "search.html") as tmp:
            tmp.write_text(search_page.render(self.entry["name"], out, table))
        return out

    def _finalists(self, ok: pd.DataFrame, default_rows: pd.DataFrame, rounds: int, say) -> dict:
        """The winner against the default and the runner-up: on cpu timed again together in fresh processes;
        elsewhere (the programs need the device) as their captures stored them, judged by the same rule
        (rounds in processes of their own are tested, one process a case is not judged and says so)."""
        workloads = _workloads_dir(self.run_of(self.params_of(ok.iloc[0])))
        if rounds <= 0 or workloads is None:
            why = "rounds 0" if rounds <= 0 else "no trial's cases were found"
            return {"evidence": f"stored timings only ({why}): one process a case, so no interval is claimed"}
        picks = {"winner": ok.iloc[0]}
        if len(ok) > 1:
            picks["runner_up"] = ok.iloc[1]
        if not default_rows.empty and default_rows.index[0] not in ok.index[:2]:
            picks["default"] = default_rows.iloc[0]
        runs, backend_dir = workloads.parent.parent.parent, workloads.parent.name
        if BACKENDS[backend_dir].retimed_here:
            shapes = zip(*(row["workload_ids"].split(";") for row in picks.values()))  # the finalists' case of a shape
            groups = [
                {
                    f"{role}:{wid}": layout.workload_dir(runs / self.run_of(self.params_of(row)), backend_dir, wid)
                    / "build"
                    for (role, row), wid in zip(picks.items(), wids)
                }
                for wids in shapes
            ]
            timed: dict[str, Timing | None] = dict(
                interleave.time_together(groups, rounds, seed=self.space.seed, say=say)
            )
            on = "fresh processes"
            result: dict = {
                "evidence": f"{rounds} fresh processes, each timing the finalists' programs of every shape in "
                "alternation, in a random order"
            }
        else:
            timed = {
                f"{role}:{wid}": stored_timing(
                    layout.workload_dir(runs / self.run_of(self.params_of(row)), backend_dir, wid)
                )
                for role, row in picks.items()
                for wid in row["workload_ids"].split(";")
            }
            on = "stored timings"
            result = {
                "evidence": f"stored timings (the {backend_dir} backend's programs run on its device): judged where a "
                "case's rounds ran in processes of their own (capture.rounds_in_processes), else one process a "
                "case, not judged"
            }
        default_is = (
            "runner_up"
            if not default_rows.empty and len(ok) > 1 and default_rows.index[0] == ok.index[1]
            else "default"
        )
        for other, label in ((default_is, "vs_default"), ("runner_up", "vs_runner_up")):
            if other not in picks:
                continue
            pairs = [  # A = the other, B = the winner
                (timed[f"{other}:{o}"], timed[f"winner:{w}"])
                for w, o in zip(picks["winner"]["workload_ids"].split(";"), picks[other]["workload_ids"].split(";"))
            ]
            verdicts = verdict.judge(pairs)
            result[label] = [
                {
                    "said": v.said,
                    "speedup": None if v.ratio is None else 1 / v.ratio,
                    "speedup_low": None if v.ci_high is None else 1 / v.ci_high,
                    "speedup_high": None if v.ci_low is None else 1 / v.ci_low,
                    "on": on,
                }
                for v in verdicts
            ]
        if "runner_up" in picks and not any(v["said"] == verdict.FASTER for v in result.get("vs_runner_up", [])):
            result["tie"] = [self.params_of(picks["winner"]), self.params_of(picks["runner_up"])]
        return result


class ParamSearch(Search):
    """A suites.custom entry's params (its `search:` block): every trial a case of the run
    `<run>-search-<name>`, a round of trials one Snakemake call."""

    def named(self) -> str:
        """'suites.custom (<name>)'."""
        return f"suites.custom ({self.entry['name']})"

    def preflight_named(self) -> str:
        """'suites.custom (<name>) search'."""
        return f"suites.custom ({self.entry['name']}) search"

    def preflight_config(self) -> dict:
        """A round of the default configuration."""
        return self.round_config([self.space.default])

    def round_config(self, trials: list[dict], capture: dict | None = None) -> dict:
        """The sweep config of one round: the entry's cases at each trial's params, as one suite."""
        entry = {k: v for k, v in self.entry.items() if k != "search"}
        fixed = entry.get("params") or {}
        entries = [{**entry, "params": {**fixed, **{k: [v] for k, v in t.items()}}} for t in trials]
        cfg = {**self.cfg, "run": self.run, "suites": {"custom": entries}}
        cfg.pop("search", None)  # a round is never a search of its own (no nested search target)
        if capture:
            cfg["capture"] = {**cfg.get("capture", {}), **capture}
        return cfg

    def measure(self, trials: list[dict], n_round: int, capture: dict | None = None) -> list[TrialResult]:
        """The trials as one Snakemake call; per trial: status, objective, reason, its cases."""
        summary, log = self._snakemake(
            self.round_config(trials, capture), f"round-{n_round}{'-screen' if capture else ''}"
        )
        return [self.result_of(summary, t, log, self.run) for t in trials]

    def screen(self, trials: list[dict], n_round: int) -> list[TrialResult]:
        """The cheap rung: on cpu, every configuration's cases run eagerly in one fresh process (one
        torch import for all), a few iterations each; on another backend, the workflow with a short capture."""
        return screen_together([(self, trials)], n_round)[0]


class SettingsSearch(Search):
    """A top-level `search:` entry: dotted config keys (the compiler's flags, a built-in kernel's tile),
    every trial the config with its settings in a run of its own, `<run>-search-<name>-<hash>`."""

    def named(self) -> str:
        """'search <name>'."""
        return f"search {self.entry['name']}"

    def preflight_config(self) -> dict:
        """The default configuration's trial."""
        return self.trial_config(self.space.default)

    def check_values(self, where: str) -> None:
        """Every listed value a valid setting, before any trial runs."""
        for key, values in self.space.params.items():
            for value in search_space.values_of(values) or []:
                schema.validate(self.trial_config({**self.space.default, key: value}), source=f"{where}: {key}")

    def block(self, where: str) -> dict:
        """The search block with its default: each key's value in the config unless search.default gives one."""
        block = self.entry["search"]
        default = dict(block.get("default") or {})
        for key, values in block["space"].items():
            here = config_setting(self.cfg, key)
            if here is NO_KEY:
                raise UserError(f"{where}: search.space names {key}, which is no key of the config; fix it.")
            if key not in default:
                if here not in values:
                    raise UserError(
                        f"{where}: {key} is {here!r} in the config, which search.space.{key} does not list; "
                        "add it, or give search.default."
                    )
                default[key] = here
        return {**block, "default": default}

    def run_of(self, params: dict) -> str:
        """A run a trial, named by a hash of its settings (a setting may be any text)."""
        return f"{self.run}-{settings_digest(params)}"

    def trial_config(self, params: dict) -> dict:
        """A run-level trial's config: the user's with the trial's settings, only the searched suites."""
        cfg = copy.deepcopy(self.cfg)
        cfg.pop("search", None)
        for key, value in params.items():
            set_setting(cfg, key, value)
        wanted = self.entry["search"].get("suites")
        if wanted:
            cfg["suites"] = {k: v for k, v in cfg["suites"].items() if k in wanted}
        cfg["suites"].get("custom", [])[:] = [
            {k: v for k, v in e.items() if k != "search"} for e in cfg["suites"].get("custom", [])
        ]
        return {**cfg, "run": self.run_of(params)}

    def measure(self, trials: list[dict], n_round: int, capture: dict | None = None) -> list[TrialResult]:
        """One Snakemake call a trial (each its own run); per trial: status, objective, reason, its cases."""
        out = []
        for i, t in enumerate(trials):
            summary, log = self._snakemake(self.trial_config(t), f"round-{n_round}-{i}")
            out.append(self.result_of(summary, {}, log, self.run_of(t)))
        return out


KINDS: dict[str, type[Search]] = {"custom": ParamSearch, "config": SettingsSearch}  # searches()'s kinds


def screen_together(calls: list[tuple[ParamSearch, list[dict]]], n_round: int) -> list[list[TrialResult]]:
    """Halving's cheap rung of several searches at once (a tune's shapes): on cpu one fresh process times
    every configuration of every search eagerly (one torch import for all), a few iterations each; on
    another backend, each search's workflow with a short capture. Per call, a result per trial."""
    first = calls[0][0]
    cfg = first.round_config([])
    cfg["suites"] = {"custom": [e for s, trials in calls for e in s.round_config(trials)["suites"]["custom"]]}
    setup = settle_run(schema.validate(cfg, source=f"search {first.entry['name']}"))
    if not BACKENDS[setup.backend].retimed_here:  # its programs run on a device: each search's own workflow
        return [s.measure(trials, n_round, capture=SCREEN_CAPTURE) for s, trials in calls]
    cases = [
        [
            sc.workload_id
            for sc in setup.plan.scenarios
            if _labelled(sc.labels, {**s.shape_labels, **t}) and sc.workload_id in setup.plan.workloads
        ]
        for s, trials in calls
        for t in trials
    ]
    jobs = [
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
    return [[next(it) for _ in trials] for _, trials in calls]


def workflow_snakefile(given: str | Path | None = None) -> Path:
    """The Snakefile a search's rounds run: the one given (the workflow's rules pass their own), else
    ./Snakefile where the search is run from a workflow's folder, else the checkout's beside this package
    (pip install -e .); one sentence when there is none."""
    checkout = Path(__file__).resolve().parents[3] / "Snakefile"
    found = Path(given) if given else Path("Snakefile") if Path("Snakefile").is_file() else checkout
    if not found.is_file():
        raise UserError(
            f"a search runs the workflow's Snakefile, and there is none at {found}: pass --snakefile, or run it "
            "from the workflow's folder (a checkout of neuron-sweep)."
        )
    return found.resolve()


def snakemake_round(cfg: dict, rounds: Path, name: str, cores: int, snakefile: Path) -> tuple[pd.DataFrame, Path]:
    """One Snakemake call on `cfg` (rounds/<name>.yaml and .log) with `snakefile`: its run's summary.csv."""
    rounds.mkdir(parents=True, exist_ok=True)
    config_file = rounds / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(cfg, sort_keys=False))
    log = config_file.with_suffix(".log")
    argv = [_snakemake(), "-s", str(snakefile), "--cores", str(cores), "--configfile", str(config_file)]
    # --nolock: the round's outputs are this search's own run, and only_driver already keeps a second driver
    # of it out; Snakemake's lock would only outlive a killed driver and refuse the resumed one
    with log.open("w") as out:
        subprocess.run([*argv, "--keep-going", "--rerun-incomplete", "--nolock"], stdout=out, stderr=subprocess.STDOUT)
    summary = Path("results") / cfg["run"] / "summary.csv"
    if not summary.is_file():  # up to date is fine: a round killed after its summary is found done
        tail = log.read_text().strip().splitlines()[-3:]
        raise UserError(f"{name} wrote no summary.csv ({' / '.join(tail)}); the whole log: {log}.")
    return pd.read_csv(summary), log


@contextlib.contextmanager
def only_driver(path: Path):
    """One driver per search at a time (an OS lock: released by the kernel when a driver is killed)."""
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{path.parent}: another `neuronsweep search run` of this search is running; wait for it."
            ) from None
        yield


def _labelled(labels: dict, params: dict) -> bool:
    return all(str(labels.get(k)) == str(v) for k, v in params.items())


def _span_seconds(span) -> float | None:
    """How long a devicelock.held span held the device (None: no span, or one without both ends)."""
    if not isinstance(span, dict):
        return None
    try:
        return float(span["released_unix"]) - float(span["acquired_unix"])
    except (KeyError, TypeError, ValueError):
        return None


def _workloads_dir(run: str) -> Path | None:
    """A trial's run's cases folder (results/<run>/<backend>/workloads), whichever backend ran it."""
    found = sorted((Path("results") / run).glob("*/workloads"))
    return found[0] if found else None


def _snakemake() -> str:
    here = Path(sys.executable).parent / "snakemake"
    return str(here) if here.is_file() else "snakemake"


def _key(params: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


def _params(row: dict) -> dict:
    """A trials.csv row's params (its `param.<name>` columns) by name."""
    return {k[len("param.") :]: v for k, v in row.items() if k.startswith("param.")}


def _objective(row) -> float | None:
    """A trial's objective as its record gives it: a finite number of an ok trial, else None."""
    try:
        value = float(row.get("objective_s"))  # a row of trials.csv (a Series) or a trial record (a dict)
    except (AttributeError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) and row.get("status") == "ok" else None


def _as_listed(value, values: list):
    """A value read back from CSV as the space lists it (1.0 and "1.0", True and "True")."""
    for v in values:
        if str(v) == str(value):
            return v
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (v, value))
        if numbers and float(v) == float(value):  # 1 read back as 1.0 from a column with gaps
            return v
    return value


def _best(table: pd.DataFrame):
    """The best trial measured in full (halving's screened times only until one is)."""
    ok = table[table["status"] == "ok"]
    if "effort" in ok and (ok["effort"] == PIPELINE).any():
        ok = ok[ok["effort"] == PIPELINE]
    return None if ok.empty else ok.sort_values("objective_s").iloc[0]


def status_lines(search: Search) -> list[str]:
    """`neuronsweep search status`: the budget spent, the best so far and every failed trial's reason."""
    table = search.recorded()
    measured, spent = search.spent(table)
    lines = [f"search {search.entry['name']} ({search.space.strategy}, seed {search.space.seed}): {search.folder}"]
    if table.empty:
        return [*lines, "no round done yet: `neuronsweep search run CONFIG` starts it"]
    budget = f"{measured} of {search.max_trials} trials"
    if search.wall_s is not None:
        budget += f", {spent:.0f} of {search.wall_s} s"
    if "device_s" in table:
        budget += f", {table['device_s'].fillna(0).sum():.1f} device seconds" + (
            f" of {search.device_s}" if search.device_s is not None else ""
        )
    lines.append(f"rounds done: {int(table['round'].max()) + 1}; budget spent: {budget}")
    best = _best(table)
    lines.append(
        "best so far: "
        + (
            f"{best['objective_s'] * 1e6:.2f} us at {search.params_of(best)}"
            if best is not None
            else "none correct yet"
        )
    )
    bad = table[table["status"] != "ok"]
    lines += [f"  trial {int(r['trial'])} {r['status']}: {r['reason']}" for _, r in bad.iterrows()]
    return lines


def load(config_path: str, name: str | None, cores: int | None = None, snakefile: str | None = None) -> Search:
    """The search `name` of a config file (its only one when None)."""
    cfg = schema.load(config_path)
    kind, entry = pick(cfg, name, config_path)
    return KINDS[kind](cfg, entry, config_path, cores, snakefile)


NO_KEY = object()  # config_setting's answer for a key neither the config nor its schema has


def config_setting(cfg: dict, dotted: str):
    """A dotted run-level key's value: the config's, else the schema's default for a key it leaves out
    (suites.matmul.nki_tile.n; None where that default is null, as neuron.auto_cast's), else NO_KEY."""
    node = cfg
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


def settings_digest(settings: dict) -> str:
    """A short hash of run-level settings: the name of the run that measures them (a setting may be any text)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]


def set_setting(cfg: dict, dotted: str, value) -> None:
    """Set a dotted key in a config, making the sections it needs."""
    *parents, last = dotted.split(".")
    node = cfg
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
