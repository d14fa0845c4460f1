"""Content-addressed compile cache, shared by every run and result folder.

The key hashes everything that determines the compiled artifact (workload spec, backend, toolchain
versions, artifact format), so a hit is always safe to reuse and a toolchain upgrade misses.
An entry is made in a private temporary folder and published with one rename, so two processes
building the same key never write into each other's folder (a neuron compile cache inside it, NKI
inputs) and leave one whole entry. Its meta.json holds the artifact's sha256: a corrupt or
truncated entry is reported, discarded and rebuilt, never loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from neuronsweep.atomic import copy_file, read_json, remove_stale, write_json

log = logging.getLogger("neuronsweep")


def cache_key(material: dict) -> str:
    """The key of a cache entry: SHA-256 of the material's canonical JSON (sorted keys), so equal inputs
    share an entry."""
    blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class CompileCache:
    """Build artifacts keyed by what made them, shared by runs and result folders: an entry is stored whole (atomic
    rename) and checked against its own digest when fetched."""

    def __init__(self, root: str | Path, backend: str) -> None:
        self.root = Path(root).expanduser()
        self.backend = backend
        self.discarded: list[str] = []  # why entries were thrown away during this build (for build.json)

    def entry(self, key: str) -> Path:
        """The folder of the entry with this key."""
        return self.root / self.backend / key[:2] / key

    def fetch(self, key: str, artifact_name: str, dest: Path) -> dict | None:
        """Copy a cached artifact to `dest` and return its metadata; None on a miss, or when the entry
        does not verify (then it is discarded, so the caller rebuilds it)."""
        entry = self.entry(key)
        meta_path, artifact = entry / "meta.json", entry / artifact_name
        if not entry.exists():
            return None
        problem = None
        try:
            meta = read_json(meta_path)
            if not artifact.is_file():
                problem = f"its {artifact_name} is missing"
            elif artifact.stat().st_size != meta["bytes"] or file_sha256(artifact) != meta["sha256"]:
                problem = f"its {artifact_name} does not match the checksum in meta.json (truncated or corrupt)"
        except (OSError, ValueError, KeyError) as exc:
            problem = f"its meta.json is unreadable ({type(exc).__name__})"
        if problem:
            why = f"compile cache entry {entry} discarded: {problem}; rebuilding it"
            log.warning(f"warning: {why}")
            self.discarded.append(why)
            shutil.rmtree(entry, ignore_errors=True)
            return None
        copy_file(artifact, dest)
        return meta

    def through(
        self, material: dict, artifact_name: str, dest: Path, make: Callable[[Path], tuple[Path, dict]]
    ) -> tuple[dict, dict]:
        """The cache-through build every backend uses: copy the artifact for `material` to dest, or
        make it (make(folder) builds in that private folder and returns the artifact it wrote and its
        meta, which must hold `compile_s` and `compile_s_source`) and publish the folder as the entry.
        Returns (meta, the build record's compile and cache fields); on a hit the compile time is the
        one recorded when the entry was made."""
        key = cache_key(material)
        entry = self.entry(key)
        meta = self.fetch(key, artifact_name, dest)
        hit = meta is not None
        if not hit:
            entry.parent.mkdir(parents=True, exist_ok=True)
            remove_stale(entry.parent, f".{key[:16]}.")  # a build killed mid-store leaves its folder
            tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.{os.getpid()}.", suffix=".tmp", dir=entry.parent))
            try:
                made, meta = make(tmp)
                copy_file(made, tmp / artifact_name)
                # paths the maker recorded inside its folder (NKI inputs, a compile cache) name the entry
                meta = json.loads(json.dumps(meta).replace(str(tmp), str(entry)))
                meta = {
                    **meta,
                    "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "sha256": file_sha256(tmp / artifact_name),
                    "bytes": (tmp / artifact_name).stat().st_size,
                }
                write_json(tmp / "meta.json", meta)
                try:
                    os.rename(tmp, entry)  # atomic; fails if another process published this key first
                except OSError:
                    pass  # theirs is as good as ours: keep it
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            copy_file(entry / artifact_name, dest)
            meta = read_json(entry / "meta.json")
        assert meta is not None  # a hit's fetch, or the entry just made
        return meta, {
            "compile_s": meta["compile_s"],
            "compile_s_source": meta["compile_s_source"] if not hit else f"cache entry made {meta['made_at']}",
            "cache": {
                "dir": str(self.root),
                "key": key,
                "hit": hit,
                "entry": str(entry),
                "discarded": self.discarded or None,
            },
            "artifact_sha256": meta["sha256"],
            "artifact_bytes": meta["bytes"],
        }
