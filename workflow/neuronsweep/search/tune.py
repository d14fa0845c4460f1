"""Tune a model (a suites.model entry's `tune:` block, `neuronsweep search run CONFIG --name <model>`): per
GEMM shape the model runs, the fastest correct implementation among its candidates, as a dispatch table,
and the model time the table saves.

A model runs dozens of GEMM shapes and the best tile, kernel or compiler setting differs per shape, so one
winner over all of them (a search's geometric mean) is not what a user ships. Here:

1. The model's GEMMs are planned as the model suite plans them (layers off): every unique (M, K, N, dtype)
   with how often each forward runs it. Their `compiler` build (the backend's own GEMM, the matmul
   workload the model suite measures) is measured once, in one Snakemake call: each shape's default. With
   `settings:` (run-level keys: the compiler's flags), the compiler's build under each other combination of
   their values is measured the same way, a run of its own each (`<run>-tune-<model>-<hash>`), and is a
   candidate at every shape (`compiler[neuron.optlevel=1]`): the flags a bucket's NEFF is compiled with are
   chosen per shape like any kernel.
2. Shapes are searched in order of count x default latency, so a budget cut short still covers the time
   that matters; per shape, each custom candidate (a suites.custom entry called with the shape's M x K and
   K x N inputs) is an ordinary search (driver.ParamSearch: its strategy, trials.csv, resume) over its own
   space, every trial a case of the run `<run>-tune-<model>`, so builds are shared across shapes.
3. Each shape's fastest correct trial is timed again beside the compiler's build in fresh processes
   (runs/interleave.py, as compare times A and B) and judged by analysis/verdict.py: a winner not judged
   faster is a `tie`, and the compiler is what the table ships there.
4. dispatch.csv/.json (search/dispatch.py reads the JSON back), gain.csv (per forward: the GEMMs' time
   with the defaults and with the table, and the forward projected by its measured GEMM share) and
   tune.html (search/tune_page.py).

Resumable at every step: the defaults, each candidate's search (its own trials.csv, in a folder named by
the candidate's source hash, so an edited kernel file is searched again and nothing else) and the judged
finalists are each recorded when done.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import math
import threading
import time
from pathlib import Path

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.atomic import replacing, write_json
from neuronsweep.backends.cores import default_threads
from neuronsweep.config import schema
from neuronsweep.config.backends import BACKENDS
from neuronsweep.errors import UserError
from neuronsweep.json_numbers import finite_number
from neuronsweep.runs import interleave
from neuronsweep.search import FINALIST_ROUNDS, driver, tune_page
from neuronsweep.stages.run_setup import settle_run
from neuronsweep.store import layout, records
from neuronsweep.workloads import user_code

COMPILER = "compiler"  # the backend's own build of the GEMM: every shape's default
DISPATCH_FORMAT = 1
GROUP = ["phase", "batch", "seq", "dtype"]  # one forward
PAIR = (("run", "default_workload_id"), ("winner_run", "winner_workload_id"))  # a verdict's two cases: run, id
SHAPES_TOGETHER = (
    8  # shapes searched together (a round of all of them one Snakemake call); the budget is checked between
)


class Together:
    """Several searches' rounds gathered into one call: each search runs in a thread of its own and asks
    for its trials to be measured (or screened); when every search still running is waiting, `serve` runs
    all their trials as one call (one Snakemake call, one screen process) and hands each its results."""

    def __init__(self, size: int, measure, screen):
        self.cv = threading.Condition()
        self.live = size
        self.pending: list[tuple] = []
        self.answers: dict[int, object] = {}
        self.calls = {"measure": measure, "screen": screen}
        self.log: list[dict] = []  # per call run: its kind, searches, trials and wall seconds (bench/tune_cost.py)

    def call(self, kind: str, search, trials: list[dict], n_round: int):
        """From a search's thread: its trials' results, once the call of all waiting searches is done."""
        with self.cv:
            ticket = id(trials)
            self.pending.append((ticket, kind, search, trials, n_round))
            self.cv.notify_all()
            self.cv.wait_for(lambda: ticket in self.answers)
            got = self.answers.pop(ticket)
        if isinstance(got, BaseException):
            raise got
        return got

    def leave(self) -> None:
        """From a search's thread: it is done (or failed); the others no longer wait for it."""
        with self.cv:
            self.live -= 1
            self.cv.notify_all()

    def serve(self) -> None:
        """The main thread: run each gathered call until every search has left."""
        while True:
            with self.cv:
                self.cv.wait_for(lambda: self.live == 0 or len(self.pending) >= self.live)
                if self.live == 0 and not self.pending:
                    return
                taken, self.pending = self.pending, []
            answers: dict[int, object] = {}
            for kind, run in self.calls.items():
                mine = [c for c in taken if c[1] == kind]
                if not mine:
                    continue
                t0 = time.monotonic()
                try:
                    got = run([(c[2], c[3]) for c in mine], max(c[4] for c in mine))
                except BaseException as exc:  # noqa: BLE001 - each waiting search raises it
                    got = [exc] * len(mine)
                trials = sum(len(c[3]) for c in mine)
                self.log.append(
                    {"kind": kind, "searches": len(mine), "trials": trials, "wall_s": time.monotonic() - t0}
                )
                answers.update({c[0]: g for c, g in zip(mine, got)})
            with self.cv:
                self.answers.update(answers)
                self.cv.notify_all()


