"""Micro-batch benchmark (issue 11, item 7): the engine's cost must not grow with the number
of micro-batches. For catalog models and plans, print the in-process time of one
``simulate_run`` (best of 3 after a warm-up call, each with cold step-program and order-array
caches) at a small and at a huge global batch, with the samples of deep pipelines on the vector path
(the default, :mod:`codesign.engine.vector_run`) and on the fused runner (``py ms``), the
step time of the extended (periodic) simulation against the exact micro-batch-by-micro-batch
one where that is affordable, and the whole-process time of ``codesign simulate`` at a
billion-sequence global batch (the default plan, and Megatron-1T's 64-stage pipeline).

Run: ``python benchmarks/bench_microbatches.py``. Timings on a shared machine are noisy:
compare the columns of one run (small vs huge batch, extended vs exact), not against
remembered numbers.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import codesign.engine.vector_run as vector_run
from codesign.api import build_models, build_run, simulate_run
from codesign.engine.training import simulate_step
from codesign.workload.schedules import order_arrays
from codesign.workload.step_program import build_step_program

CASES: list[tuple[str, str, int, dict[str, Any]]] = [
    ("megatron-22b", "a100", 64, dict(tp=8, pp=1, recompute="full")),
    ("gpt3-175b", "h100", 1024, dict(tp=8, pp=8, vpp=3, sequence_parallel=True)),
    ("gpt3-175b", "h100", 1024, dict(tp=8, pp=8, schedule="zb-h1", sequence_parallel=True)),
    ("llama3-70b", "h100", 1024, dict(tp=8, pp=4, vpp=5, sequence_parallel=True)),
    ("mixtral-8x7b", "h100", 256, dict(tp=2, pp=4, ep=8, sequence_parallel=True)),
    ("megatron-530b", "a100", 2240, dict(tp=8, pp=35, sequence_parallel=True,
                                         recompute="selective")),
    ("megatron-1t", "a100", 3072, dict(tp=8, pp=64, recompute="full")),
    # unequal stages (3 dense first layers, MTP on the last): a steady state that drifts by
    # microseconds per period, extended as bounded
    ("deepseek-v3", "b200", 1952, dict(tp=8, pp=61, ep=4, recompute="full")),
]


def _best(fn: Any, repeat: int = 3) -> tuple[float, Any]:
    """Best of ``repeat`` calls after a warm-up, each with cold step-program and order-array
    caches (as the first call for a plan in a sweep)."""
    out = fn()
    best = float("inf")
    for _ in range(repeat):
        build_step_program.cache_clear()
        order_arrays.cache_clear()
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _fused(fn: Any) -> tuple[float, Any]:
    """:func:`_best` with every sample on the fused runner (the vector path off)."""
    saved = vector_run.VECTOR_MIN_STAGES
    vector_run.VECTOR_MIN_STAGES = 1 << 30
    try:
        return _best(fn)
    finally:
        vector_run.VECTOR_MIN_STAGES = saved


def _whole_process(args: list[str]) -> str:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "codesign.cli", "simulate", *args],
                         capture_output=True, text=True, check=False)
    return f"exit {out.returncode}, whole process {time.perf_counter() - t0:.2f} s"


def main() -> None:
    print(f"{'model':<14} {'plan':<34} {'mb':>9} {'call ms':>8} {'py ms':>8} {'step s':>12} "
          f"{'exact ms':>9} {'rel. diff':>9}")
    for model, gpu, gpus, plan in CASES:
        for per_pipe in (8, 1 << 16):
            dp = gpus // (plan["tp"] * plan["pp"] * plan.get("cp", 1))
            run = build_run(model=model, gpu=gpu, num_gpus=gpus, micro_batch_size=1,
                            global_batch_size=dp * per_pipe * plan["pp"], **plan)
            call, rep = _best(lambda run=run: simulate_run(run))
            fused, rep_py = _fused(lambda run=run: simulate_run(run))
            assert rep_py.step_time_s == rep.step_time_s, "vector and fused paths disagree"
            label = " ".join(f"{k}={v}" for k, v in plan.items())
            if not rep.feasible:
                print(f"{model:<14} {label:<34} infeasible: {rep.reason}")
                continue
            exact_ms, diff = "-", "-"
            if rep.num_microbatches <= 4096:
                graph, compute, network = build_models(run)
                t_exact, res = _best(lambda g=graph, c=compute, n=network: simulate_step(
                    g, c, n, exact=True), repeat=1)
                exact_ms = f"{t_exact * 1e3:.0f}"
                diff = f"{abs(res.step_time_s - rep.step_time_s) / res.step_time_s:.1e}"
            print(f"{model:<14} {label:<34} {rep.num_microbatches:>9} {call * 1e3:>8.1f} "
                  f"{fused * 1e3:>8.1f} {rep.step_time_s:>12.4f} {exact_ms:>9} {diff:>9}")
    print("codesign simulate --global-batch 1048576000 (1,024,000 micro-batches per pipeline): "
          + _whole_process(["--tp", "8", "--pp", "8", "--vpp", "3", "--sp", "--global-batch",
                            "1048576000"]))
    print("codesign simulate megatron-1t PP64 --global-batch 100663296 (16,777,216 "
          "micro-batches per pipeline): "
          + _whole_process(["--model", "megatron-1t", "--gpu", "a100", "--gpus", "3072", "--tp",
                            "8", "--pp", "64", "--recompute", "full", "--global-batch",
                            "100663296"]))


if __name__ == "__main__":
    main()
