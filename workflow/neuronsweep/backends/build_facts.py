"""What every backend's build.json says alike: the installed versions of its packages (also in cache
keys) and the sentence for a workload that recompiles when called again."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata


def package_versions(packages: Iterable[str]) -> dict[str, str | None]:
    """Installed version of each package, None when absent (recorded in build.json and cache keys)."""
    versions: dict[str, str | None] = {}
    for pkg in packages:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return versions


def recompilation_flag(what: str) -> str:
    """build.json's sentence for a workload that compiled again when called again with the same inputs."""
    trap = "@nki.jit trap" if what == "kernel" else "trap, a value baked into the graph"
    return (
        f"the {what} recompiled on a repeated call with the same inputs: every framework call pays "
        f"compile time (the {trap})"
    )
