"""A suite's `search:` block as Optuna sees it: the space, the sampler of each strategy, and the replay
that makes a search resumable.

Why replay and not Optuna's own storage: a sampler's random state is not stored, so a study reloaded
from a database after `kill -9` proposes differently from one that never stopped. The trials recorded
so far (trials.csv) are asked and told again, in order, to a fresh in-memory study with the same seed,
which leaves the sampler where it was: the same seed gives the same proposals whether or not the
search was interrupted, and a trial killed mid-round is proposed again, its finished cases found
done by Snakemake.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from neuronsweep.config.schema import schema_default
from neuronsweep.errors import UserError

if TYPE_CHECKING:
    import optuna

ParamSpec = Any  # a list of values, or a dict {values | low, high, log; when}: code branches on which
Value = int | float | bool | str  # a param's value: the schema's number, boolean or string
Point = dict[str, Value]  # one configuration of a search: each param that applies -> its value


def _optuna() -> ModuleType:
    """Optuna, or one sentence on how to install it (the `tune` extra)."""
    try:
        import optuna
    except ImportError:
        raise UserError(
            'neuronsweep search needs Optuna, which is not installed here: pip install -e ".[tune]".'
        ) from None
    return optuna


def values_of(param: ParamSpec) -> list | None:
    """A param's values (a list, or {values, when}); None for an integer range {low, high, log, when}."""
    if isinstance(param, list):
        return param
    return list(param["values"]) if "values" in param else None


def applies(param: ParamSpec, point: Point) -> bool:
    """A conditional param ({..., when: {other: value or [values]}}) applies only where the params it
    names, chosen before it, have one of those values."""
    when = param.get("when", {}) if isinstance(param, dict) else {}
    return all(point.get(k) in (v if isinstance(v, list) else [v]) for k, v in when.items())


def _conditional(space: dict) -> bool:
    return any(isinstance(v, dict) and v.get("when") for v in space.values())


@dataclass
class Space:
    """param -> its values (a list), an integer range {low, high, log}, either with `when` (conditional)."""

    params: dict[str, Any]  # a list of values, or a range {low, high, log}, either with `when`
    strategy: str = "tpe"
    seed: int = 0
    default: Point = field(default_factory=dict)
    eta: int = 3  # halving: a 1/eta of the screened configurations go on to the full measurement

    def distributions(self) -> dict:
        """Each param as Optuna's distribution (a range as integers, a list as categories)."""
        optuna = _optuna()

        out = {}
        for name, param in self.params.items():
            values = values_of(param)
            if values is None:
                out[name] = optuna.distributions.IntDistribution(
                    int(param["low"]), int(param["high"]), log=bool(param.get("log", False))
                )
            else:
                out[name] = optuna.distributions.CategoricalDistribution(values)
        return out

    def listed(self) -> bool:
        """Whether every param lists its values (a grid can be enumerated)."""
        return all(values_of(param) is not None for param in self.params.values())

    def grid(self) -> list[Point]:
        """Every point of a space of lists, a conditional param only where it applies."""
        out: list[Point] = [{}]
        for name, param in self.params.items():
            values = values_of(param) or []  # a space of lists: every param lists its values
            out = [q for p in out for q in ([{**p, name: v} for v in values] if applies(param, p) else [p])]
        return out

    def point(self, choose: Callable[[str, ParamSpec], Value]) -> Point:
        """A point chosen param by param in the space's order (`choose(name, param)`), a conditional param
        only where the params chosen before it say it applies."""
        out: Point = {}
        for name, param in self.params.items():
            if applies(param, out):
                out[name] = choose(name, param)
        return out

    def size(self) -> int | None:
        """How many points the space has (None: too many to list, a range counted as its integers)."""
        if self.listed():
            return len(self.grid())
        total = 1
        for param in self.params.values():
            values = values_of(param)
            total *= int(param["high"]) - int(param["low"]) + 1 if values is None else len(values)
        return total if total < 10**9 else None


def parse(block: dict, params: dict, where: str) -> Space:
    """The `search:` block of a suites.custom entry (schema-checked already), checked against itself:
    a default outside the space, a range the grid cannot list, an empty range."""
    space = dict(block["space"])
    overlap = sorted(set(space) & set(params))
    if overlap:
        raise UserError(
            f"{where}: {overlap[0]} is both in params and in search.space; a searched param belongs in "
            "search.space only."
        )
    for name, values in space.items():
        if values_of(values) is None:
            if int(values["low"]) > int(values["high"]) or (values.get("log") and int(values["low"]) < 1):
                raise UserError(
                    f"{where}: search.space.{name} is the range {values['low']}..{values['high']}"
                    f"{' on a log scale' if values.get('log') else ''}, which holds no value; fix low and high."
                )
            if _setting(block, "strategy") == "grid":
                raise UserError(
                    f"{where}: strategy grid needs every search.space param as a list of values, and {name} is "
                    "a range; list its values, or use random or tpe."
                )
    for i, (name, param) in enumerate(space.items()):
        for other, wanted in (param.get("when", {}) if isinstance(param, dict) else {}).items():
            earlier = dict(list(space.items())[:i])
            if other not in earlier:
                raise UserError(
                    f"{where}: search.space.{name}.when names {other}, which is not a param listed before it "
                    "in search.space; list the params a condition names first."
                )
            listed = values_of(earlier[other])
            for value in wanted if isinstance(wanted, list) else [wanted]:
                if listed is not None and value not in listed:
                    raise UserError(
                        f"{where}: search.space.{name}.when asks {other} = {value!r}, which is not one of its "
                        "values; fix the condition."
                    )
    given = dict(block.get("default") or {})
    default: Point = {}
    for name, param in space.items():
        if applies(param, default):
            default[name] = given.get(name, _first(param))
    for name, value in given.items():
        if name not in space:
            raise UserError(f"{where}: search.default.{name} is not a param of search.space; remove it.")
        if name not in default:
            raise UserError(
                f"{where}: search.default.{name} is given, but its condition does not hold in the default "
                "configuration; remove it or change the default of the param it depends on."
            )
        if not _holds(space[name], value):
            raise UserError(
                f"{where}: search.default.{name} = {value!r} is outside search.space.{name}; the default "
                "configuration must be one of the points searched."
            )
    return Space(space, _setting(block, "strategy"), int(_setting(block, "seed")), default, int(_setting(block, "eta")))


