"""Virtual pipeline stages of their own for the embedding and the loss: Megatron-Core's
``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split`` let
pp×vpp reach num_layers + 2 (Megatron-Bridge's Llama 3.1 405B recipes run 126 layers on
PP 16 × VP 8 = 128 virtual stages)."""

from __future__ import annotations

import re

import pytest
from conftest import tiny_run

from codesign.api import build_run, simulate_run
from codesign.workload.dims import plan_problems
from codesign.workload.training import build_training_graph, layer_assignment, loss_layer_slots

PLAN = dict(pp=2, global_batch_size=4)


def test_two_more_virtual_stages_than_layers_leave_the_edges_to_embedding_and_head() -> None:
    assert layer_assignment(4, 6) == [(), (0,), (1,), (2,), (3,), ()]
    # one more: the last virtual stage carries the LM head and loss alone
    assert layer_assignment(4, 5) == [(0,), (1,), (2,), (3,), ()]
    run = tiny_run(2, vpp=3, **PLAN)  # 4 layers on 2 × 3 = 6 virtual stages
    assert plan_problems(run) == []
    g = build_training_graph(run)
    first = next(c for c in g.chunks if c.first)
    last = next(c for c in g.chunks if c.last)
    assert first.layers == () and last.layers == ()
    # the edge chunks still run their operators: the embedding lookup, the LM head and loss
    assert first.forward and last.forward and last.backward
    assert sorted(lay for c in g.chunks for lay in c.layers) == [0, 1, 2, 3]
    assert simulate_run(run).step_time_s > 0


def test_more_than_two_extra_virtual_stages_is_infeasible_and_says_why() -> None:
    (problem,) = plan_problems(tiny_run(2, vpp=4, **PLAN))  # 8 > 4 + 2
    assert "pp×vpp = 8 exceeds num_layers + 2 = 6" in problem


@pytest.mark.parametrize("vpp", [1, 2])
def test_fewer_virtual_stages_than_layers_keep_every_edge_stage_busy(vpp: int) -> None:
    g = build_training_graph(tiny_run(2, vpp=vpp, **PLAN))
    assert all(c.layers for c in g.chunks)


def _layout_counts(layout: str) -> list[int]:
    """Transformer layers per virtual stage of a Megatron-Core ``pipeline_model_parallel_layout``
    string ('|' between stages, ``(x|)*n`` repeats, ``t*n`` n layers; E/L embedding/loss)."""
    while "(" in layout:
        layout = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    layout = re.sub(r"t\*(\d+)", lambda m: "t" * int(m.group(1)), layout).replace(",", "")
    return [s.count("t") for s in layout.split("|")]


def test_a_balanced_loss_stage_reproduces_megatron_bridges_llama3_70b_layout() -> None:
    # Megatron-Bridge perf_recipes/llama/h100/llama3.py, Llama 3 70B on 64 H100 (PP 8, VP 5)
    published = _layout_counts("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL")
    assert len(published) == 40 and sum(published) == 80
    llama = build_run(model="llama3-70b", gpu="h100", num_gpus=64, tp=4, pp=8, vpp=5,
                      seq_len=8192, global_batch_size=128, balance_loss_stage=True)
    # LM head 2·8192·128256 = 2.10 GFLOP per token against a layer's ~1.98: one slot
    assert loss_layer_slots(llama) == 1
    assert loss_layer_slots(llama.model_copy(update={"parallel": llama.parallel.model_copy(
        update={"balance_loss_stage": False})})) == 0
    ours = [len(x) for x in layer_assignment(80, 40, loss_slots=1)]
    # the same stage sizes: one 3-layer middle stage, the last stage 1 layer beside the head,
    # and the 3-layer stage on the same physical stage as the recipe's (virtual stage % pp)
    assert sorted(ours) == sorted(published) and ours[-1] == published[-1] == 1
    assert ours.index(3) % 8 == published.index(3) % 8


def test_loss_slots_never_empty_a_lone_stage_or_exceed_the_even_share() -> None:
    assert layer_assignment(8, 1, loss_slots=3) == [tuple(range(8))]
    counts = [len(x) for x in layer_assignment(8, 4, loss_slots=5)]  # capped at 8 // 4 = 2
    assert sum(counts) == 8 and counts[-1] == 0
    g = build_training_graph(tiny_run(2, vpp=1, balance_loss_stage=True, **PLAN))
    assert sorted(lay for c in g.chunks for lay in c.layers) == list(range(4))
