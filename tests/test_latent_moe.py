"""LatentMoE (Nemotron 3 Super, arXiv 2512.20856; Megatron-Core ``--moe-latent-size``): the
routed experts compute and the tokens travel at a latent width, with one shared projection
hidden -> latent before the dispatch and latent -> hidden after the combine. Checked against
closed-form parameter counts, GEMM shapes and all-to-all bytes on a toy model."""

from __future__ import annotations

import pytest
from conftest import tiny_model, tiny_run

from codesign.api import simulate_run
from codesign.specs.catalog import load_model
from codesign.workload.params import param_counts, routed_expert_params
from codesign.workload.training import build_training_graph

S, H, LAT, F, E, K, SH = 128, 256, 64, 96, 8, 2, 192
MOE = dict(num_experts=E, top_k=K, expert_ffn_hidden_size=F, num_shared_experts=1,
           shared_expert_ffn_hidden_size=SH)


def _model(latent: int | None):  # type: ignore[no-untyped-def]
    return tiny_model(moe={**MOE, "latent_size": latent}, mlp="plain", norm="rmsnorm")


def test_experts_count_at_the_latent_width_plus_two_shared_projections() -> None:
    plain, latent = param_counts(_model(None)), param_counts(_model(LAT))
    assert routed_expert_params(_model(LAT)) == 2 * LAT * F  # up + down, no gate, no bias
    layers = _model(LAT).num_layers
    assert latent.moe_routed == layers * E * 2 * LAT * F
    assert plain.moe_routed == layers * E * 2 * H * F
    # the router row grows by the two projections h x lat and lat x h; shared experts unchanged
    assert latent.router - plain.router == layers * 2 * H * LAT
    assert latent.moe_shared == plain.moe_shared == layers * 2 * H * SH


def _moe_ops(latent: int | None) -> dict[str, object]:
    # two ranks, experts split over both (ep 2): one sequence per rank, tokens dispatched
    g = build_training_graph(tiny_run(2, model=_model(latent), global_batch_size=2, ep=2))
    (chunk,) = g.chunks
    return {o.name: o for o in chunk.forward if o.layer == 0}


def test_tokens_travel_and_experts_compute_at_the_latent_width() -> None:
    ops = _moe_ops(LAT)
    T = S  # one sequence per rank, no TP
    assert ops["latent_down"].mnk == (T, LAT, H)  # type: ignore[attr-defined]
    assert ops["latent_up"].mnk == (T, H, LAT)  # type: ignore[attr-defined]
    # every expert GEMM takes (or gives) latent-wide rows
    up, down = ops["expert_up"], ops["expert_down"]
    assert up.mnk[1:] == (F, LAT) and down.mnk[1:] == (LAT, F)  # type: ignore[attr-defined]
    # routed FLOPs: T·k copies through up and down at the latent width
    routed = 2 * T * K * (LAT * F + F * LAT)
    assert up.flops + down.flops == pytest.approx(routed)  # type: ignore[attr-defined]
    # the router and the shared expert stay at the hidden width
    assert ops["router"].mnk == (T, E, H)  # type: ignore[attr-defined]
    assert ops["shared_up"].mnk == (T, SH, H)  # type: ignore[attr-defined]
    # the dispatch moves T·k bf16 rows of the latent width: H / LAT times fewer bytes
    plain = _moe_ops(None)
    assert ops["dispatch"].size == T * K * LAT * 2  # type: ignore[attr-defined]
    assert plain["dispatch"].size == ops["dispatch"].size * H / LAT  # type: ignore[attr-defined]
    assert "latent_down" not in plain and "latent_up" not in plain


def test_latent_projection_costs_less_than_it_saves_here() -> None:
    # k·2·F·(H - LAT) saved per token against 2·H·LAT spent: a faster step on the same GPU
    plain = simulate_run(tiny_run(1, model=_model(None), global_batch_size=2)).step_time_s
    latent = simulate_run(tiny_run(1, model=_model(LAT), global_batch_size=2)).step_time_s
    assert latent < plain


def test_nemotron3_super_counts_its_published_size() -> None:
    c = param_counts(load_model("nemotron3-super-120b-a12b"))
    # model card: 120B total, 12B active (the embedding and LM head, 2 x 131,072 x 4,096 =
    # 1.07B, are in the active count as they are in the card's 12B only approximately)
    assert c.total / 1e9 == pytest.approx(120, rel=0.01)
    assert c.active / 1e9 == pytest.approx(12.8, rel=0.01)
