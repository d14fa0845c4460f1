"""Load and validate a sweep config against the schema (package data: neuronsweep/config/config.schema.yaml,
also reachable as workflow/schemas/config.schema.yaml).

jsonschema (the validator Snakemake itself uses) does the checking; this module only fills schema
defaults and turns the first error into one sentence that names the file and the key, because
a raw jsonschema dump is a page long and names neither.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

from neuronsweep import __version__
from neuronsweep.atomic import write_json
from neuronsweep.config.suites import ConfigDocument
from neuronsweep.errors import UserError

if TYPE_CHECKING:
    from jsonschema import ValidationError

SCHEMA = "config.schema.yaml"  # shipped inside the package, so an installed wheel validates too


def _default(sub: dict, root: dict) -> tuple[bool, Any]:
    """A property's default, also through a local "#/$defs/..." reference."""
    if "default" in sub:
        return True, sub["default"]
    ref = sub.get("$ref", "")
    if ref.startswith("#/$defs/"):
        target = root["$defs"][ref.split("/")[-1]]
        if "default" in target:
            return True, target["default"]
    return False, None


def _with_defaults(base: Any, root: dict) -> Any:
    """A validator class that also writes each property's schema default into the instance."""
    from jsonschema import validators

    validate_properties = base.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict, instance: object, schema: dict) -> Iterator:
        if isinstance(instance, dict):
            for key, sub in properties.items():
                has, value = _default(sub, root)
                if has and key not in instance:
                    instance[key] = copy.deepcopy(value)
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(base, {"properties": set_defaults})


def resolve_ref(sub: dict, root: dict) -> dict:
    """A property with its local "#/$defs/..." reference merged in (the property's own keys win)."""
    ref = sub.get("$ref", "")
    return (
        {**root["$defs"][ref.split("/")[-1]], **{k: v for k, v in sub.items() if k != "$ref"}}
        if ref.startswith("#/$defs/")
        else sub
    )


def _scalar(value: Any, sub: dict) -> Any:
    """A value as the schema's scalar type wants it: `--config capture='{iterations: 3}'` reaches us as
    the string '3' (Snakemake parses nested --config values with YAML's BaseLoader, all strings), and
    YAML's 3.0 is an integer to JSON Schema but not to the CLI; anything else is left for the validator."""
    types = sub.get("type") or {type(v).__name__ for v in sub.get("enum", []) if not isinstance(v, str)}
    types = {types} if isinstance(types, str) else set(types)
    wants = {"integer", "int", "number", "float", "boolean", "bool", "NoneType"}
    if isinstance(value, str) and types & wants:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if not isinstance(parsed, (str, dict, list)):
            value = parsed
    if isinstance(value, float) and value.is_integer() and types & {"integer", "int"}:
        return int(value)
    return value


def _coerce(instance: Any, sub: dict, root: dict) -> Any:
    """Walk the config beside its schema, coercing scalars (_scalar) in place."""
    sub = resolve_ref(sub, root)
    if isinstance(instance, dict):
        props, extra = sub.get("properties", {}), sub.get("additionalProperties")
        for key, value in instance.items():
            child = props.get(key, extra if isinstance(extra, dict) else None)
            if child is not None:
                instance[key] = _coerce(value, child, root)
        return instance
    if isinstance(instance, list) and isinstance(sub.get("items"), dict):
        return [_coerce(v, sub["items"], root) for v in instance]
    return _scalar(instance, sub)


# libyaml's parser where PyYAML was built with it: every Snakemake start reads the schema and the config
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load_schema() -> dict:
    """The config schema (config.schema.yaml, shipped in the package), its duplicate keys refused."""
    return yaml.load(resources.files("neuronsweep.config").joinpath(SCHEMA).read_text(), Loader=_LOADER)


def schema_default(dotted: str) -> Any:
    """The schema's default of a key such as 'capture.iterations': the one place defaults live, for
    the CLI's flags as much as for configs. A list's entries are stepped into by the key after the list's
    ('suites.custom.search.per_round': per_round of a custom entry's search)."""
    root = sub = load_schema()
    for part in dotted.split("."):
        if "properties" not in sub and "items" in sub:  # a list: the key names a field of its entries
            sub = resolve_ref(sub["items"], root)
        sub = resolve_ref(sub["properties"][part], root)
    return copy.deepcopy(sub["default"])


def check_profiled_exec(num_exec: int, nth_exec: int, names: tuple[str, str], source: str, kind: str = "key") -> None:
    """The profiled execution must be one of those run: one check for the config and the CLI; names
    are the keys or flags to quote."""
    if nth_exec > num_exec:
        short = [n.split(".")[-1] for n in names]
        raise UserError(
            f"{source}: {kind} '{names[1]}' ({nth_exec}) must not exceed '{names[0]}' ({num_exec}); "
            f"raise {short[0]} or lower {short[1]}."
        )


def _key(path: Iterable[str | int]) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