def matrix_dims(entry: dict, where: str) -> tuple[str, str, str]:
    """The grid names (m, k, n) of a custom entry whose inputs are two matrices over grid names sharing one,
    the contraction: [m, k] and [k, n], or the transposed left operand TensorE takes, [k, m] and [k, n]
    (config/examples/kernels/matmul_t.py); m is the first's other name, n the second's. One sentence
    otherwise (a tune calls a candidate with each GEMM's M, K and N)."""
    shapes = list((entry.get("inputs") or {}).values())
    names = [s for s in shapes if len(s) == 2 and all(isinstance(d, str) and d.isidentifier() for d in s)]
    shared = set(names[0]) & set(names[1]) if len(shapes) == len(names) == 2 else set()
    if len(shared) != 1 or len(set(names[0]) | set(names[1])) != 3:
        raise UserError(
            f"{where}: suites.custom ({entry['name']}) has inputs {entry.get('inputs')}, not two matrices over grid "
            "names that share the contraction ([m, k] and [k, n], or [k, m] and [k, n]); a tune calls a candidate "
            "with each GEMM's M, K and N, so give its inputs that form."
        )
    (k,) = shared
    m = next(d for d in names[0] if d != k)
    n = next(d for d in names[1] if d != k)
    return m, k, n


def shape_id(m: int, k: int, n: int, dtype: str) -> str:
    """A shape's name in the tune's folders and tables."""
    return f"m{m}-k{k}-n{n}-{dtype}"


