"""Pool workers exit when the process that started them is killed (issue 14 item 6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_PARENT = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
from codesign.runtime import pool_init

pool = ProcessPoolExecutor(max_workers=2, **pool_init())
futures = [pool.submit(time.sleep, 60) for _ in range(2)]
time.sleep(1.0)
print(" ".join(str(p) for p in pool._processes), flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        text = status.read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in text  # a zombie has exited


def test_workers_exit_when_the_parent_is_killed() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(p) for p in workers)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers)
