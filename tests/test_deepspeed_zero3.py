"""DeepSpeed's ZeRO-3 as a row describes it: flat rings over the whole data-parallel group, a
second parameter gather for a recomputed layer, and gathers queued in issue order behind the
group's reduce-scatters (``param_gather_queue`` "group": a module's gather comes from its own
hook, and ProcessGroupNCCL runs one group's collectives on one stream). The reading is
checked on rows in the schema of ``shared/validation``, the timing by hand: a blocking gather
lies on the critical path, so the re-gather adds exactly one layer gather per layer to the
step; a queued gather starts after the reduce-scatter issued before it."""

from __future__ import annotations

import pytest
from conftest import fast_network, tiny_run

from codesign.api import build_models, simulate_run
from codesign.engine.chunk import time_chunk
from codesign.ir import Op
from codesign.validation.training_cases import deepspeed_zero3, framework_of, map_row

# Narayanan et al. 2021 Table 2 style: a DeepSpeed ZeRO-3 baseline in a Megatron-LM paper
_ROW = {"case_id": "Z1", "source": "Narayanan et al. 2021 (arXiv 2104.04473, SC21)",
        "model": "GPT-3 175B", "num_layers": "96", "hidden_size": "12288", "num_heads": "96",
        "seq_len": "2048", "vocab_size": "51200", "gpu_type": "A100-SXM4-80GB",
        "num_gpus": "384", "gpus_per_node": "8", "tp": "1", "pp": "1", "dp": "384",
        "zero_fsdp": "ZeRO-3 (DeepSpeed), no model parallelism",
        "activation_recompute": "full", "global_batch_size": "1536", "micro_batch_size": "4",
        "tflops_per_gpu": "144", "precision": "fp16"}


@pytest.mark.parametrize(("zero", "source", "notes", "expected"), [
    ("ZeRO-3 (DeepSpeed), no model parallelism", _ROW["source"], "", True),
    ("ZeRO stage 3", _ROW["source"], "", True),  # DeepSpeed's word for the stage
    ("3", "a 2023 blog post", "DeepSpeed ZeRO-3 with activation checkpointing", True),
    ("FSDP (ZeRO-3 equivalent)", "a 2023 blog post", "", False),  # PyTorch's sharding
    ("ZeRO-3", "torchtitan 2024, Llama 3 8B", "", False),  # FSDP2 in torchtitan
    ("ZeRO-1", _ROW["source"], "DeepSpeed", False),  # not stage 3
])
def test_which_zero3_is_deepspeeds(zero: str, source: str, notes: str,
                                   expected: bool) -> None:
    row = {**_ROW, "zero_fsdp": zero, "source": source, "notes": notes}
    stage = 1 if zero == "ZeRO-1" else 3
    assert deepspeed_zero3(row, framework_of(row), stage) is expected


@pytest.mark.parametrize("source", [_ROW["source"], "a 2023 DeepSpeed blog post"])
def test_a_deepspeed_zero3_row_queues_its_gathers_on_the_group_over_flat_rings(
        source: str) -> None:
    case = map_row({**_ROW, "source": source})
    par = case.candidates[0][0].parallel
    assert (par.zero_stage, par.collective_algorithm) == (3, "ring")
    assert par.regather_for_recompute and par.overlap_grad_reduce
    assert par.overlap_param_gather and par.param_gather_queue == "group"
    assert any("ZeRO-3 is DeepSpeed's" in a for a in case.assumptions)


@pytest.mark.parametrize(("zero", "notes"), [
    ("ZeRO stage 3 (SageMaker model parallel, sharded over 128 GPUs)", "ALiBi"),  # BloombergGPT
    ("ZeRO-3", "DeepSpeed MiCS, mics_hierarchical_params_gather true"),
    ("ZeRO-3", "ZeRO++ with hpZ"),
])
def test_a_zero3_that_names_mics_gathers_in_two_levels(zero: str, notes: str) -> None:
    """MiCS (Zhang et al. 2022, arXiv 2205.00119) and ZeRO++'s hpZ gather inside the node,
    then across nodes per rail: the two-level collectives, the rest of ZeRO-3 as DeepSpeed
    runs it; the same row without those words keeps the flat rings."""
    case = map_row({**_ROW, "zero_fsdp": zero, "notes": notes})
    par = case.candidates[0][0].parallel
    assert (par.zero_stage, par.collective_algorithm) == (3, "auto")
    assert par.regather_for_recompute and par.param_gather_queue == "group"
    assert any("two-level" in a for a in case.assumptions)
    plain = map_row({**_ROW, "zero_fsdp": "ZeRO-3", "notes": "ALiBi"})
    assert plain.candidates[0][0].parallel.collective_algorithm == "ring"


