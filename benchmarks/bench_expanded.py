"""Expanded (per-rank) simulation benchmark: GPT-3 175B (TP8, PP8, interleaved VPP3, SP,
ZeRO-1 with overlapped gradient reduction and parameter gathers, 8 micro-batches per
pipeline) with stragglers, link faults, a second GPU type and contention; wall time, peak
memory and ranks simulated per second.

Run: ``python benchmarks/bench_expanded.py`` (``--quick``: the 8,192-rank scenarios only).
Each point runs in a fresh process pinned to one core (``taskset -c 0``); wall time is the
whole :func:`codesign.api.simulate_expanded` call (the symmetric run, the perturbed runs
without and with contention that its report compares); peak memory is the process's max RSS.

Scenarios: ``healthy`` (no perturbation: one class, equal to the symmetric step);
``1 straggler`` (rank 5 at 50 %); ``1% stragglers`` (random ranks at 70-95 %);
``all jittered`` (every rank at a random 95-100 % of its speed: every replica differs, the
worst case for the equivalence classes); ``faults`` (a failed NIC and a leaf at half
bandwidth); ``mix`` (the last quarter of the ranks are A100s); ``+contention`` variants add
flow-level sharing of overlapping collectives.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, random, resource, sys, time
t0 = time.perf_counter()
from codesign.api import build_run, simulate_expanded
gpus, scenario = {gpus}, {scenario!r}
run = build_run(model="gpt3-175b", gpu="h100", num_gpus=gpus, tp=8, pp=8, vpp=3,
                micro_batch_size=1, global_batch_size=gpus // 8, sequence_parallel=True,
                zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True)
rng = random.Random(0)
kw = {{}}
if scenario.startswith("1 straggler"):
    kw["stragglers"] = [(5, 0.5)]
elif scenario.startswith("1% stragglers"):
    ranks = rng.sample(range(gpus), gpus // 100)
    kw["stragglers"] = [(r, rng.uniform(0.7, 0.95)) for r in ranks]
    kw["failed_links"] = ["nic:3"] if "faults" in scenario else []
elif scenario.startswith("all jittered"):
    kw["stragglers"] = [(r, rng.uniform(0.95, 1.0)) for r in range(gpus)]
elif scenario.startswith("faults"):
    kw["failed_links"] = ["nic:3"]
    kw["degraded_links"] = ["leaf:7:0.5"]
elif scenario.startswith("mix"):
    kw["mix"] = ("a100", 0.25)
kw["contention"] = "contention" in scenario
t1 = time.perf_counter()
sim = simulate_expanded(run, **kw)
t2 = time.perf_counter()
e = sim.expanded
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(gpus=gpus, scenario=scenario, wall_s=t2 - t0, simulate_s=t2 - t1,
                      peak_MiB=rss, step_s=e["step_time_s"], sym_s=e["symmetric_step_time_s"],
                      classes=e["replica_classes"], clusters=e["perturbed_clusters"])))
"""

SCENARIOS = ["healthy", "1 straggler", "1% stragglers", "all jittered", "faults", "mix",
             "healthy +contention", "1% stragglers +faults +contention",
             "all jittered +contention"]
SIZES = [1024, 2048, 4096, 8192, 16384]


def point(gpus: int, scenario: str) -> dict[str, object]:
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", CHILD.format(gpus=gpus, scenario=scenario)],
        capture_output=True, text=True, check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    quick = "--quick" in sys.argv
    rows = [(8192, s) for s in SCENARIOS]
    if not quick:
        rows += [(g, "all jittered") for g in SIZES if g != 8192]
    print(f"{'ranks':>7} {'scenario':36s} {'wall s':>7} {'sim s':>7} {'ranks/s':>9} "
          f"{'peak MiB':>9} {'classes':>7} {'clusters':>8} {'step s':>7} {'sym s':>7}")
    for gpus, scenario in rows:
        r = point(gpus, scenario)
        sim_s = float(r["simulate_s"])  # type: ignore[arg-type]
        print(f"{gpus:>7,} {scenario:36s} {r['wall_s']:7.2f} {sim_s:7.2f} "
              f"{gpus / sim_s:9,.0f} {r['peak_MiB']:9.1f} {r['classes']:>7} "
              f"{r['clusters']:>8} {r['step_s']:7.3f} {r['sym_s']:7.3f}")


if __name__ == "__main__":
    main()
