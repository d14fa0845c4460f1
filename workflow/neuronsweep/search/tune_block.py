"""A model's `tune:` block read once (search/tune.py): its candidates (the compiler's build, suites.custom
entries, the compiler under other settings), its budget and strategy, and where the tune keeps its runs
and files. Every bad block is one sentence here, before any trial; every step of the tune reads this."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from neuronsweep.config import schema
from neuronsweep.config.suites import ConfigDocument, CustomEntry, ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.search.dispatch import COMPILER
from neuronsweep.search.driver import NO_KEY, config_setting, settings_digest
from neuronsweep.search.space import Point, Value
from neuronsweep.search.tune_shapes import compiler_config
from neuronsweep.store import layout
from neuronsweep.workloads import user_code


def matrix_dims(entry: CustomEntry, where: str) -> tuple[str, str, str]:
    """The grid names (m, k, n) of a custom entry whose inputs are two matrices over grid names sharing one,
    the contraction: [m, k] and [k, n], or the transposed left operand TensorE takes, [k, m] and [k, n]
    (config/examples/kernels/matmul_t.py); m is the first's other name, n the second's. One sentence
    otherwise (a tune calls a candidate with each GEMM's M, K and N)."""
    shapes = list((entry.get("inputs") or {}).values())
    names = [
        [str(d) for d in s] for s in shapes if len(s) == 2 and all(isinstance(d, str) and d.isidentifier() for d in s)
    ]
    shared = set(names[0]) & set(names[1]) if len(shapes) == len(names) == 2 else set()
    if len(shared) != 1 or len(set(names[0]) | set(names[1])) != 3:
        raise UserError(
            f"{where}: suites.custom ({entry['name']}) has inputs {entry.get('inputs')}, not two matrices over grid "
            "names that share the contraction ([m, k] and [k, n], or [k, m] and [k, n]); a tune calls a candidate "
            "with each GEMM's M, K and N, so give its inputs that form."
        )
    (k,) = shared
    return next(d for d in names[0] if d != k), k, next(d for d in names[1] if d != k)


@dataclass(frozen=True)
class TuneBlock:
    """A model's tune as its config says it: `customs` the custom candidates' entries and `dims` their grid
    names (m, k, n), `variants` the compiler's build under each other combination of tune.settings (by label,
    `compiler[neuron.optlevel=1]`), the trials each shape may take, the wall budget, strategy and seed; the
    tune's run (`<run>-tune-<model>`) and folder (results/<run>/tune/<model>)."""

    cfg: ConfigDocument
    entry: ModelEntry
    source: str
    where: str
    candidates: list[str]
    customs: dict[str, CustomEntry]
    dims: dict[str, tuple[str, str, str]]
    trials_per_shape: int
    variants: dict[str, Point]
    wall_s: float | None
    strategy: str
    seed: int
    run: str
    folder: Path
    digests: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, cfg: ConfigDocument, entry: ModelEntry, source: str) -> TuneBlock:
        """The block of a suites.model entry, checked: every bad one is one sentence naming it."""
        where = f"{source}: suites.model ({entry['name']}) tune"
        block, run = entry["tune"], f"{cfg['run']}-tune-{entry['name']}"
        candidates = list(block.get("candidates") or [COMPILER])
        customs = _customs(cfg, candidates, where)
        dims = {name: matrix_dims(e, f"{where}.candidates") for name, e in customs.items()}
        budget = block.get("budget") or {}
        trials = int(
            budget.get("trials_per_shape") or schema.schema_default("suites.model.tune.budget.trials_per_shape")
        )
        if customs and trials < len(customs):
            raise UserError(
                f"{where}.budget.trials_per_shape is {trials}, fewer than its {len(customs)} custom candidates (at "
                "least a trial each per shape); raise it."
            )
        variants = _variants(cfg, entry, run, block.get("settings") or {}, where)
        if customs and trials - len(variants) < len(customs):
            raise UserError(
                f"{where}.budget.trials_per_shape is {trials}: its settings take {len(variants)} trials at each "
                f"shape, which leaves {trials - len(variants)} for its {len(customs)} custom candidates (at least a "
                "trial each); raise it."
            )
        return cls(
            cfg=cfg,
            entry=entry,
            source=source,
            where=where,
            candidates=candidates,
            customs=customs,
            dims=dims,
            trials_per_shape=trials,
            variants=variants,
            wall_s=budget.get("wall_seconds"),
            strategy=block.get("strategy") or schema.schema_default("suites.model.tune.strategy"),
            seed=int(block.get("seed", schema.schema_default("suites.model.tune.seed"))),
            run=run,
            folder=layout.search_dir(cfg["run"], "tune", entry["name"]),
            # each custom candidate's code (its function's and NKI kernel's files) as a short hash: its searches'
            # folders are named by it, so an edited file is searched again and the other candidates are not
            digests={
                name: user_code.digest([e["function"], *([e["nki_kernel"]] if e.get("nki_kernel") else [])])[:8]
                for name, e in customs.items()
            },
        )

    def code_of(self, name: str) -> str:
        """What a candidate's verdict is kept for: a custom candidate's code digest, a setting's values."""
        return settings_digest(self.variants[name]) if name in self.variants else self.digests[name]

    def compiler_config(self, settings: Point | None = None) -> ConfigDocument:
        """The model's GEMMs alone as a sweep: the default's run, or a setting's (tune_shapes.compiler_config)."""
        return compiler_config(self.cfg, self.entry, self.run, settings)


def _customs(cfg: ConfigDocument, candidates: list[str], where: str) -> dict[str, CustomEntry]:
    """The custom candidates' suites.custom entries, by name; a name no entry has is one sentence."""
    customs = {e["name"]: e for e in cfg["suites"].get("custom", [])}
    for name in candidates:
        if name != COMPILER and name not in customs:
            raise UserError(
                f"{where}.candidates names {name}, which is neither {COMPILER} nor a suites.custom entry "
                f"(the config has: {', '.join(customs) or 'none'}); add the entry or fix the name."
            )
    return {name: customs[name] for name in candidates if name != COMPILER}


def _variants(
    cfg: ConfigDocument, entry: ModelEntry, run: str, settings: dict[str, list[Value]], where: str
) -> dict[str, Point]:
    """The compiler's build under tune.settings: a label per combination of the listed values other than the
    config's own (the default, measured anyway), each validated as a config before any trial runs."""
    own = {}
    for key in settings:
        own[key] = config_setting(cfg, key)
        if own[key] is NO_KEY:
            raise UserError(f"{where}.settings names {key}, which is no key of the config; fix it.")
    out = {}
    for values in itertools.product(*settings.values()):
        chosen: Point = dict(zip(settings, values))
        if chosen != own:
            label = f"{COMPILER}[{', '.join(f'{k}={v}' for k, v in chosen.items())}]"
            out[label] = chosen
            schema.validate(compiler_config(cfg, entry, run, chosen), source=f"{where}.settings ({label})")
    return out