@pytest.mark.parametrize(("notes", "overlap"), [
    ("", True),  # overlap_comm defaults to true at stage 3
    ("DeepSpeed ZeRO-3, overlap_comm: false", False),
])
def test_a_deepspeed_zero3_row_reduces_during_the_backward_unless_it_says_not(
        notes: str, overlap: bool) -> None:
    par = map_row({**_ROW, "notes": notes}).candidates[0][0].parallel
    assert par.overlap_grad_reduce is overlap and par.param_gather_queue == "group"


def _backward_of_two_layers(own_stream: bool) -> list[Op]:
    """Two layers' backward as ZeRO-3 runs it: each layer's prefetched gather, its backward,
    then its gradient reduce-scatter."""
    ops: list[Op] = []
    for layer in (1, 0):
        ops += [Op(name="param_gather", kind="comm", category="backward", layer=layer,
                   comm="all_gather", group="dp", size=1.0, overlap="prefetch",
                   backward=True, own_stream=own_stream),
                Op(name=f"b{layer}", kind="memory", category="backward", layer=layer),
                Op(name="param_grad_reduce", kind="comm", category="backward", layer=layer,
                   comm="reduce_scatter", group="dp", size=1.0, overlap="async",
                   backward=True)]
    return ops


@pytest.mark.parametrize(("own_stream", "expected"), [
    # gather 1, backward 2 and backward 2 again (the second gather ran during the first)
    (True, 1.0 + 2 * 2.0),
    # gather 1, backward 2, reduce-scatter 1, the second gather 1, backward 2
    (False, 1.0 + 2.0 + 1.0 + 1.0 + 2.0),
])
def test_a_queued_gather_waits_for_the_reduce_scatter_issued_before_it(
        own_stream: bool, expected: float) -> None:
    """Hand timeline, every collective 1 s and every backward 2 s: on its own stream the
    second layer's gather runs at once after the first; queued on the group's stream it
    follows the first layer's reduce-scatter, which follows that layer's backward."""
    timing = time_chunk(_backward_of_two_layers(own_stream), lambda op: 2.0, lambda op: 1.0)
    assert timing.compute_time == pytest.approx(expected)


def test_an_fsdp_row_keeps_the_two_level_collectives() -> None:
    row = {**_ROW, "zero_fsdp": "FSDP", "source": "a 2024 blog post", "notes": ""}
    par = map_row(row).candidates[0][0].parallel
    assert par.collective_algorithm == "auto" and not par.regather_for_recompute


def _zero3(regather: bool):  # type: ignore[no-untyped-def]
    # 2 ranks on a network slow enough that the gathers matter; one micro-batch per rank
    return tiny_run(2, global_batch_size=2, zero_stage=3, recompute="full",
                    overlap_param_gather=False, regather_for_recompute=regather)


def test_the_recompute_regather_adds_one_blocking_layer_gather_per_layer() -> None:
    """Blocking gathers: each one lies on the critical path, so gathering every layer's
    parameters a second time (after its recompute, before its backward) lengthens the step
    by num_layers x the time of one layer's all-gather."""
    slow = fast_network(bandwidth_GBps=1.0, latency_us=5.0)
    once = _zero3(False).model_copy(update={"topology": slow})
    twice = _zero3(True).model_copy(update={"topology": slow})
    graph, _, network = build_models(twice)
    gathers = [o for o in graph.chunks[0].backward if o.name == "param_gather"]
    layers = twice.model.num_layers
    assert len(gathers) == 2 * layers  # one before the recompute, one before the backward
    assert len([o for o in build_models(once)[0].chunks[0].backward
                if o.name == "param_gather"]) == layers
    layer_gather = network.collective("all_gather", "dp", gathers[0].size).time_s
    assert layer_gather > 0
    t_once, t_twice = simulate_run(once).step_time_s, simulate_run(twice).step_time_s
    assert t_once is not None and t_twice is not None
    assert t_twice - t_once == pytest.approx(layers * layer_gather, rel=1e-9)


@pytest.mark.parametrize(("notes", "overlap"), [
    ("Megatron-DeepSpeed, ZeRO-1", False),  # overlap_comm defaults to false below stage 3
    ("Megatron-DeepSpeed, ZeRO-1, overlap_comm: true", True),
])
def test_deepspeed_below_stage_3_reduces_after_the_backward(notes: str, overlap: bool) -> None:
    row = {**_ROW, "source": "BigScience 2022, BLOOM-176B (Megatron-DeepSpeed)",
           "zero_fsdp": "ZeRO-1", "tp": "4", "pp": "12", "dp": "8", "notes": notes}
    case = map_row(row)
    assert case.framework == "deepspeed"
    par = case.candidates[0][0].parallel
    assert (par.overlap_grad_reduce, par.overlap_param_gather) == (overlap, overlap)
    assert par.collective_algorithm == "auto" and not par.regather_for_recompute
