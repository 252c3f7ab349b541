"""DeepSpeed pipelines as rows describe them. bf16 pipelines accumulate each micro-batch's
gradients by a separate pass (``ParallelismSpec.grad_accum_pass``, DeepSpeed's
BF16_Optimizer): 20 B of HBM traffic per local parameter per micro-batch, the bf16 gradients
held beside the fp32 buffer; only with pipeline parallelism and bf16; the search estimate
prices it as the engine does; validation turns it on for a DeepSpeed bf16 row. DeepSpeed's
pipeline engine has no interleaved schedule: a row that does not state one runs one chunk per
rank."""

from __future__ import annotations

from pathlib import Path

import pytest
from estimate_checks import estimates_agree

from codesign.api import build_models, build_run, simulate_run
from codesign.search.space import SearchSpace
from codesign.validation.training_cases import (
    DEEPSPEED_BF16_NOTE,
    _interleaving_allowed,
    iter_cases,
)
from codesign.workload.memory import stage_memory
from codesign.workload.training import build_training_graph

_PLAN = dict(model="llama3-8b", gpu="a100", num_gpus=16, tp=2, pp=2, zero_stage=1,
             global_batch_size=32, micro_batch_size=1, seq_len=4096, recompute="none")


def _run(on: bool, **extra: object):  # type: ignore[no-untyped-def]
    return build_run(**{**_PLAN, "grad_accum_pass": on, **extra})  # type: ignore[arg-type]


def test_pass_moves_twenty_bytes_per_local_parameter() -> None:
    graph, comp, _ = build_models(_run(True))
    for chunk in graph.chunks:
        ops = [o for o in chunk.backward if o.name == "grad_accum_pass"]
        assert len(ops) == 1 and chunk.backward[-1] is ops[0]  # after the whole backward
        params = chunk.dense_params + chunk.expert_params
        # zero bf16 (2) + cast: read bf16, write fp32 (2 + 4) + add: read 4 + 4, write 4
        assert ops[0].bytes == pytest.approx(20.0 * params, rel=1e-12)
        hbm = comp.gpu.hbm_bandwidth_TBps * 1e12
        assert comp.time(ops[0]) >= ops[0].bytes / hbm  # never faster than HBM's peak
    off = build_training_graph(_run(False))
    assert not any(o.name == "grad_accum_pass" for c in off.chunks for o in c.backward)


@pytest.mark.parametrize("extra", [dict(pp=1, num_gpus=8), dict(dtype="fp16")])
def test_pass_needs_a_bf16_pipeline(extra: dict[str, object]) -> None:
    g = build_training_graph(_run(True, **extra))
    assert not any(o.name == "grad_accum_pass" for c in g.chunks for o in c.backward)
    assert g.run.parallel.lp_grad_bytes == 0.0


def test_pass_costs_its_bytes_per_micro_batch_and_holds_bf16_gradients() -> None:
    on, off = simulate_run(_run(True)), simulate_run(_run(False))
    assert on.feasible and off.feasible
    graph, comp, _ = build_models(_run(True))
    per_mb = max(sum(comp.time(o) for o in c.backward if o.name == "grad_accum_pass")
                 for c in graph.chunks)
    mbs = graph.num_microbatches  # 32 / dp 4 / micro-batch 1 = 8
    assert mbs == 8
    # the slower stage pays the pass on every micro-batch (1F1B steady state); the step grows
    # by at least that and at most the pass on both stages' micro-batches
    grown = on.step_time_s - off.step_time_s
    assert mbs * per_mb * 0.99 <= grown <= 2 * mbs * per_mb
    params = sum(c.dense_params + c.expert_params for c in graph.stage_chunks(0))
    mem_on = stage_memory(graph, 0, dense_n=4, expert_n=4)
    mem_off = stage_memory(build_training_graph(_run(False)), 0, dense_n=4, expert_n=4)
    assert mem_on.gradients - mem_off.gradients == pytest.approx(2.0 * params, rel=1e-12)


def test_search_estimate_prices_the_pass() -> None:
    space = SearchSpace(tp=[2], pp=[2, 4], micro_batch_size=[1], recompute=["none"],
                        zero_stage=[1])
    assert estimates_agree(_run(True), space, "backward", abs_s=1e-4) >= 2


_HEADER = ("case_id,source,source_location,model,precision,num_layers,hidden_size,num_heads,"
           "gpu_type,num_gpus,tp,pp,zero_fsdp,global_batch_size,micro_batch_size,"
           "tflops_per_gpu,notes\n")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_deepspeed_bf16_row_turns_the_pass_on(tmp_path: Path, precision: str) -> None:
    csv = tmp_path / "rows.csv"
    csv.write_text(_HEADER + f"D1,BigScience 2022 Megatron-DeepSpeed,x,BLOOM-176B,{precision},"
                   "70,14336,112,A100-SXM4-80GB,384,4,12,ZeRO-1,2048,2,150,run\n")
    (_, case), = iter_cases(csv)
    run = case.candidates[0][0]
    assert run.parallel.grad_accum_pass is (precision == "bf16")
    assert (run.parallel.grad_accum_pass_bytes == 20.0) is (precision == "bf16")
    assert (DEEPSPEED_BF16_NOTE in case.assumptions) is (precision == "bf16")


def _row(tmp_path: Path, year: int, tp: str, pp: str) -> Path:
    csv = tmp_path / "rows.csv"
    csv.write_text(_HEADER + f"D2,Example et al. {year} (Megatron-DeepSpeed),x,GPT-39B,fp16,"
                   f"48,8192,64,A100-SXM4-80GB,64,{tp},{pp},ZeRO-1,512,,150,run\n")
    return csv


def test_deepspeed_pipelines_are_not_interleaved() -> None:
    assert _interleaving_allowed("deepspeed", 48, 4, 1)
    assert not any(_interleaving_allowed("deepspeed", 48, 4, v) for v in range(2, 9))
    assert _interleaving_allowed("megatron-core", 48, 4, 2)  # Megatron's schedule has it


@pytest.mark.parametrize("tp,pp", [("4", "4"), ("", "")])  # stated plan, searched plan
def test_unstated_deepspeed_row_keeps_one_chunk_per_rank(tmp_path: Path, tp: str,
                                                        pp: str) -> None:
    (_, case), = iter_cases(_row(tmp_path, 2024, tp, pp))
    assert not isinstance(case, str), case
    assert all(run.parallel.vpp == 1 for group in case.candidates for run in group)
    if tp:  # the stated plan says why no depth was tried
        assert ("interleaving depth not given: none (deepspeed has no interleaved schedule)"
                in case.assumptions)
