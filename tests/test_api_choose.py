"""``codesign.simulate`` chooses the plan when no layout is given (issue 14 item 1), as the
CLI does; ``codesign.api.simulate`` simulates exactly the run it is given."""

from __future__ import annotations

from codesign import simulate
from codesign.api import build_run
from codesign.api import simulate as exact
from codesign.search.choose import LAYOUT_FIELDS, choose_plan


def test_no_layout_chooses_the_fastest_feasible_plan() -> None:
    r = simulate(model="llama3-8b", gpu="h100", num_gpus=8, global_batch_size=16)
    assert r.feasible and r.plan_notes and "chosen by the search" in r.plan_notes[0]
    assert r.plan["global_batch_size"] == 16  # a setting given stays pinned
    # the chosen plan is a real plan: simulating it exactly gives the same step
    layout = {k: r.plan[k] for k in LAYOUT_FIELDS if r.plan.get(k) is not None}
    again = exact(model="llama3-8b", gpu="h100", num_gpus=8, **{
        k: v for k, v in r.plan.items() if v is not None and k in (
            *layout, "global_batch_size", "micro_batch_size", "recompute", "zero_stage",
            "sequence_parallel", "tp_comm_overlap", "schedule")})
    assert again.step_time_s == r.step_time_s


def test_a_layout_or_nothing_is_simulated_as_given() -> None:
    given = simulate(model="llama3-8b", gpu="h100", num_gpus=8, tp=8, pp=1,
                     global_batch_size=16)
    assert given.plan["tp"] == 8 and given.plan_notes == ()
    assert simulate().plan_notes == ()  # the built-in default run


def test_no_plan_fits_is_a_report_with_the_reason() -> None:
    r = simulate(model="gpt3-175b", gpu="h100", num_gpus=2, global_batch_size=2)
    assert not r.feasible and "no plan fits" in r.reason


def test_search_prices_a_chunk_that_holds_only_the_loss() -> None:
    """pp × vpp may exceed the layer count by the embedding's and the loss's own virtual
    stages (``plan_problems``): the search's chunk costs take such a chunk, which has no
    transformer layer, instead of failing on it (a row stating vpp but not pp raised
    IndexError)."""
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=16, global_batch_size=32)
    chosen, _ = choose_plan(run, {"vpp": 17})  # 32 layers over pp 2 × 17 = 34 chunks
    assert chosen.parallel.vpp == 17 and chosen.parallel.pp * 17 <= 34
    assert exact(model="llama3-8b", gpu="h100", num_gpus=16, global_batch_size=32,
                 **{k: getattr(chosen.parallel, k) for k in ("tp", "pp", "vpp")}).feasible
