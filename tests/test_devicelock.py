"""The device lock says who holds it: a waiting step names the holder, doctor shows it, and a lock
left by a killed process is taken over at once (flock is released by the kernel)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml
from helpers import BIN, tiny_config

from neuronsweep.host import devicelock

HOLD = (
    "from neuronsweep.host import devicelock; import time, sys\n"
    "with devicelock.held(sys.argv[1], 'capture matmul-x -> results/r/cpu/workloads/matmul-x/capture'):\n"
    "    print('held', flush=True); time.sleep(60)\n"
)


@pytest.mark.torch  # the cpu plan probe or a torch child
def test_a_waiting_step_names_the_holder_and_takes_over_when_it_dies(tmp_path, caplog, monkeypatch):
    lock = tmp_path / "device.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert devicelock.holder(lock).startswith(f"held by pid {holder.pid} (capture matmul-x -> results/r/")
        base = tiny_config(tmp_path, calibrated=False)
        cfg = {**base, "capture": {**base["capture"], "device_lock": str(lock)}}
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
        doctor = subprocess.run(
            [str(BIN / "neuronsweep"), "doctor", "--config", str(tmp_path / "c.yaml")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"device lock {lock}: held by pid {holder.pid} (capture matmul-x" in doctor
        monkeypatch.setattr(devicelock, "WAIT_REPORT_S", 0.3)
        t0 = time.time()
        with caplog.at_level(logging.WARNING, logger="neuronsweep"):
            threading.Timer(1.0, lambda: os.kill(holder.pid, signal.SIGKILL)).start()
            with devicelock.held(lock, "test") as span:
                info = json.loads(lock.read_text())
        waits = [r.getMessage() for r in caplog.records if "waiting for the device lock" in r.getMessage()]
        assert len(waits) >= 2 and f"held by pid {holder.pid} (capture matmul-x" in waits[0]
        assert span["waited_s"] >= 0.9 and time.time() - t0 < 30  # a dead holder's lock is taken over
        assert info["pid"] == os.getpid() and info["holder"] == "test"
        assert devicelock.holder(lock) == "free" and lock.read_text() == ""
    finally:
        holder.kill()
