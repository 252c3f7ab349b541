"""Partial full recompute (``recompute_num_layers``, Megatron ``--recompute-method block``):
the first N layers of each pipeline chunk recompute, the others keep their activations.
Saved bytes are checked against Korthikanti et al. 2022's closed form on a toy model."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny_model, tiny_run

from codesign.api import simulate_run
from codesign.cli import main
from codesign.errors import SpecError
from codesign.search.search import search
from codesign.specs.parallel import ParallelismSpec
from codesign.validation.recompute import least_recompute_layers, recompute_choices, with_layers
from codesign.validation.training_cases import map_row, read_rows
from codesign.workload.dims import plan_problems
from codesign.workload.memory import memory_per_gpu
from codesign.workload.training import build_training_graph

SHARED = Path(__file__).resolve().parents[1] / "experiments" / "validation" / "training_cases.csv"

# tiny model: s 128, h 256, 4 heads, FFN 4h, TP 1, micro-batch 1, flash attention
S, H, A = 128, 256, 4
FULL_LAYER = S * H * 34 + A * S * 4  # Korthikanti 34·sbh (t = 1) + fp32 log-sum-exp per head
INPUT_ONLY = 2 * S * H  # a recomputed layer keeps its bf16 input


def _recomputed_layers(graph) -> list[list[int]]:  # type: ignore[no-untyped-def]
    return [sorted({o.layer for o in c.backward if o.category == "recompute"})
            for c in graph.chunks]


def test_first_n_layers_of_the_chunk_recompute_and_keep_only_their_input() -> None:
    none, part, full = (build_training_graph(tiny_run(1, global_batch_size=4, **plan))
                        for plan in ({}, {"recompute": "full", "recompute_num_layers": 2},
                                     {"recompute": "full"}))
    assert _recomputed_layers(part) == [[0, 1]]
    # None: every layer (plain full), and nothing without recompute
    assert _recomputed_layers(full) == [[0, 1, 2, 3]] and _recomputed_layers(none) == [[]]
    assert [b for _, b in full.chunks[0].layer_saved] == [INPUT_ONLY] * 4
    assert [b for _, b in none.chunks[0].layer_saved] == [FULL_LAYER] * 4
    (c,) = part.chunks
    assert c.layer_saved == ((0, INPUT_ONLY), (1, INPUT_ONLY), (2, FULL_LAYER), (3, FULL_LAYER))
    # embedding and LM head save the same with or without recompute
    assert c.saved_bytes == pytest.approx(none.chunks[0].saved_bytes
                                          - 2 * (FULL_LAYER - INPUT_ONLY), rel=1e-12)
    # one stage, one micro-batch in flight: the activations are the chunk's saved bytes
    acts = [memory_per_gpu(g, 1, 1).activations for g in (none, part, full)]
    assert acts[1] == c.saved_bytes
    assert acts[0] - acts[1] == acts[1] - acts[2] == 2 * (FULL_LAYER - INPUT_ONLY)
    # two of four equal layers recompute: half the extra FLOPs of full recompute
    extra = full.hardware_flops_per_step - none.hardware_flops_per_step
    assert part.hardware_flops_per_step - none.hardware_flops_per_step == \
        pytest.approx(extra / 2, rel=1e-12)
    times = [simulate_run(tiny_run(1, global_batch_size=4, **plan)).step_time_s
             for plan in ({}, {"recompute": "full", "recompute_num_layers": 2},
                          {"recompute": "full"})]
    assert times[0] < times[1] < times[2]  # type: ignore[operator]


@pytest.mark.parametrize(("pp", "vpp", "n", "expected"), [
    (2, 1, 2, [[0, 1], [4, 5]]),  # chunks 0-3 and 4-7
    (2, 2, 1, [[0], [2], [4], [6]]),  # interleaved: chunks of two layers, index within chunk
])
def test_the_layer_index_within_its_chunk_decides(pp: int, vpp: int, n: int,
                                                  expected: list[list[int]]) -> None:
    run = tiny_run(2, model=tiny_model(num_layers=8), pp=pp, vpp=vpp, global_batch_size=4,
                   recompute="full", recompute_num_layers=n)
    g = build_training_graph(run)
    assert _recomputed_layers(g) == expected
    per_chunk = 8 // (pp * vpp)
    for c in g.chunks:
        assert [b for _, b in c.layer_saved] == \
            [INPUT_ONLY] * n + [FULL_LAYER] * (per_chunk - n)


def test_every_layer_of_the_chunk_is_plain_full_recompute() -> None:
    full = tiny_run(2, model=tiny_model(num_layers=8), pp=2, global_batch_size=4,
                    recompute="full")
    all4 = with_layers(full, 4)
    assert build_training_graph(all4).chunks == build_training_graph(full).chunks
    a, b = simulate_run(all4), simulate_run(full)
    assert a.step_time_s == b.step_time_s and a.memory_gib == b.memory_gib
    assert a.breakdown_s == b.breakdown_s


@pytest.mark.parametrize(("plan", "says"), [
    ({"recompute_num_layers": 2}, r"recompute_num_layers \(2\) needs recompute full"),
    ({"recompute": "selective", "recompute_num_layers": 2},
     "recompute_num_layers.*needs recompute full, got recompute selective"),
    ({"recompute": "full", "recompute_num_layers": 0}, "recompute_num_layers"),
])
def test_bad_layer_counts_name_the_field(plan: dict[str, object], says: str) -> None:
    with pytest.raises(SpecError, match=says):
        ParallelismSpec.parse(plan, "plan")


def test_more_layers_than_the_largest_chunk_is_infeasible() -> None:
    # 4 layers over pp 2: chunks of two; 3 is too many, 2 is every layer
    run = tiny_run(2, pp=2, global_batch_size=4, recompute="full", recompute_num_layers=3)
    (problem,) = plan_problems(run)
    assert "recompute_num_layers 3 exceeds the 2 layers" in problem
    report = simulate_run(run)
    assert not report.feasible and "recompute_num_layers" in report.reason
    assert not plan_problems(with_layers(run, 2))


def test_cli_flag_and_its_bad_value(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8",
            "--tp", "8", "--global-batch", "8", "--recompute", "full"]
    assert main([*base, "--recompute-num-layers", "4"]) == 0
    assert "recompute=full (first 4 layers per chunk)" in capsys.readouterr().out
    assert main([*base, "--recompute-num-layers", "0"]) == 2
    assert "recompute_num_layers" in capsys.readouterr().err


def test_search_refuses_a_pinned_layer_count() -> None:
    run = tiny_run(2, global_batch_size=4, recompute="full", recompute_num_layers=2)
    with pytest.raises(SpecError, match="recompute_num_layers"):
        search(run)
    with pytest.raises(SpecError, match="recompute_num_layers"):
        search(tiny_run(2, global_batch_size=4), fixed={"recompute_num_layers": 2})


# --- validate: the least recompute that fits ----------------------------------------------

def test_unstated_recompute_tries_the_fewest_recomputed_layers_before_full() -> None:
    notes: list[str] = []
    kinds = [(c.kind, c.least) for c in recompute_choices("not stated", "", notes)]
    assert kinds == [("none", False), ("selective", False), ("full", True), ("full", False)]
    # Llama 3 405B on 8,192 H100 (T064): no recompute does not fit codesign's estimate; the
    # least-recompute group holds, per candidate, the fewest layers per chunk that fit, and
    # one fewer does not fit
    (row,) = [r for r in read_rows(SHARED) if r["case_id"] == "T064"]
    case = map_row(row)
    assert len(case.candidates) == 4
    assert not any(simulate_run(r).feasible for r in case.candidates[0])
    runs = case.candidates[2]
    assert runs
    for run in runs:
        n = run.parallel.recompute_num_layers
        assert n is not None
        assert least_recompute_layers(with_layers(run, None)) == n
        assert simulate_run(run).feasible
        if n > 1:
            assert not simulate_run(with_layers(run, n - 1)).feasible


def test_a_stated_layer_count_is_taken() -> None:
    (row,) = [r for r in read_rows(SHARED) if r["case_id"] == "T064"]
    case = map_row({**row, "activation_recompute": "full, recompute-num-layers 1"})
    assert len(case.candidates) == 1
    assert {r.parallel.recompute_num_layers for r in case.candidates[0]} == {1}
    assert any("first 1 layers of each pipeline chunk" in a for a in case.assumptions)
    # in the notes too, unless the cell names the uniform method (there N is a group size)
    assert [(c.kind, c.layers) for c in recompute_choices("", "recompute_num_layers=3", [])] \
        == [("full", 3)]
    assert [(c.kind, c.layers) for c in recompute_choices(
        "full (uniform)", "recompute_num_layers=3", [])] == [("full", None)]
    # more layers than a chunk holds: every layer (Megatron recomputes them all)
    case = map_row({**row, "activation_recompute": "activation checkpointing on 8 layers "
                                                   "per stage"})
    assert {(r.parallel.recompute, r.parallel.recompute_num_layers)
            for r in case.candidates[0]} == {("full", None)}
