"""Gradients accumulated and reduced in bf16 (``grad_reduce_in_fp32`` False, the Megatron-Bridge
performance recipes) against fp32 (Megatron-LM's bf16 default): half the gradient buffer, half
the data-parallel reduction bytes, 2 B less Adam traffic per parameter; the search estimate
prices them as the engine does; validation reads the switch from a row's prose and from a
Megatron-Bridge performance table."""

from __future__ import annotations

from pathlib import Path

import pytest
from estimate_checks import estimates_agree

from codesign.api import build_models, build_run, simulate_run
from codesign.engine.training import step_shape
from codesign.search.space import SearchSpace
from codesign.workload.memory import stage_memory
from codesign.workload.step_program import build_step_program
from codesign.workload.training import adam_bytes_per_param, build_training_graph

_PLAN = dict(model="llama3-8b", gpu="h100", num_gpus=16, tp=2, pp=2, zero_stage=1,
             global_batch_size=32, micro_batch_size=1, seq_len=4096)


def _run(fp32: bool, **extra: object):  # type: ignore[no-untyped-def]
    return build_run(**{**_PLAN, "grad_reduce_in_fp32": fp32, **extra})  # type: ignore[arg-type]


def test_gradient_buffer_is_two_bytes_per_parameter() -> None:
    for fp32, per_param in ((True, 4.0), (False, 2.0)):
        g = build_training_graph(_run(fp32))
        params = sum(c.dense_params + c.expert_params for c in g.stage_chunks(0))
        mem = stage_memory(g, 0, dense_n=4, expert_n=4)
        assert mem.gradients == pytest.approx(params * per_param, rel=1e-12)
        # the optimizer states stay fp32 master weights + Adam m, v, sharded over dp = 4
        assert mem.optimizer == pytest.approx(params * 12 / 4, rel=1e-12)


def _reduce_bytes(fp32: bool) -> tuple[float, float]:
    """(bytes of every gradient-bucket collective of stage 0, its local parameters)."""
    run = _run(fp32)
    graph, _, net = build_models(run)
    program = build_step_program(step_shape(graph, net))
    reduced = sum(c.bytes for n in program.nodes if n.kind == "grad_reduce" and n.stage == 0
                  for c in n.comms)
    params = sum(c.dense_params + c.expert_params for c in graph.stage_chunks(0))
    return reduced, params


def test_data_parallel_reduction_carries_two_bytes_per_parameter() -> None:
    for fp32, per_param in ((True, 4.0), (False, 2.0)):
        reduced, params = _reduce_bytes(fp32)
        assert reduced == pytest.approx(params * per_param, rel=1e-12)


def test_adam_reads_the_gradient_in_its_dtype() -> None:
    # read+write fp32 master, m and v (24 B), read the gradient, write the bf16 weight (2 B)
    assert adam_bytes_per_param(4.0) == 30.0
    assert adam_bytes_per_param(2.0) == 28.0


def test_bf16_gradients_shorten_an_exposed_reduction_and_the_estimate_agrees() -> None:
    # blocking reduction (no overlap): the dp_comm share is the whole reduction, and
    # halving its bytes shortens it (ring reduce-scatter time is bandwidth-bound here)
    fp32 = simulate_run(_run(True, overlap_grad_reduce=False))
    bf16 = simulate_run(_run(False, overlap_grad_reduce=False))
    assert fp32.feasible and bf16.feasible
    assert bf16.breakdown_s["dp_comm"] < 0.6 * fp32.breakdown_s["dp_comm"]
    assert bf16.memory_gib["gradients"] == pytest.approx(fp32.memory_gib["gradients"] / 2)
    run = _run(False, overlap_grad_reduce=False)
    assert run.parallel.grad_reduce_in_fp32 is False
    space = SearchSpace(tp=[2], pp=[2], micro_batch_size=[1], recompute=["none"],
                        zero_stage=[1], overlap_grad_reduce=[False])
    assert estimates_agree(run, space, "dp_comm", abs_s=1e-4) >= 1


_HEADER = ("case_id,source,source_location,model,precision,num_layers,hidden_size,num_heads,"
           "gpu_type,num_gpus,tp,pp,cp,ep,global_batch_size,micro_batch_size,"
           "tokens_per_s_per_gpu,notes\n")


def _case(tmp_path: Path, source: str, location: str, notes: str = ""):  # type: ignore[no-untyped-def]
    from codesign.validation.training_cases import iter_cases
    path = tmp_path / "rows.csv"
    path.write_text(_HEADER + f'R1,"{source}","{location}",Llama-3-8B,FP8-CS,,,,'
                    f'H100-SXM5-80GB (DGX-H100),8,1,1,1,1,128,2,14000,"{notes}"\n')
    ((_, case),) = list(iter_cases(path))
    return case


def test_validation_reads_megatron_bridge_performance_tables_as_bf16(tmp_path: Path) -> None:
    mb = _case(tmp_path, "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md",
               "'25.11 NeMo Container' pre-training table")
    assert all(r.parallel.grad_reduce_in_fp32 is False for g in mb.candidates for r in g)
    assert any("grad_reduce_in_fp32 False" in a for a in mb.assumptions)
    nemo = _case(tmp_path, "NVIDIA NeMo performance summary, NeMo 25.09 container", "")
    assert all(r.parallel.grad_reduce_in_fp32 is False for g in nemo.candidates for r in g)
    old = _case(tmp_path, "NVIDIA NeMo performance summary, NeMo 24.07 container", "")
    assert all(r.parallel.grad_reduce_in_fp32 for g in old.candidates for r in g)
    stated = _case(tmp_path, "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "",
                   "grad_reduce_in_fp32: true")
    assert all(r.parallel.grad_reduce_in_fp32 for g in stated.candidates for r in g)
    assert any("fp32 (as the row states)" in a for a in stated.assumptions)
