"""Content-addressed compile cache, shared by every run and result folder.

The key hashes everything that determines the compiled artifact (workload spec, backend, toolchain
versions, artifact format), so a hit is always safe to reuse and a toolchain upgrade misses.
Entries are written atomically; two processes building the same key both produce a valid entry.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from .atomic import copy_file, read_json, write_json


def cache_key(material: dict) -> str:
    blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


class CompileCache:
    def __init__(self, root: str | Path, backend: str):
        self.root = Path(root).expanduser()
        self.backend = backend

    def entry(self, key: str) -> Path:
        return self.root / self.backend / key[:2] / key

    def fetch(self, key: str, artifact_name: str, dest: Path) -> dict | None:
        """Copy a cached artifact to `dest` and return its metadata, or None on a miss."""
        entry = self.entry(key)
        meta, artifact = entry / "meta.json", entry / artifact_name
        if not (meta.is_file() and artifact.is_file()):
            return None
        copy_file(artifact, dest)
        return read_json(meta)

    def store(self, key: str, artifact: Path, meta: dict) -> Path:
        entry = self.entry(key)
        copy_file(artifact, entry / artifact.name)
        write_json(entry / "meta.json", meta)  # written last: an entry without meta is a miss
        return entry

    def through(self, material: dict, artifact_name: str, dest: Path,
                make: Callable[[Path], tuple[Path, dict]]) -> tuple[dict, dict]:
        """The cache-through build every backend uses: copy the artifact for `material` to dest, or
        make it (make(entry) returns the artifact it wrote and its meta, which must hold `compile_s`
        and `compile_s_source`) and store it. Returns (meta, the build record's compile and cache
        fields); on a hit the compile time is the one recorded when the entry was made."""
        key = cache_key(material)
        meta = self.fetch(key, artifact_name, dest)
        hit = meta is not None
        if not hit:
            made, meta = make(self.entry(key))
            if Path(made) != Path(dest):
                copy_file(made, dest)
            meta = {**meta, "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            self.store(key, dest, meta)
        return meta, {
            "compile_s": meta["compile_s"],
            "compile_s_source": meta["compile_s_source"] if not hit else f"cache entry made {meta['made_at']}",
            "cache": {"dir": str(self.root), "key": key, "hit": hit, "entry": str(self.entry(key))},
        }