# schema patterns in words (a user should not have to read a regex)
PATTERN_WORDS = {
    "^[A-Za-z0-9][A-Za-z0-9._-]*$": (
        "be a plain name: letters, digits, '.', '_' or '-', starting with a letter or digit"
    ),
    "^[a-z0-9][a-z0-9.]*(-[a-z0-9.]+)*$": "be a lower-case name: letters, digits and '.', words joined by '-'",
    "^[a-z][a-z0-9_]*$": "be a lower-case name: letters, digits and '_', starting with a letter",
}


def _alternative(alt: dict) -> str:
    """'auto', 'an integer of at least 1': one branch of an anyOf, in words."""
    if "const" in alt:
        return str(alt["const"])
    words = f"{'an' if alt['type'][0] in 'aeiou' else 'a'} {alt['type']}"
    return words + (f" of at least {alt['minimum']}" if "minimum" in alt else "")


def _sentence(error: ValidationError, source: str) -> str:
    """One sentence for one jsonschema error: what is wrong, which key, how to fix it."""
    key = _key(error.absolute_path)
    v, val = error.validator, error.validator_value  # val: the schema's value for v (a list, a type name, ...)
    if v == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = f"{key}." if error.absolute_path else ""
        return (
            f"{source}: unknown key '{where}{extra[0]}'; allowed keys here are "
            f"{', '.join(allowed)} (check the spelling or remove it)."
        )
    if v == "required":
        missing = [k for k in val if k not in error.instance]
        if not error.absolute_path:
            return f"{source}: the config has no '{missing[0]}' section; add one (config/config.yaml shows every key)."
        return f"{source}: key '{key}' is missing the required entry '{missing[0]}'; add it."
    if v == "anyOf" and key.endswith(".routing"):  # suites.model: a MoE routing policy
        return (
            f"{source}: key '{key}' must be balanced, {{zipf: s}} with s above 0 or {{counts: FILE}}, not "
            f"{error.instance!r}; fix the value."
        )
    if v == "anyOf" and key.startswith("suites.") and key.count(".") == 1:
        return f"{source}: suite '{key}' needs a 'grid' or a 'shapes' list; add one of them."
    if v == "anyOf" and all("const" in alt or "type" in alt for alt in val):
        either = " or ".join(map(_alternative, val))
        return f"{source}: key '{key}' must be {either}, not {error.instance!r}; fix the value."
    if v == "type":
        return f"{source}: key '{key}' must be of type {val}, not {error.instance!r}; fix the value."
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        word = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "more than",
            "exclusiveMaximum": "less than",
        }[v]
        return f"{source}: key '{key}' must be {word} {val}, not {error.instance!r}; fix the value."
    if v == "enum":
        return (
            f"{source}: key '{key}' must be one of {', '.join(map(str, val))}, not {error.instance!r}; fix the value."
        )
    if v == "pattern":
        what = PATTERN_WORDS.get(val, f"match the pattern {val}")
        return f"{source}: key '{key}' = {error.instance!r} must {what}; fix the value."
    if v == "not" and "const" in val:
        return (
            f"{source}: key '{key}' must not be {val['const']!r}, a folder neuron-sweep keeps "
            "(results/history); choose another."
        )
    if v == "minLength":
        return f"{source}: key '{key}' must not be empty; give a value or remove the key for its default."
    if v == "maxLength":
        return f"{source}: key '{key}' is longer than {val} characters; shorten it."
    if v in ("minItems", "minProperties"):
        return f"{source}: key '{key}' must not be empty; give at least {val} entry."
    if v == "uniqueItems":
        return f"{source}: key '{key}' lists a value twice; remove the duplicate."
    return f"{source}: key '{key}': {error.message}; fix the value."