class Tune:
    """One model's tune: its folder (results/<run>/tune/<model>/), shapes, candidates and budget."""

    def __init__(
        self, cfg: dict, entry: dict, source: str, cores: int | None = None, snakefile: str | Path | None = None
    ):
        self.cfg, self.entry, self.source = cfg, entry, source
        self.cores = cores or default_threads()  # Snakemake's --cores per call: the CPUs this process may run on
        self.snakefile = snakefile  # the workflow its calls run (driver.workflow_snakefile)
        self.where = f"{source}: suites.model ({entry['name']}) tune"
        block = entry["tune"]
        customs = {e["name"]: e for e in cfg["suites"].get("custom", [])}
        self.candidates = list(block.get("candidates") or [COMPILER])
        self.customs: dict[str, dict] = {}
        for name in self.candidates:
            if name == COMPILER:
                continue
            if name not in customs:
                raise UserError(
                    f"{self.where}.candidates names {name}, which is neither {COMPILER} nor a suites.custom entry "
                    f"(the config has: {', '.join(customs) or 'none'}); add the entry or fix the name."
                )
            self.customs[name] = customs[name]
        self.dims = {name: matrix_dims(e, f"{self.where}.candidates") for name, e in self.customs.items()}
        budget = block.get("budget") or {}
        self.trials_per_shape = int(
            budget.get("trials_per_shape") or schema.schema_default("suites.model.tune.budget.trials_per_shape")
        )
        if self.customs and self.trials_per_shape < len(self.customs):
            raise UserError(
                f"{self.where}.budget.trials_per_shape is {self.trials_per_shape}, fewer than its "
                f"{len(self.customs)} custom candidates (at least a trial each per shape); raise it."
            )
        self.run = f"{cfg['run']}-tune-{entry['name']}"
        self.variants = self._variants(block.get("settings") or {})
        custom_trials = self.trials_per_shape - len(self.variants)
        if self.customs and custom_trials < len(self.customs):
            raise UserError(
                f"{self.where}.budget.trials_per_shape is {self.trials_per_shape}: its settings take "
                f"{len(self.variants)} trials at each shape, which leaves {custom_trials} for its "
                f"{len(self.customs)} custom candidates (at least a trial each); raise it."
            )
        self.wall_s = budget.get("wall_seconds")
        self.strategy = block.get("strategy") or schema.schema_default("suites.model.tune.strategy")
        self.seed = int(block.get("seed", schema.schema_default("suites.model.tune.seed")))
        self.backend = "cpu"  # settled when the model's GEMMs are planned (gemms())
        self.folder = Path("results") / cfg["run"] / "tune" / entry["name"]

    def _variants(self, settings: dict) -> dict[str, dict]:
        """The compiler's build under tune.settings: a label (`compiler[neuron.optlevel=1]`) per combination
        of the listed values other than the config's own (the default, measured anyway), each validated
        as a config before any trial runs."""
        own = {}
        for key in settings:
            own[key] = driver.config_setting(self.cfg, key)
            if own[key] is driver.NO_KEY:
                raise UserError(f"{self.where}.settings names {key}, which is no key of the config; fix it.")
        out = {}
        for values in itertools.product(*settings.values()):
            chosen = dict(zip(settings, values))
            if chosen != own:
                label = f"{COMPILER}[{', '.join(f'{k}={v}' for k, v in chosen.items())}]"
                out[label] = chosen
                schema.validate(self.compiler_config(chosen), source=f"{self.where}.settings ({label})")
        return out

    # ------------------------------------------------------------------ the shapes and their defaults
    def compiler_config(self, settings: dict | None = None) -> dict:
        """The model's GEMMs alone as a sweep (layers off): each shape's compiler build, in the tune's run
        (the default), or with `settings` in a run named by their hash."""
        model = {k: v for k, v in self.entry.items() if k != "tune"} | {"layers": False}
        cfg = copy.deepcopy({k: v for k, v in self.cfg.items() if k != "search"})
        for key, value in (settings or {}).items():
            driver.set_setting(cfg, key, value)
        run = f"{self.run}-{driver.settings_digest(settings)}" if settings else self.run
        return {**cfg, "run": run, "suites": {"model": [model]}}

    def gemms(self) -> pd.DataFrame:
        """Every GEMM of every forward (phase, batch, seq, dtype): its module, m, k, n, count and workload id,
        as the model suite plans them; `unsupported` holds a reason where this backend cannot run it."""
        setup = settle_run(schema.validate(self.compiler_config(), source=self.where))
        rows = [
            {
                **{k: sc.labels[k] for k in ("gemm", "m", "k", "n", "count", *GROUP)},
                "workload_id": sc.workload_id,
                "unsupported": setup.plan.unsupported.get(sc.workload_id, ""),
            }
            for sc in setup.plan.scenarios
        ]
        self.backend = setup.backend
        if not rows:
            raise UserError(f"{self.where}: the model runs no GEMM this plan found; nothing to tune.")
        out = pd.DataFrame(rows)
        out["shape"] = [shape_id(r.m, r.k, r.n, r.dtype) for r in out.itertuples()]
        return out

    def measure_defaults(self, gemms: pd.DataFrame, settings: dict | None = None) -> pd.DataFrame:
        """Each shape's compiler build measured (one Snakemake call for all): defaults.csv, or with
        `settings` settings/<run>.csv. Called on every run, resumed or not: Snakemake reruns what a
        changed setting touches and nothing else."""
        cfg = self.compiler_config(settings)
        name = "defaults" if not settings else cfg["run"]
        path = self.folder / ("defaults.csv" if not settings else f"settings/{cfg['run']}.csv")
        summary, _ = driver.snakemake_round(cfg, self.folder / "rounds", name, self.cores, self._snakefile())
        by_wid = summary.drop_duplicates("workload_id").set_index("workload_id")
        rows = []
        for shape, group in gemms.groupby("shape", sort=False):
            first = group.iloc[0]
            got = by_wid.loc[first["workload_id"]] if first["workload_id"] in by_wid.index else None
            status = "missing" if got is None else str(got["status"])
            rows.append(
                {
                    "shape": shape,
                    **{k: first[k] for k in ("m", "k", "n", "dtype", "workload_id")},
                    "run": cfg["run"],
                    "status": status,
                    "reason": first["unsupported"] or ("" if got is None else _text(got.get("reason"))),
                    "latency_median_s": finite_number(got["latency_median_s"])
                    if got is not None and status == "ok"
                    else None,
                }
            )
        out = pd.DataFrame(rows)
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path) as tmp:
            out.to_csv(tmp, index=False)
        return out

    def measure_variants(self, gemms: pd.DataFrame, hooks=None) -> dict[str, pd.DataFrame]:
        """Each setting's compiler builds (as measure_defaults: one Snakemake call a combination), by label."""
        if hooks is not None:
            return {label: hooks(label, gemms) for label in self.variants}
        return {label: self.measure_defaults(gemms, settings) for label, settings in self.variants.items()}

    def order(self, gemms: pd.DataFrame, defaults: pd.DataFrame) -> pd.DataFrame:
        """The measured shapes, the most model time first (count over every forward x default latency)."""
        counts = gemms.groupby("shape")["count"].sum()
        out = defaults[defaults["status"] == "ok"].copy()
        out["count"] = out["shape"].map(counts)
        out["weight_s"] = out["count"] * out["latency_median_s"]
        return out.sort_values("weight_s", ascending=False, kind="stable")

    # ------------------------------------------------------------------ a candidate's search at a shape
    def candidate_search(self, name: str, shape: pd.Series) -> driver.ParamSearch:
        """The search of candidate `name` at one shape: the custom entry at that shape's M, K, N and dtype,
        its own search space (or its params as one), this tune's strategy and budget."""
        base = self.customs[name]
        m, k, n = self.dims[name]
        entry = {key: v for key, v in base.items() if key not in ("search", "params", "grid", "dtype")}
        entry |= {"grid": {m: [int(shape["m"])], k: [int(shape["k"])], n: [int(shape["n"])]}, "dtype": [shape["dtype"]]}
        own = base.get("search") or {}
        space = own.get("space") or base.get("params") or {}
        trials = self.trials_per_shape // len(self.customs)
        if space:
            block = {"space": space, "strategy": self.strategy, "budget": {"trials": trials}, "seed": self.seed}
            block |= {"default": own["default"]} if "default" in own else {}
        else:  # nothing to search: the function at its own keyword defaults, one trial
            block = {"space": {}, "strategy": "grid", "budget": {"trials": 1}}
        entry["search"] = block
        search = driver.ParamSearch(self.cfg, entry, self.source, self.cores, self.snakefile)
        digest = self.digests()[name]
        search.run = self.run
        search.shape_labels = {m: int(shape["m"]), k: int(shape["k"]), n: int(shape["n"]), "dtype": shape["dtype"]}
        search.folder = self.folder / "shapes" / str(shape["shape"]) / f"{name}-{digest}"
        search.trials_csv = search.folder / "trials.csv"
        return search

    def code_of(self, name: str) -> str:
        """What a candidate's verdict is kept for: a custom candidate's code digest, a setting's values."""
        if name in self.variants:
            return driver.settings_digest(self.variants[name])
        return self.digests()[name]

    def digests(self) -> dict[str, str]:
        """Each custom candidate's code (its function's and NKI kernel's files) as a short hash: its searches'
        folders are named by it, so an edited file is searched again and the other candidates are not."""
        if not hasattr(self, "_digests"):
            self._digests = {
                name: user_code.digest([e["function"], *([e["nki_kernel"]] if e.get("nki_kernel") else [])])[:8]
                for name, e in self.customs.items()
            }
        return self._digests

    def search_shapes(self, shapes: list[pd.Series], say, hooks=None) -> dict[str, dict]:
        """Every custom candidate's search at each of these shapes; per shape and candidate its best full
        trial (or why none). The searches run together: each round of all of them is one Snakemake call
        (and halving's screen one process), not one a shape (tests' `hooks` run them one by one)."""
        searches = {(str(sh["shape"]), name): self.candidate_search(name, sh) for sh in shapes for name in self.customs}
        tables: dict[tuple, object] = {}
        if hooks is not None:
            for (sid, name), search in searches.items():
                measure, screen = hooks(name, search.shape_labels)
                try:
                    tables[(sid, name)] = search.run_rounds(say=say, measure=measure, screen=screen)
                except UserError as exc:
                    tables[(sid, name)] = exc
        else:
            together = Together(len(searches), self._measure_together, driver.screen_together)
            checked = set()  # a candidate planned at one shape (its function loads, its params are keywords)
            for name in self.customs:  # is planned per shape only where that failed: a child each, else
                with contextlib.suppress(UserError):
                    searches[(str(shapes[0]["shape"]), name)].preflight()
                    checked.add(name)

            def one(key, search):
                try:
                    if key[1] not in checked:  # this candidate at this shape: one sentence; it loses the shape
                        search.preflight()
                    tables[key] = search.run_rounds(
                        say=say,
                        measure=lambda t, r: together.call("measure", search, t, r),
                        screen=lambda t, r: together.call("screen", search, t, r),
                    )
                except BaseException as exc:  # noqa: BLE001 - carried to the main thread below
                    tables[key] = exc
                finally:
                    together.leave()

            threads = [threading.Thread(target=one, args=kv, daemon=True) for kv in searches.items()]
            for t in threads:
                t.start()
            together.serve()
            for t in threads:
                t.join()
            self.call_log = together.log
        out: dict[str, dict] = {str(sh["shape"]): {} for sh in shapes}
        for (sid, name), got in tables.items():
            if isinstance(got, UserError):
                out[sid][name] = {"status": "skipped", "reason": str(got)}
            elif isinstance(got, BaseException):
                raise got
            else:
                out[sid][name] = self._best_of(searches[(sid, name)], got)
        return out

    def _best_of(self, search: driver.ParamSearch, table: pd.DataFrame) -> dict:
        full = table[(table["status"] == "ok") & (table.get("effort", driver.PIPELINE) == driver.PIPELINE)]
        trials = len(table[table["measured"].map(verdict.flag)])
        if full.empty:
            bad = table[table["status"] != "ok"]
            why = bad.iloc[0]["reason"] if len(bad) else "no trial was measured in full"
            return {"status": "failed", "reason": str(why), "trials": trials}
        best = full.sort_values("objective_s").iloc[0]
        return {
            "status": "ok",
            "params": search.params_of(best),
            "median_s": float(best["objective_s"]),
            "workload_id": str(best["workload_ids"]).split(";")[0],
            "trials": trials,
            "folder": str(search.folder),
        }

    def _snakefile(self) -> Path:
        return driver.workflow_snakefile(self.snakefile)

    def _measure_together(
        self, calls: list[tuple[driver.ParamSearch, list[dict]]], n_round: int
    ) -> list[list[driver.TrialResult]]:
        """One round of several shapes' searches as one Snakemake call; per call, a result per trial."""
        cfg = calls[0][0].round_config([])
        cfg["suites"] = {"custom": [e for s, trials in calls for e in s.round_config(trials)["suites"]["custom"]]}
        self.calls += 1
        summary, log = driver.snakemake_round(
            cfg, self.folder / "rounds", f"call-{self.calls}", self.cores, self._snakefile()
        )
        return [[s.result_of(summary, t, log, self.run) for t in trials] for s, trials in calls]

    # ------------------------------------------------------------------ the loop
    def run_all(self, say=print, hooks=None, judge=None, rounds: int = FINALIST_ROUNDS) -> dict:
        """Defaults, then the shapes' searches within the budget (SHAPES_TOGETHER at a time, the most model
        time first), then the judged table and its gain; `hooks(candidate, shape labels) -> (measure,
        screen)` (and hooks("defaults", gemms)) and `judge(rows) -> verdicts` are replaced in tests."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with driver.only_driver(self.folder / "driver.lock"):
            gemms = self.gemms()
            state = self._state()
            self.calls = len(list((self.folder / "rounds").glob("call-*.yaml")))
            t0 = time.monotonic()
            defaults = self.measure_defaults(gemms) if hooks is None else hooks("defaults", gemms)
            variants = self.measure_variants(gemms, hooks)
            state.setdefault("defaults_s", time.monotonic() - t0)
            if self.wall_s is not None and state["defaults_s"] > float(self.wall_s):
                raise UserError(
                    f"{self.where}.budget.wall_seconds is {self.wall_s}, less than measuring each shape's compiler "
                    f"build{' under each setting' if self.variants else ''} once took ({state['defaults_s']:.0f} s); "
                    "raise it."
                )
            ordered = self.order(gemms, defaults)
            todo = (
                [
                    sh
                    for _, sh in ordered.iterrows()
                    if state["shapes"].get(str(sh["shape"]), {}).get("code") != self.digests()
                ]
                if self.customs
                else []
            )
            for i in range(0, len(todo), SHAPES_TOGETHER):
                chunk = todo[i : i + SHAPES_TOGETHER]
                spent = state["defaults_s"] + sum(state.get("chunks_s", []))
                last = max(state.get("chunks_s", []), default=0.0)
                if self.wall_s is not None and spent + last > float(self.wall_s):
                    say(
                        f"tune {self.entry['name']}: stopped before shape {chunk[0]['shape']}: {spent:.0f} s spent, "
                        f"{SHAPES_TOGETHER} shapes took up to {last:.0f} s, budget {self.wall_s} s"
                    )
                    break
                t0 = time.monotonic()
                found = self.search_shapes(chunk, say, hooks)
                state.setdefault("chunks_s", []).append(time.monotonic() - t0)
                state.setdefault("calls", []).extend(getattr(self, "call_log", []))
                state["shapes"].update({sid: {"candidates": c, "code": self.digests()} for sid, c in found.items()})
                self._save(state)
                say(f"tune {self.entry['name']}: {len(state['shapes'])} of {len(ordered)} shapes searched")
            table = self.dispatch(gemms, defaults, variants, state, judge, rounds, say)
            gain = self.gain(gemms, table)
            self.write(table, gain)
        return {"dispatch": table, "gain": gain}

    def _state(self) -> dict:
        path = self.folder / "state.json"
        return json.loads(path.read_text()) if path.is_file() else {"shapes": {}}

    def _save(self, state: dict) -> None:
        write_json(self.folder / "state.json", state)

    # ------------------------------------------------------------------ the table
    def dispatch(
        self,
        gemms: pd.DataFrame,
        defaults: pd.DataFrame,
        variants: dict[str, pd.DataFrame],
        state: dict,
        judge,
        rounds: int,
        say,
    ) -> pd.DataFrame:
        """One row per shape: the winner, its median and the default's, the speed-up judged on fresh processes."""
        counts = gemms.groupby("shape")["count"].sum()
        modules = gemms.groupby("shape")["gemm"].agg(lambda g: ";".join(sorted(set(g))))
        rows = []
        for _, d in defaults.iterrows():
            sid = str(d["shape"])
            row = {
                "shape": sid,
                **{k: d[k] for k in ("m", "k", "n", "dtype")},
                "count": int(counts[sid]),
                "gemms": modules[sid],
                "default_median_s": finite_number(d["latency_median_s"]),
                "run": d.get("run", self.run),
                "default_workload_id": d["workload_id"],
            }
            searched = state["shapes"].get(sid)
            if d["status"] != "ok":
                rows.append(row | {"winner": None, "verdict": f"default not measured ({d['status']}: {d['reason']})"})
                continue
            found = {label: _variant_at(v, sid, self.variants[label]) for label, v in variants.items()}
            if searched is None and self.customs:
                found |= {name: {"status": "skipped", "reason": "not searched (budget)"} for name in self.customs}
            found |= (searched or {}).get("candidates", {})
            if not found:
                rows.append(row | {"winner": COMPILER, "verdict": ""})
                continue
            row["trials"] = 1 + sum(int(c.get("trials", 0)) for c in found.values())
            row["candidates_out"] = "; ".join(
                f"{name}: {c['reason']}" for name, c in found.items() if c["status"] != "ok"
            )
            ok = {name: c for name, c in found.items() if c["status"] == "ok"}
            best = min(ok.items(), key=lambda kv: kv[1]["median_s"], default=None)
            if best is None:
                said = "no candidate ran correctly here (candidates_out)"
                if searched is None and not self.variants:
                    said = "not searched (budget)"
                rows.append(row | {"winner": COMPILER, "verdict": said})
                continue
            if best[1]["median_s"] >= row["default_median_s"]:
                rows.append(row | {"winner": COMPILER, "verdict": "the compiler's build was the fastest measured"})
                continue
            name, c = best
            rows.append(
                row
                | {
                    "winner": name,
                    "params": json.dumps(c["params"], sort_keys=True),
                    "winner_median_s": c["median_s"],
                    "winner_run": c.get("run", self.run),
                    "winner_workload_id": c["workload_id"],
                    **self._correctness(c.get("run", self.run), c["workload_id"]),
                }
            )
        table = pd.DataFrame(rows)
        self._judge(table, judge, rounds, say)
        return table

    def _correctness(self, run: str, wid: str) -> dict:
        """The winner's output against the float64 reference (its case's metrics.json), as the sweep checks it."""
        path = layout.workload_dir(Path("results") / run, self.backend, wid) / "metrics.json"
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError):
            return {"correct": None}
        return {k: metrics.get(k) for k in ("correct", "max_rel_error", "tolerance_rel")}

    def _judge(self, table: pd.DataFrame, judge, rounds: int, say) -> None:
        """The winners against the compiler's build, timed again together (cpu) or as their captures stored
        them (the programs need the device), and judged; stored in judged.json by (shape, winner's case,
        its code) so a resumed tune does not time them again."""
        contenders = table[table["winner"].notna() & (table["winner"] != COMPILER)] if len(table) else table
        for col in ("speedup", "speedup_low", "speedup_high", "verdict", "tie", "ships"):
            if col not in table:
                table[col] = None
        table["ships"] = table["winner"].where(table["winner"].notna(), None)
        if contenders.empty:
            return
        path = self.folder / "judged.json"
        record = json.loads(path.read_text()) if path.is_file() else {}
        key = {
            i: f"{r['shape']}|{r['winner_workload_id']}|{self.code_of(r['winner'])}{self._stored_evidence(r)}"
            for i, r in contenders.iterrows()
        }
        todo = [i for i in contenders.index if key[i] not in record]
        if todo:
            rows = table.loc[todo]
            if judge is not None:
                verdicts = judge(rows)
            elif BACKENDS[self.backend].retimed_here:
                verdicts = verdict.judge(self._timed_pairs(rows, rounds, say))
            else:  # the programs need the device: their stored timings, by the same rule (one process a case
                verdicts = verdict.judge(self._stored_pairs(rows))  # is not judged, and says why)
            for i, v in zip(todo, verdicts):
                record[key[i]] = {
                    "said": v.said,
                    "speedup": None if v.ratio is None else 1 / v.ratio,
                    "speedup_low": None if v.ci_high is None else 1 / v.ci_high,
                    "speedup_high": None if v.ci_low is None else 1 / v.ci_low,
                    "rounds": rounds if BACKENDS[self.backend].retimed_here else None,
                }
            write_json(path, record)
        for i in contenders.index:
            got = record[key[i]]
            faster = got["said"] == verdict.FASTER
            table.loc[i, ["verdict", "speedup", "speedup_low", "speedup_high"]] = [
                got["said"],
                got.get("speedup"),
                got.get("speedup_low"),
                got.get("speedup_high"),
            ]
            table.loc[i, "tie"] = not faster
            table.loc[i, "ships"] = table.loc[i, "winner"] if faster else COMPILER

    def _stored_evidence(self, row: pd.Series) -> str:
        """Off cpu a verdict rests on the two cases' stored captures: their records' digest, so that captures
        taken again (a capture setting changed, e.g. neuron.latency_samples) are judged again. cpu times the
        two builds again for its verdict: the code's digest is its evidence."""
        if BACKENDS[self.backend].retimed_here:
            return ""
        h = hashlib.sha256()
        for case in self._cases(row):
            with contextlib.suppress(OSError):  # no capture: no timing either, which the verdict says
                h.update((case / "capture" / "capture.json").read_bytes())
        return "|" + h.hexdigest()[:8]

    def _cases(self, row: pd.Series) -> tuple[Path, Path]:
        """The folders of a verdict's two cases: the compiler's default build, the winner's."""
        a, b = (layout.workload_dir(Path("results") / str(row[run]), self.backend, str(row[wid])) for run, wid in PAIR)
        return a, b

    def _stored_pairs(self, rows: pd.DataFrame) -> list[tuple]:
        """(default, winner) as their captures stored them (store/records.timing): the rounds in processes
        where the backend timed them so, else one process's samples, or None for a device time alone."""
        return [tuple(records.timing(case) for case in self._cases(r)) for _, r in rows.iterrows()]

    def _timed_pairs(self, rows: pd.DataFrame, rounds: int, say) -> list[tuple]:
        """(default, winner) Timings per shape: both programs in every fresh process, in alternation."""
        groups = []
        for _, r in rows.iterrows():
            default, winner = self._cases(r)
            groups.append({f"default:{r['shape']}": default / "build", f"winner:{r['shape']}": winner / "build"})
        timed = interleave.time_together(groups, rounds, seed=self.seed, say=say)
        return [(timed[f"default:{s}"], timed[f"winner:{s}"]) for s in rows["shape"]]

    # ------------------------------------------------------------------ what it buys
    def gain(self, gemms: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
        """Per forward: the GEMMs' time with the defaults and with the table (count x median; a winner not
        judged faster saves nothing), and where the model was measured whole (suites/model-<name>-forward.csv
        of the run), the forward projected by its measured GEMM share."""
        by_shape = table.set_index("shape")
        tuned = {
            sid: (r["winner_median_s"] if r.get("ships") not in (None, COMPILER) else r["default_median_s"])
            for sid, r in by_shape.iterrows()
        }
        forward = _forward_csv(self.cfg["run"], self.entry["name"])
        rows = []
        for key, group in gemms.groupby(GROUP, sort=False):
            row = dict(zip(GROUP, key))
            before = [c * by_shape.loc[s, "default_median_s"] for s, c in zip(group["shape"], group["count"])]
            after = [c * tuned[s] for s, c in zip(group["shape"], group["count"])]
            if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in before + after):
                row |= {"gemm_default_s": None, "why": "a GEMM of this forward was not measured"}
                rows.append(row)
                continue
            row |= {"gemm_default_s": sum(before), "gemm_tuned_s": sum(after)}
            row["saving_s"] = row["gemm_default_s"] - row["gemm_tuned_s"]
            row["saving_pct"] = 100 * row["saving_s"] / row["gemm_default_s"]
            row |= _projected(forward, row)
            rows.append(row)
        return pd.DataFrame(rows)

    def write(self, table: pd.DataFrame, gain: pd.DataFrame) -> None:
        """dispatch.csv, gain.csv, dispatch.json and tune.html, each replaced whole."""
        with replacing(self.folder / "dispatch.csv") as tmp:
            table.to_csv(tmp, index=False)
        with replacing(self.folder / "gain.csv") as tmp:
            gain.to_csv(tmp, index=False)
        write_json(self.folder / "dispatch.json", self.dispatch_json(table))
        with replacing(self.folder / "tune.html") as tmp:
            tmp.write_text(tune_page.render(self.entry["name"], table, gain))

    def dispatch_json(self, table: pd.DataFrame) -> dict:
        """The table a runtime looks a GEMM up in (search/dispatch.py): per dtype and K x N, the shapes by M
        ascending, each with what to call (the compiler's GEMM, or a function with its params)."""
        functions = {name: e["function"] for name, e in self.customs.items()}
        shapes: dict[str, list] = {}
        for _, r in table.sort_values("m").iterrows():
            ships = r.get("ships") or COMPILER
            params = json.loads(r["params"]) if ships != COMPILER and isinstance(r.get("params"), str) else {}
            settings = self.variants.get(ships, {})
            shapes.setdefault(f"{r['dtype']}:{int(r['k'])}x{int(r['n'])}", []).append(
                {
                    "m": int(r["m"]),
                    "candidate": COMPILER if settings else ships,
                    "function": functions.get(ships),
                    "params": {} if settings else params,
                    "settings": settings,
                    "speedup": finite_number(r.get("speedup")) if ships != COMPILER else 1.0,
                }
            )
        return {"format": DISPATCH_FORMAT, "model": self.entry["name"], "run": self.cfg["run"], "shapes": shapes}

    # ------------------------------------------------------------------ status
    def status_lines(self) -> list[str]:
        """`neuronsweep search status`: the shapes searched and left, and the saving so far."""
        lines = [f"tune {self.entry['name']} ({self.strategy}, candidates {', '.join(self.candidates)}): {self.folder}"]
        defaults = self.folder / "defaults.csv"
        if not defaults.is_file():
            return [*lines, "no shape measured yet: `neuronsweep search run CONFIG --name MODEL` starts it"]
        measured = pd.read_csv(defaults)
        state = self._state()
        ok = int((measured["status"] == "ok").sum())
        if self.customs:
            lines.append(f"shapes: {len(state['shapes'])} of {ok} searched, {ok - len(state['shapes'])} left")
        if self.variants:
            lines.append(f"settings: {', '.join(self.variants)}, each measured at every shape with the defaults")
        gain = self.folder / "gain.csv"
        if gain.is_file():
            for r in pd.read_csv(gain).itertuples():
                if isinstance(getattr(r, "saving_pct", None), float) and not math.isnan(r.saving_pct):
                    lines.append(
                        f"  {r.phase} b{r.batch} s{r.seq} {r.dtype}: GEMMs {r.gemm_default_s * 1e3:.3g} -> "
                        f"{r.gemm_tuned_s * 1e3:.3g} ms ({r.saving_pct:.1f} % saved)"
                    )
        return lines


