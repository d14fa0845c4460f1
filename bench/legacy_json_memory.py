"""Benchmark: a large legacy full-profile JSON (--output-format json) is read with bounded memory.

Target (issue: analysis): a 1 GB file must not need more than a few hundred MB of RAM. Writes a
synthetic file in the shape of the real inf2 files (summary / instruction / dma / metadata lists,
~430 B records with 64-bit ids and nested lists), runs
`neuronsweep query` on it and reports wall time and peak RSS; exits 1 over --budget-mb.
    python bench/legacy_json_memory.py [--size-mb 1024] [--budget-mb 400]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECORD = {"timestamp": 0, "duration": 650, "evt_wait_time": 12, "label": "TensorMatrix", "opcode": "MATMUL",
          "hbm_read_bytes": 0, "hbm_write_bytes": 0, "sbuf_read_bytes": 65536, "sbuf_write_bytes": 0,
          "layer": "layer_0", "bir_debug_info_source_location": "kernel.py:42", "hlo_name": "dot.1",
          "operands": "[s0:p128, s1:p128]", "subgraph": "sg00", "nki_source_location": "kernel.py:42",
          "id": 7074752707989819081, "predecessors": [[12, 13]]}  # real files: ids above 2^53, nested lists


def write(path: Path, size_mb: int) -> int:
    n = 0
    with open(path, "w") as f:
        f.write('{"summary": [{"total_time": 1.0}], "instruction": [')
        target = size_mb * 2**20
        while f.tell() < target:
            chunk = []
            for _ in range(10_000):
                rec = dict(RECORD, timestamp=n * 700, opcode=("MATMUL", "ACTIVATE", "TENSOR_TENSOR")[n % 3],
                           id=RECORD["id"] + n)
                chunk.append(json.dumps(rec))
                n += 1
            f.write(("," if n > 10_000 else "") + ",".join(chunk))
        f.write('], "dma": [], "metadata": [{"pe_num_rows": 128, "pe_num_cols": 128, "pe_clock_freq": 2.8}]}')
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--budget-mb", type=float, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        n = write(path, args.size_mb)
        t0 = time.perf_counter()
        proc = subprocess.run([str(Path(sys.executable).parent / "neuronsweep"), "query", str(path),
                               "SELECT opcode, count(*) AS n, sum(duration) AS total FROM instruction GROUP BY 1 ORDER BY 1",
                               "--csv"], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        size = path.stat().st_size
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(proc.stdout.strip())
    print(f"legacy json {size / 2**20:,.0f} MiB, {n:,} instructions: {wall:.1f} s, peak RSS {peak:.0f} MB "
          f"(budget {args.budget_mb:.0f} MB)")
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
        return 1
    return 0 if peak <= args.budget_mb else 1


if __name__ == "__main__":
    sys.exit(main())
