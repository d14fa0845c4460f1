"""Content-addressed compile cache, shared by every run and result folder.

The key hashes everything that determines the compiled artifact (workload spec, backend, toolchain
versions, artifact format), so a hit is always safe to reuse and a toolchain upgrade misses.
Entries are written atomically; two processes building the same key both produce a valid entry.
"""

from __future__ import annotations

import hashlib
import json
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
