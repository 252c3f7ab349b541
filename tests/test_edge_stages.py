"""Virtual pipeline stages of their own for the embedding and the loss: Megatron-Core's
``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split`` let
pp×vpp reach num_layers + 2 (Megatron-Bridge's Llama 3.1 405B recipes run 126 layers on
PP 16 × VP 8 = 128 virtual stages)."""

from __future__ import annotations

import pytest
from conftest import tiny_run

from codesign.api import simulate_run
from codesign.workload.dims import plan_problems
from codesign.workload.training import build_training_graph, layer_assignment

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
