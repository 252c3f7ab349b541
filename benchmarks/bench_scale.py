"""Scale benchmark: simulate GPT-3 175B (TP8, PP8, interleaved VPP3, micro-batch 1) on
1,024 to 1,048,576 H100s (symmetric engine) and print wall time and peak memory per point.

Run: ``python benchmarks/bench_scale.py``. Each point runs in a fresh process (one core) so
times include catalog loading and no state is shared; peak memory is the process's max RSS.

The global batch is GPUs / 8 (dp = GPUs / 64, 8 micro-batches per pipeline at every size: GBS
4,096 at 32,768 GPUs, 131,072 at 1,048,576), so the simulated work per pipeline is the same and
time and memory must stay flat as the GPU count grows.
"""

from __future__ import annotations

import json
import subprocess
import sys

POINTS = [(gpus, gpus // 8) for gpus in (1024, 4096, 16_384, 65_536, 262_144, 1_048_576)]

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from codesign.api import build_run, simulate_run
run = build_run(model="gpt3-175b", gpu="h100", num_gpus={gpus}, tp=8, pp=8, vpp=3,
                micro_batch_size=1, global_batch_size={gbs}, sequence_parallel=True)
t1 = time.perf_counter()
report = simulate_run(run)
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(gpus={gpus}, wall_s=t2 - t0, simulate_s=t2 - t1, peak_MiB=rss,
                      step_time_s=report.step_time_s, mfu=report.mfu)))
"""


def main() -> None:
    print(f"{'GPUs':>10} {'wall s':>8} {'simulate s':>11} {'peak MiB':>9} "
          f"{'step s':>8} {'MFU %':>6}")
    for gpus, gbs in POINTS:
        out = subprocess.run(
            ["taskset", "-c", "0", sys.executable, "-c", CHILD.format(gpus=gpus, gbs=gbs)],
            capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{r['gpus']:>10,} {r['wall_s']:8.3f} {r['simulate_s']:11.3f} "
              f"{r['peak_MiB']:9.1f} {r['step_time_s']:8.3f} {r['mfu'] * 100:6.2f}")


if __name__ == "__main__":
    main()
