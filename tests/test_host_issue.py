"""Host issue: a pass runs no faster than its host launches its kernels, and a host
synchronization drains the work issued ahead (codesign.engine.chunk.op_tasks)."""

from __future__ import annotations

import numpy as np
import pytest

from codesign.api import build_run, simulate_run
from codesign.engine.chunk import time_chunk
from codesign.engine.executor import execute, execute_in_order
from codesign.engine.expanded.batch import batch_pass
from codesign.hardware.compute import HOST_ISSUE_US, ComputeModel, kernels
from codesign.ir import Op
from codesign.specs.base import evolve
from codesign.specs.catalog import load_gpu


def _op(name: str, sync: bool = False) -> Op:
    return Op(name=name, kind="memory", category="forward", layer=0, bytes=1.0,
              host_sync=sync)


def _timed(ops: list[Op], gpu_s: float, host_s: float | None, executor=execute_in_order):
    host = None if host_s is None else (lambda op: host_s)
    return time_chunk(ops, lambda op: gpu_s, lambda op: 0.0, executor, host)


def test_host_bound_pass_by_hand() -> None:
    # kernels of 1 s issued every 3 s: op0 was issued during the previous pass (0-1),
    # op1 issued at 3 (3-4), op2 at 6 (6-7); the stream waits 2 s twice for the host
    ops = [_op("a"), _op("b"), _op("c")]
    t = _timed(ops, 1.0, 3.0)
    assert t.compute_time == pytest.approx(7.0)
    parts = dict(t.breakdown)
    assert parts["host"] == pytest.approx(4.0)
    assert parts["forward"] == pytest.approx(3.0)
    # the event-driven executor gives the same timeline
    assert _timed(ops, 1.0, 3.0, execute).compute_time == pytest.approx(7.0)


def test_gpu_bound_pass_is_unchanged() -> None:
    ops = [_op("a"), _op("b"), _op("c")]
    t = _timed(ops, 1.0, 0.4)
    assert t.compute_time == _timed(ops, 1.0, None).compute_time == 3.0
    assert "host" not in dict(t.breakdown)


def test_host_sync_drains_the_queue() -> None:
    # a (0-1); sync issued at 0.5, runs 1-2; the host waits for it, issues b at 2.5
    # (2.5-3.5), c at 3.0, which runs after b (3.5-4.5). Without the sync: 4.0.
    ops = [_op("a"), _op("sync", sync=True), _op("b"), _op("c")]
    assert _timed(ops, 1.0, 0.5).compute_time == pytest.approx(4.5)
    plain = [_op("a"), _op("s"), _op("b"), _op("c")]
    assert _timed(plain, 1.0, 0.5).compute_time == pytest.approx(4.0)


@pytest.mark.parametrize("host_s", [0.3, 1.7])
def test_expanded_batch_pass_matches(host_s: float) -> None:
    ops = [_op("a"), _op("sync", sync=True), _op("b"), _op("c"), _op("d")]
    ref = _timed(ops, 1.0, host_s)
    res = batch_pass(ops, np.ones((1, 2)), np.zeros((1, 2), dtype=np.int64),
                     lambda op: np.array([1.0]), lambda i, op: np.zeros((1, 2)),
                     lambda g: (), lambda op: host_s)
    assert res[0].compute_time == pytest.approx(ref.compute_time)
    assert dict(res[0].breakdown).get("host", 0.0) == pytest.approx(
        dict(ref.breakdown).get("host", 0.0))


def test_kernel_count_and_host_time() -> None:
    # 16 experts' FP8 GEMMs under current scaling: 16 GEMMs + 3 quantization kernels each
    gemm = Op(name="expert_up", kind="gemm", category="forward", layer=0, flops=1.0,
              mnk=(256.0, 1536.0, 2048.0), precision="fp8", count=16.0, role="fwd",
              fp8_scaling="current")
    assert kernels(gemm) == 16 + 48
    delayed = Op(name="expert_up", kind="gemm", category="forward", layer=0, flops=1.0,
                 mnk=(256.0, 1536.0, 2048.0), precision="fp8", count=16.0, role="fwd")
    assert kernels(delayed) == 17  # one fused cast for the grouped GEMM
    h100 = ComputeModel(load_gpu("h100"))
    assert h100.host_time(gemm) == pytest.approx(64 * HOST_ISSUE_US * 1e-6)
    tpu = ComputeModel(load_gpu("tpu-v5p"))  # XLA: the chip sequences its program
    assert tpu.host_time(gemm) == 0.0


def _moe_run(host_us: float | None):
    run = build_run("qwen3-30b-a3b", "h100", num_gpus=16, tp=1, pp=2, ep=8, vpp=24,
                    micro_batch_size=2, global_batch_size=512, seq_len=4096, dtype="fp8",
                    fp8_recipe="current")
    return run if host_us is None else evolve(run, {"gpu.efficiency.host_issue_us": host_us})


def test_fine_grained_moe_is_host_bound() -> None:
    """16 local experts under FP8 current scaling launch hundreds of small kernels per layer:
    the step grows with the host's issue cost and reports the wait as host_issue."""
    free = simulate_run(_moe_run(0.0))
    slow = simulate_run(_moe_run(None))
    assert free.feasible and slow.feasible
    assert free.breakdown_s["host_issue"] == 0.0
    assert slow.breakdown_s["host_issue"] > 0.2 * slow.step_time_s
    assert slow.step_time_s > 1.5 * free.step_time_s


def test_dense_step_is_gpu_bound() -> None:
    """Large dense GEMMs: the host keeps ahead, the step is exactly the host-free one."""
    run = build_run("llama3-8b", "h100", num_gpus=8, tp=1, pp=1, micro_batch_size=1,
                    global_batch_size=128, seq_len=4096, dtype="fp8", recompute="selective")
    free = simulate_run(evolve(run, {"gpu.efficiency.host_issue_us": 0.0}))
    with_host = simulate_run(run)
    assert free.feasible and with_host.feasible and free.step_time_s is not None
    assert with_host.step_time_s == pytest.approx(free.step_time_s, rel=1e-12)
    assert with_host.breakdown_s["host_issue"] == 0.0
