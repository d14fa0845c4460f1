"""The compile cache never loads a damaged entry: every kind of damage injected is detected, reported,
discarded and rebuilt into a whole entry (the README's figure counts these)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from neuronsweep.store.cache import CompileCache, file_sha256

MATERIAL = {"spec": {"kind": "matmul", "m": 4, "k": 4, "n": 4, "dtype": "fp32"}, "backend": "cpu"}


def _make(payload: bytes):
    def make(folder: Path):
        (folder / "made.bin").write_bytes(payload)
        return folder / "made.bin", {"compile_s": 0.5, "compile_s_source": "test"}

    return make


def _flip(path: Path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated artifact": lambda e: (e / "model.pt2").write_bytes((e / "model.pt2").read_bytes()[:10]),
    "one byte flipped": lambda e: _flip(e / "model.pt2"),
    "empty artifact": lambda e: (e / "model.pt2").write_bytes(b""),
    "artifact missing": lambda e: (e / "model.pt2").unlink(),
    "meta.json garbage": lambda e: (e / "meta.json").write_text("{not json"),
    "meta.json without checksum": lambda e: (e / "meta.json").write_text(json.dumps({"compile_s": 1})),
    "meta.json missing": lambda e: (e / "meta.json").unlink(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_entry_is_detected_discarded_and_rebuilt(tmp_path, damage):
    cache = CompileCache(tmp_path / "cache", "cpu")
    payload = os.urandom(4096)
    meta, fields = cache.through(MATERIAL, "model.pt2", tmp_path / "a.pt2", _make(payload))
    entry = Path(fields["cache"]["entry"])
    DAMAGE[damage](entry)

    again = CompileCache(tmp_path / "cache", "cpu")
    _, fields = again.through(MATERIAL, "model.pt2", tmp_path / "b.pt2", _make(payload))
    assert fields["cache"]["hit"] is False and len(fields["cache"]["discarded"]) == 1
    assert str(entry) in fields["cache"]["discarded"][0]
    assert (tmp_path / "b.pt2").read_bytes() == payload  # the damaged bytes were never handed out
    assert file_sha256(entry / "model.pt2") == json.loads((entry / "meta.json").read_text())["sha256"]
    _, fields = CompileCache(tmp_path / "cache", "cpu").through(
        MATERIAL, "model.pt2", tmp_path / "c.pt2", _make(b"never called")
    )
    assert fields["cache"]["hit"] is True and (tmp_path / "c.pt2").read_bytes() == payload


def test_a_killed_store_leaves_no_folder_behind_once_the_key_is_built_again(tmp_path):
    cache = CompileCache(tmp_path / "cache", "cpu")
    from neuronsweep.store.cache import cache_key

    key = cache_key(MATERIAL)
    parent = cache.entry(key).parent
    parent.mkdir(parents=True)
    dead = parent / f".{key[:16]}.999999999.abcd.tmp"  # a pid that cannot be alive
    dead.mkdir()
    live = parent / f".{key[:16]}.{os.getpid()}.efgh.tmp"  # a store in progress elsewhere
    live.mkdir()
    cache.through(MATERIAL, "model.pt2", tmp_path / "a.pt2", _make(b"x" * 10))
    assert not dead.exists() and live.exists()