def _setting(block: dict, key: str) -> Any:
    """A search block's setting, or the schema's default for a custom entry's search (the one source of
    defaults: a validated block has them all; a block built in code may not)."""
    return block[key] if key in block else schema_default(f"suites.custom.search.{key}")


def _first(param: ParamSpec) -> Value:
    values = values_of(param)
    return int(param["low"]) if values is None else values[0]


def _holds(param: ParamSpec, value: object) -> bool:
    values = values_of(param)
    if values is None:
        return isinstance(value, int) and int(param["low"]) <= value <= int(param["high"])
    return value in values


def points(space: Space, n: int) -> list[Point]:
    """halving's configurations: the default first, then n - 1 distinct points drawn with the seed (every
    point of a space of lists in a seeded order; a range drawn uniformly, on a log scale where it says)."""
    rng, out = random.Random(space.seed), [dict(space.default)]
    if space.listed():
        grid = space.grid()
        rng.shuffle(grid)
        return (out + [p for p in grid if p != space.default])[:n]
    seen, tries = {_frozen(out[0])}, 0
    while len(out) < n and tries < 100 * n:
        tries += 1
        point = space.point(lambda _, param: _draw(rng, param))
        if _frozen(point) not in seen:
            seen.add(_frozen(point))
            out.append(point)
    return out


def _draw(rng: random.Random, param: ParamSpec) -> Value:
    values = values_of(param)
    if values is not None:
        return rng.choice(values)
    low, high = int(param["low"]), int(param["high"])
    if param.get("log"):
        return min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high))))))
    return rng.randint(low, high)


def _frozen(point: Point) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in point.items()))


def _suggest(trial: optuna.Trial, name: str, param: ParamSpec) -> Value:
    values = values_of(param)
    if values is None:
        return trial.suggest_int(name, int(param["low"]), int(param["high"]), log=bool(param.get("log", False)))
    return trial.suggest_categorical(name, values)


def sampler(space: Space) -> optuna.samplers.BaseSampler:
    """The strategy's Optuna sampler, seeded: grid, random and halving draw at random, tpe models."""
    optuna = _optuna()

    if space.strategy in ("grid", "random", "halving"):  # grid: its points enqueued in a seeded order (ask)
        return optuna.samplers.RandomSampler(seed=space.seed)
    return optuna.samplers.TPESampler(seed=space.seed, n_startup_trials=min(5, max(2, (space.size() or 10) // 4)))


class Study:
    """The sampler's view: the default configuration is trial 0 (enqueued), then the strategy proposes."""

    def __init__(self, space: Space) -> None:
        optuna = _optuna()

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        self.study = optuna.create_study(direction="minimize", sampler=sampler(space))
        self.study.enqueue_trial(space.default)
        self.dists = space.distributions()
        self.grid: list[Point] = []
        if space.strategy == "grid":  # Optuna's GridSampler stops the study itself, which ask-and-tell cannot
            points = space.grid()
            random.Random(space.seed).shuffle(points)
            self.grid = [p for p in points if p != space.default]

    def ask(self) -> optuna.Trial:
        """The next trial: the grid's next point, or the sampler's proposal."""
        if self.grid and self.study.trials:  # trial 0 is the enqueued default
            self.study.enqueue_trial(self.grid.pop(0))
        if not _conditional(self.space.params):
            return self.study.ask(self.dists)
        trial = self.study.ask()  # define-by-run: a conditional param is suggested only where it applies
        self.space.point(lambda name, param: _suggest(trial, name, param))
        return trial

    def tell(self, trial: optuna.Trial, objective: float | None) -> None:
        """A trial's result; one without a finite objective is a failed trial."""
        optuna = _optuna()

        if objective is None or not math.isfinite(objective):
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, objective)

    def replay(self, rounds: list[list[tuple[Point, float | None]]]) -> None:
        """Ask and tell the trials recorded so far again, round by round as they were (every ask of a
        round before its tells: a sampler that models the results would otherwise propose from more
        than it knew then). A proposal that differs from the record means the space, the strategy or
        the seed changed since: refused, never mixed."""
        n = 0
        for recorded in rounds:
            trials = [self.ask() for _ in recorded]
            for trial, (params, _) in zip(trials, recorded):
                if trial.params != params:
                    raise UserError(
                        f"trial {n} was {params}, and this search now proposes {trial.params}: the space, "
                        "strategy or seed changed since it was recorded; delete the search folder to start "
                        "again, or restore them."
                    )
                n += 1
            for trial, (_, objective) in zip(trials, recorded):
                self.tell(trial, objective)

    def importance(self) -> dict[str, float] | None:
        """Optuna's default importance evaluator over the finished trials (None with too few of them)."""
        optuna = _optuna()

        done = [t for t in self.study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if len(done) < 3 or len(self.space.params) < 2:
            return None
        try:
            with warnings.catch_warnings():  # its notes on few trials per value: the page says how many there were
                warnings.simplefilter("ignore")
                found = optuna.importance.get_param_importances(self.study)
            return {k: round(float(v), 4) for k, v in found.items()}
        except (RuntimeError, ValueError):
            return None
