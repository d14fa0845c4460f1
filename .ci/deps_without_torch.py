"""The package's dependencies with the extras `test` pulls in, less torch: what .ci/run installs into its
Python 3.12 and 3.13 venvs. TorchNeuron's wheels are for Python 3.12-3.14 and a user installs neuron-sweep
into that venv, beside its own torch; PyPI has only a multi-GB CUDA torch for these Pythons here, so those
runs test everything that needs no torch (pytest -m "not workflow and not torch")."""

import re
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
extras, wanted, seen = project["optional-dependencies"], ["test"], set()
requirements = list(project["dependencies"])
while wanted:
    extra = wanted.pop()
    if extra in seen:
        continue
    seen.add(extra)
    for req in extras[extra]:
        own = re.match(r"neuron-sweep\[(.+)\]", req)
        if own:
            wanted += own.group(1).split(",")
        else:
            requirements.append(req)
print("\n".join(r for r in dict.fromkeys(requirements) if not re.match(r"torch\b", r)))
