"""A user's own function, named as `path/to/file.py:name` (relative to the config file) or
`package.module:name` (importable where the sweep runs). Importing it runs the user's module, as pytest
runs a conftest.py: the sweep trusts the code it was pointed at. The source file is what a build depends
on: its hash is in the workload spec, so an edit rebuilds that suite's cases and nothing else."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuronsweep.errors import UserError


def split(ref: str) -> tuple[str, str]:
    """('path/to/file.py' or 'package.module', 'name'); ValueError when it is not `TARGET:NAME`."""
    target, sep, name = ref.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise ValueError(f"{ref!r} is not FILE.py:NAME or package.module:NAME")
    return target, name


def is_file(target: str) -> bool:
    """Whether a function target names a file (a path ending in .py) rather than a module."""
    return target.endswith(".py") or "/" in target or "\\" in target


def resolved(ref: str, base: Path) -> str:
    """The reference with a file path made absolute against `base` (the config file's folder)."""
    target, name = split(ref)
    if not is_file(target):
        return ref
    return f"{(base / Path(target).expanduser()).resolve()}:{name}"


def source_file(ref: str) -> Path:
    """The file a reference's code lives in (a module's, found without importing the module itself)."""
    target, _ = split(ref)
    if is_file(target):
        return Path(target)
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError) as exc:
        raise UserError(f"{ref}: module {target} cannot be found ({exc}); check the name and sys.path.") from None
    if found is None or not found.origin or not Path(found.origin).is_file():
        raise UserError(f"{ref}: module {target} is not importable here; install it or give FILE.py:NAME.")
    return Path(found.origin)


def digest(refs: list[str]) -> str:
    """The sha256 of the source files behind these references (what a build of them depends on)."""
    h = hashlib.sha256()
    for ref in refs:
        path = source_file(ref)
        try:
            h.update(path.read_bytes())
        except OSError:
            raise UserError(f"{ref}: {path} cannot be read; check the path (relative to the config file).") from None
    return h.hexdigest()


def load(ref: str) -> Any:
    """The object a reference names, its module imported (a file under a name of its own, so two files
    of one name never collide)."""
    target, name = split(ref)
    if is_file(target):
        path = Path(target)
        if not path.is_file():
            raise UserError(f"{ref}: no such file {path}; give a path relative to the config file.")
        module_name = f"neuronsweep_user_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}_{path.stem}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None  # a .py file that exists always has both
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, str(path.parent))  # the user's file may import its neighbours
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(module_name, None)
                raise
            finally:
                sys.path.remove(str(path.parent))
    else:
        module = importlib.import_module(target)
    if not hasattr(module, name):
        raise UserError(f"{ref}: {target} has no {name}; check the name after the colon.")
    obj = getattr(module, name)
    if not callable(obj):
        raise UserError(f"{ref}: {name} is a {type(obj).__name__}, not a function; name a function.")
    return obj


def answer_stdin(probe: Callable[[dict], object]) -> int:
    """A plan-time child's main (custom_probe, model_probe): the request as JSON on stdin, the answer on stdout."""
    json.dump(probe(json.load(sys.stdin)), sys.stdout)
    return 0