def validate(config: object, source: str = "config", base: Path | None = None) -> ConfigDocument:
    """Return a validated deep copy of `config` with schema defaults filled in; the paths of users' code
    in it made absolute against `base` (the config file's folder)."""
    if not isinstance(config, dict):
        raise UserError(f"{source}: the config must be a mapping of keys to values, not {type(config).__name__}.")
    from jsonschema import Draft202012Validator  # imported here: a cached validation never needs it

    schema = load_schema()
    cfg = _coerce(copy.deepcopy(config), schema, schema)
    validator = _with_defaults(Draft202012Validator, schema)(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise UserError(_sentence(errors[0], source))
    document = cast(ConfigDocument, cfg)  # what the schema declares, checked just now
    _semantic_checks(document, source)
    _resolve_user_code(document, base or Path.cwd())
    return document


USER_CODE_KEYS = ("function", "nki_kernel", "module", "hf_config", "neuron_config")  # suites.custom, suites.model
FILE_KEYS = ("hf_config", "neuron_config")  # a path, never module:name


def _resolve_user_code(cfg: ConfigDocument, base: Path) -> None:
    """`path/file.py:name`, `path/config.json` and a routing counts file relative to the config file, as a
    user writes them; `package.module:name` stays as it is (imported where the sweep runs)."""
    suites = cfg["suites"]
    for typed in (*suites.get("custom", []), *suites.get("model", [])):
        entry = cast("dict[str, Any]", typed)  # rewritten by key name below
        for key in USER_CODE_KEYS:
            value = entry.get(key)
            if not isinstance(value, str):
                continue
            target, sep, name = value.rpartition(":") if key not in FILE_KEYS else (value, "", "")
            if key in FILE_KEYS or target.endswith(".py") or "/" in target:
                path = (base / Path(target).expanduser()).resolve()
                entry[key] = f"{path}{sep}{name}"
        counts = entry.get("routing", {}).get("counts") if isinstance(entry.get("routing"), dict) else None
        if isinstance(counts, str):  # suites.model routing: {counts: FILE}
            entry["routing"]["counts"] = str((base / Path(counts).expanduser()).resolve())


def validate_files(config: object, files: list, source: str, cache_dir: Path | None = None) -> ConfigDocument:
    """validate() of a config Snakemake read from `files` (plus --config overrides), the files read again
    strictly (duplicate keys). What it returns depends only on the config, the files' bytes, the schema
    and this package, so with cache_dir it is kept there as JSON and reused while those stay the same:
    every `snakemake` start (a dry run, a no-op rerun) then skips the strict read, jsonschema and the
    checks (0.3 s; docs/benchmarks.md). Only a config that passed is kept."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name in files:
        try:
            digest.update(Path(name).read_bytes())
        except OSError:
            digest.update(b"unreadable")  # read_yaml below says why
    digest.update((resources.files("neuronsweep.config") / SCHEMA).read_bytes() + __version__.encode())
    key = digest.hexdigest()
    slot = None
    if cache_dir is not None:
        slot = Path(cache_dir) / f"validated-{hashlib.sha256(source.encode()).hexdigest()[:16]}.json"
        try:
            kept = json.loads(slot.read_text())
            if kept.get("key") == key:
                return kept["config"]
        except (OSError, ValueError, AttributeError):
            pass
    for name in files:
        read_yaml(name)
    cfg = validate(config, source=source, base=Path(files[-1]).resolve().parent if files else None)
    if slot is not None:
        try:
            write_json(slot, {"key": key, "config": cfg})
        except OSError:
            pass  # a read-only working directory: no cache, same result
    return cfg


class _StrictLoader(_LOADER):  # type: ignore[misc,valid-type]  # CSafeLoader where libyaml is there
    """YAML that refuses a key given twice in one mapping (PyYAML silently keeps the last one, which
    drops a whole `suites:` or `capture:` section without a word)."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            lines = sorted({seen[key] + 1, key_node.start_mark.line + 1})
            where = f"lines {lines[0]} and {lines[1]}" if len(lines) == 2 else f"line {lines[0]}"
            raise UserError(f"key '{key}' appears twice in one mapping ({where}); keep one of them")
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def read_yaml(path: str | Path) -> Any:
    """A YAML config file, duplicate keys refused; every problem is one sentence naming the file."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_StrictLoader)
    except FileNotFoundError:
        where = "" if path.is_absolute() else f" in {Path.cwd()}"
        raise UserError(
            f"{path}: no such config file{where}; run from the repository's folder, or pass an existing file "
            "with --config."
        ) from None
    except UserError as exc:
        raise UserError(f"{path}: {exc}.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}: not valid YAML{line}; fix the syntax.") from None


def load(path: str | Path) -> ConfigDocument:
    """Read a YAML config file and validate it."""
    data = read_yaml(path)
    if data is None:
        raise UserError(f"{path}: the config file is empty; start from config/config.yaml.")
    return validate(data, source=str(path), base=Path(path).resolve().parent)


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_regexes(mapping: Mapping[str, str], key: str, source: str) -> None:
    """Refuse, in one sentence naming the key, a pattern under `key` that is not a valid regex."""
    for name, pattern in mapping.items():
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UserError(
                f"{source}: key '{key}.{name}' = {pattern!r} is not a valid regex ({exc}); fix it."
            ) from None


def _semantic_checks(cfg: ConfigDocument, source: str) -> None:
    """What the schema cannot say: a plain run name (re.fullmatch: `$` in a schema pattern lets a
    trailing newline through), valid regexes, and the profiled execution among those run."""
    if not RUN_NAME.fullmatch(cfg["run"]):
        raise UserError(
            f"{source}: key 'run' = {cfg['run'][:40]!r} must be a plain name of 1 to 100 letters, digits, "
            "'.', '_' or '-' (it names the folder results/<run>/); fix the value."
        )
    check_regexes(cfg["track_patterns"], "track_patterns", source)
    check_profiled_exec(
        cfg["capture"]["num_exec"], cfg["capture"]["nth_exec"], ("capture.num_exec", "capture.nth_exec"), source
    )


def section_defaults(section: str, options: dict) -> dict:
    """A backend's config section (`neuron`, `xla`) with the schema's defaults filled in, so a stage run
    by hand with `--options '{}'` behaves like one run from a validated config; cpu has no section."""
    props = load_schema()["properties"].get(section, {}).get("properties", {})
    return {**{k: copy.deepcopy(v["default"]) for k, v in props.items() if "default" in v}, **options}