def _variant_at(measured: pd.DataFrame, sid: str, settings: dict) -> dict:
    """A setting's compiler build at one shape, as a candidate's best trial (or why it has none)."""
    row = measured[measured["shape"] == sid]
    if row.empty:
        return {"status": "failed", "reason": "not measured", "trials": 0}
    got = row.iloc[0]
    if got["status"] != "ok" or finite_number(got["latency_median_s"]) is None:
        return {"status": "failed", "reason": f"{got['status']}: {_text(got.get('reason'))}", "trials": 1}
    return {
        "status": "ok",
        "params": settings,
        "median_s": float(got["latency_median_s"]),
        "workload_id": str(got["workload_id"]),
        "run": str(got["run"]),
        "trials": 1,
    }


def _projected(forward: pd.DataFrame | None, row: dict) -> dict:
    """The forward projected with the table: its measured time less its GEMM share times the GEMMs'
    saving fraction (the assumption: the GEMMs inside the layer speed up by the share they do alone)."""
    if forward is None:
        return {"projection": "the model was not measured whole in this run (layers: true, then the sweep)"}
    match = forward
    for col in GROUP:
        match = match[match[col].astype(str) == str(row[col])]
    if match.empty or pd.isna(match.iloc[0].get("forward_time_s")) or pd.isna(match.iloc[0].get("gemm_pct")):
        return {"projection": "this forward was not measured whole (or not split by category)"}
    f = match.iloc[0]
    share = float(f["gemm_pct"]) / 100
    fraction = row["saving_s"] / row["gemm_default_s"]
    return {
        "forward_s": float(f["forward_time_s"]),
        "gemm_share_pct": 100 * share,
        "forward_tuned_s": float(f["forward_time_s"]) * (1 - share * fraction),
        "projection": "forward x (1 - GEMM share x the GEMMs' saving fraction): the GEMMs inside the layers "
        "assumed to speed up as they do alone",
    }


def _forward_csv(run: str, model: str) -> pd.DataFrame | None:
    path = Path("results") / run / "suites" / f"model-{model}-forward.csv"
    return pd.read_csv(path) if path.is_file() else None


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
