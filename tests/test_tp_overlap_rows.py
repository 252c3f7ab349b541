"""Tensor-parallel communication overlap as a row states it (``read_tp_overlap``): Megatron's
``--tp-comm-overlap`` on or off is taken as written; torchtitan's Async TP is recorded as an
assumption and priced with blocking collectives (its published gains are forward-pass only)."""

from __future__ import annotations

from codesign.api import simulate_run
from codesign.validation.training_cases import MappedCase, map_row

_MEGATRON = {"case_id": "X1", "source": "NVIDIA/Megatron-LM README",
             "model": "Llama 3 70B", "precision": "BF16", "num_gpus": "64",
             "gpus_per_node": "8", "tp": "8", "pp": "2", "sp": "yes", "zero_fsdp": "",
             "activation_recompute": "selective", "global_batch_size": "128",
             "micro_batch_size": "1", "seq_len": "4096", "iteration_time_s": "10.0"}
_TITAN = {"case_id": "W1", "source": "pytorch/torchtitan benchmarks",
          "model": "Llama 3.1 70B", "precision": "BF16", "gpu_type": "H100 SXM5 80GB",
          "num_gpus": "256", "gpus_per_node": "8", "tp": "8", "pp": "1",
          "zero_fsdp": "FSDP2 (fully_shard)", "activation_recompute": "full",
          "global_batch_size": "512", "micro_batch_size": "16", "seq_len": "8192",
          "iteration_time_s": "25.0"}


def _overlap(case: MappedCase) -> set[bool]:
    return {run.parallel.tp_comm_overlap for grp in case.candidates for run in grp}


def test_megatron_rows_take_the_stated_switch() -> None:
    h100 = {**_MEGATRON, "gpu_type": "H100 SXM5 80GB"}
    assert _overlap(map_row(h100)) == {True}  # Megatron-Core's default on Hopper under SP
    off = map_row({**h100, "notes": "tp_comm_overlap: false"})
    assert _overlap(off) == {False}
    assert "TP communication not overlapped" in " ".join(off.assumptions)
    a100 = {**_MEGATRON, "gpu_type": "A100 SXM4 80GB"}
    assert _overlap(map_row(a100)) == {False}  # no userbuffers default before Hopper
    on = map_row({**a100, "notes": "overlap-grad-reduce, --tp-comm-overlap"})
    assert _overlap(on) == {True}


def test_a_stated_overlap_shortens_the_step() -> None:
    a100 = {**_MEGATRON, "gpu_type": "A100 SXM4 80GB"}
    blocking = simulate_run(map_row(a100).candidates[0][0])
    overlapped = simulate_run(map_row({**a100, "notes": "--tp-comm-overlap"}).candidates[0][0])
    assert overlapped.step_time_s < blocking.step_time_s


def test_torchtitan_async_tp_is_an_assumption_not_an_overlap() -> None:
    case = map_row({**_TITAN, "notes": "torch.compile; async tp"})
    assert _overlap(case) == {False}
    assert "priced blocking" in " ".join(case.assumptions)
    vanilla = map_row({**_TITAN, "notes": "torch.compile; vanilla tp",
                       "other_measured": "async TP speedup 1.09x"})
    assert "priced blocking" not in " ".join(vanilla.assumptions)


def test_nvfp4_megatron_rows_block_tp_communication() -> None:
    """Megatron-Bridge's NVFP4 recipes turn userbuffers off ("NVFP4's fp4_param_gather path is
    incompatible with TP comm overlap"): an NVFP4 row that does not state the switch blocks,
    the same row in FP8 overlaps, and a row that states the overlap keeps it."""
    b200 = {**_MEGATRON, "gpu_type": "B200", "tp": "4"}
    assert _overlap(map_row({**b200, "precision": "FP8"})) == {True}
    fp4 = map_row({**b200, "precision": "NVFP4"})
    assert _overlap(fp4) == {False}
    assert "incompatible with NVFP4" in " ".join(fp4.assumptions)
    stated = map_row({**b200, "precision": "NVFP4", "notes": "--tp-comm-overlap"})
    assert _overlap(stated) == {True}
    searched = map_row({**b200, "precision": "NVFP4", "tp": "", "pp": ""})
    assert _overlap(searched) == {False}  # the search keeps the framework's switch


def test_nvfp4_row_on_a_part_without_fp4_overlaps_as_fp8() -> None:
    """On a part without an FP4 peak the row trains in FP8 (``_fp4_plan``), so the FP8
    default applies to the stated plan as it does to a searched one."""
    h100 = map_row({**_MEGATRON, "gpu_type": "H100 SXM5 80GB", "precision": "NVFP4"})
    assert {run.parallel.dtype for grp in h100.candidates for run in grp} == {"fp8"}
    assert _overlap(h100) == {True}
