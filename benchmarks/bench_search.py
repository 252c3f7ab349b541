"""Search benchmark: plans per second of ``codesign search`` end to end (enumerate the space,
estimate every valid plan, engine-confirm the best), with the confirmed winner.

Run: ``python benchmarks/bench_search.py [--jobs N] [--confirm K]``. Cases:

* GPT-3 175B on 1,024 H100s (DGX-H100), global batch 1,024, the automatic space;
* GPT-3 175B on 4,096 H100s, global batch 2,048, the automatic space;
* GPT-4-class 1.8T MoE on 4,096 GB200s (NVL72), global batch 2,048: the automatic space with
  tp in {2, 4, 8}, micro-batch 1 and ZeRO 1 or 3 (~10,700 plans; the full automatic space has
  ~120,000).

``plans/s`` counts the plans that passed the plan rules and were estimated (feasible or out of
memory), divided by the wall time of the whole search; the target is >= 350 plans/s on two
cores with ``--jobs 2``. The machine is shared, so timings are noisy: re-run if one is off.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from codesign.api import build_run
from codesign.search import SearchSpace, search

TARGET_PLANS_PER_S = 350.0

CASES: list[tuple[str, dict[str, Any], SearchSpace | None]] = [
    ("gpt3-175b / 1,024 H100", dict(model="gpt3-175b", gpu="h100", num_gpus=1024,
                                    global_batch_size=1024), None),
    ("gpt3-175b / 4,096 H100", dict(model="gpt3-175b", gpu="h100", num_gpus=4096,
                                    global_batch_size=2048), None),
    ("gpt4-1.8t-moe / 4,096 GB200", dict(model="gpt4-1.8t-moe", gpu="gb200", num_gpus=4096,
                                         global_batch_size=2048),
     SearchSpace(tp=[2, 4, 8], micro_batch_size=[1], zero_stage=[1, 3])),
]


def _plan(p: dict[str, Any]) -> str:
    return (f"tp{p['tp']} pp{p['pp']} dp{p['dp']} cp{p['cp']} ep{p['ep']} vpp{p['vpp']} "
            f"mbs{p['micro_batch_size']} rc={p['recompute']} zero{p['zero_stage']} "
            f"sp={'on' if p['sequence_parallel'] else 'off'} "
            f"tpo={'on' if p['tp_comm_overlap'] else 'off'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--confirm", type=int, default=3)
    args = ap.parse_args()
    print(f"jobs={args.jobs} confirm={args.confirm} (target >= {TARGET_PLANS_PER_S:.0f} "
          "plans/s end to end)")
    print(f"{'case':30s} {'plans':>7} {'fit':>6} {'wall s':>7} {'plans/s':>8} "
          f"{'est s':>6} {'conf s':>6}  winner (engine MFU, estimate)")
    rates = []
    for name, kw, space in CASES:
        run = build_run(**kw)
        t0 = time.perf_counter()
        res = search(run, space, top_n=10, confirm=args.confirm, jobs=args.jobs)
        wall = time.perf_counter() - t0
        rate = res.evaluated / wall
        rates.append(rate)
        best = res.best
        win = "none feasible"
        if best is not None:
            est = next(c for c in res.candidates if c.report is best)
            win = (f"{_plan(best.plan)}: MFU {best.mfu * 100:.1f} % "  # type: ignore[operator]
                   f"(estimate {est.estimate_mfu * 100:.1f} %), step "
                   f"{best.step_time_s:.3f} s")
        print(f"{name:30s} {res.evaluated:7d} {res.feasible:6d} {wall:7.2f} {rate:8.0f} "
              f"{res.timings_s['estimate']:6.2f} {res.timings_s['confirm']:6.2f}  {win}")
    verdict = "PASS" if min(rates) >= TARGET_PLANS_PER_S else "BELOW TARGET"
    print(f"slowest case {min(rates):.0f} plans/s: {verdict}")


if __name__ == "__main__":
    main()
