"""DeepEP-style MoE dispatch (``moe_dispatcher: deepep``): a token crosses the network once
per destination domain and is forwarded inside it; group-limited routing caps the domains.
Checked against closed forms, a Monte Carlo of uniform routing, and the network model."""

from __future__ import annotations

import random
from math import comb

import pytest

from codesign.api import build_models, build_run, simulate_run
from codesign.network.algorithms.direct import all_to_all
from codesign.network.token_routing import TokenRouting
from codesign.validation.training_cases import map_row


def _monte_carlo(r: TokenRouting, domains: int, trials: int = 20000) -> float:
    """Mean distinct domains hit by a token routed uniformly (within its chosen groups)."""
    rng = random.Random(7)
    per_domain, total = r.experts // domains, 0
    for _ in range(trials):
        if r.groups:
            size = r.experts // r.groups
            chosen = rng.sample(range(r.groups), r.group_topk)
            pool = [g * size + i for g in chosen for i in range(size)]
            # every chosen group gets one copy (picked by its best experts), the rest anywhere
            experts = [g * size + rng.randrange(size) for g in chosen]
            rest = [e for e in pool if e not in experts]
            experts += rng.sample(rest, r.top_k - len(experts))
        else:
            experts = rng.sample(range(r.experts), r.top_k)
        total += len({e // per_domain for e in experts})
    return total / trials


def test_deepseek_v3_node_limited_routing_over_eight_nodes_reaches_four() -> None:
    # 8 groups of 32 experts, 4 per token; EP 64 over 8 nodes: one group per node
    r = TokenRouting(256, 8, 8, 4)
    assert r.distinct_domains(8) == pytest.approx(4.0)
    assert r.network_share(8) == pytest.approx(0.5)
    # 4 nodes, two groups each: nodes holding one of 4 chosen groups of 8
    assert r.distinct_domains(4) == pytest.approx(4 * (1 - comb(6, 4) / comb(8, 4)))


@pytest.mark.parametrize(("routing", "domains"), [
    (TokenRouting(128, 8), 4), (TokenRouting(128, 8), 16), (TokenRouting(8, 2), 2),
    (TokenRouting(256, 8, 8, 4), 4), (TokenRouting(256, 8, 8, 4), 8),
])
def test_distinct_domains_match_a_monte_carlo_of_uniform_routing(routing: TokenRouting,
                                                                 domains: int) -> None:
    assert routing.distinct_domains(domains) == pytest.approx(
        _monte_carlo(routing, domains), rel=0.02)


def test_one_domain_or_one_copy_saves_nothing() -> None:
    assert TokenRouting(64, 8).distinct_domains(1) == 1.0
    assert TokenRouting(64, 1).network_share(8) == pytest.approx(1.0)


def test_forwarded_all_to_all_by_hand() -> None:
    # 64 ranks, 8 per domain, 800 MB per rank; NVLink 400 GB/s, NIC 50 GB/s, alphas 1 / 4 us
    s, n, k, up, out = 800e6, 64, 8, 400e9, 50e9
    direct = all_to_all(s, n, k, up, 1e-6, out, 4e-6)
    assert direct == pytest.approx(56 / 64 * s / out + 5e-6)  # NIC-bound: 14 ms
    fwd = all_to_all(s, n, k, up, 1e-6, out, 4e-6, 0.5)
    assert fwd == pytest.approx(0.5 * 56 / 64 * s / out + 5e-6)  # half the copies: 7 ms
    # the scale-up links carry every copy bound for another rank: 7/8 · S at 400 GB/s
    assert all_to_all(s, n, k, up, 1e-6, out, 4e-6, 0.01) == pytest.approx(
        7 / 8 * s / up + 5e-6)
    # inside one domain nothing is forwarded: the direct all-to-all
    assert all_to_all(s, 8, 8, up, 1e-6, out, 4e-6, 0.5) == all_to_all(
        s, 8, 8, up, 1e-6, out, 4e-6)


DSV3 = dict(model="deepseek-v3", gpu="h100", num_gpus=1024, tp=1, pp=16, ep=64,
            global_batch_size=1024, recompute="full")


def test_the_network_model_prices_ep_all_to_alls_by_the_dispatcher() -> None:
    _, _, nccl = build_models(build_run(**DSV3))  # type: ignore[arg-type]
    _, _, deepep = build_models(build_run(**DSV3, moe_dispatcher="deepep"))  # type: ignore[arg-type]
    p = deepep.placement("ep")
    assert (p.size, p.num_domains) == (64, 8)
    size = 500e6
    base = nccl.collective("all_to_all", "ep", size).time_s
    fwd = deepep.collective("all_to_all", "ep", size).time_s
    assert fwd < base
    # NIC-bound both ways: DeepSeek-V3's copies cross the network half as often (4 of 8)
    lat = nccl.collective("all_to_all", "ep", 1.0).time_s
    assert (fwd - lat) / (base - lat) == pytest.approx(0.5, rel=0.02)
    # other groups and collectives are untouched
    assert deepep.collective("all_reduce", "dp", size) == nccl.collective("all_reduce", "dp",
                                                                          size)


def test_a_step_with_deepep_is_faster_only_by_its_all_to_alls() -> None:
    a = simulate_run(build_run(**DSV3))  # type: ignore[arg-type]
    b = simulate_run(build_run(**DSV3, moe_dispatcher="deepep"))  # type: ignore[arg-type]
    assert a.feasible and b.feasible
    assert a.step_time_s is not None and b.step_time_s is not None
    assert b.step_time_s < a.step_time_s
    for k in ("forward", "backward", "recompute"):
        assert b.breakdown_s.get(k, 0.0) == pytest.approx(a.breakdown_s.get(k, 0.0), rel=1e-9)


ROW = {"case_id": "D1", "source": "test", "model": "DeepSeek-V3", "gpu_type": "H800",
       "num_gpus": "2048", "tp": "1", "pp": "16", "ep": "64", "global_batch_size": "15360",
       "seq_len": "4096", "micro_batch_size": "1", "activation_recompute": "full",
       "tokens_per_s_per_gpu": "1500"}


@pytest.mark.parametrize(("notes", "dispatcher"), [
    ("DeepEP", "deepep"), ("node-limited routing, IB then NVLink forwarding", "deepep"),
    ("moe_token_dispatcher_type=alltoall", "alltoall"), ("", "alltoall")])
def test_a_row_naming_deepep_forwards_its_tokens(notes: str, dispatcher: str) -> None:
    case = map_row({**ROW, "notes": notes})
    runs = [r for g in case.candidates for r in g]
    assert runs and all(r.parallel.moe_dispatcher == dispatcher for r in runs)
