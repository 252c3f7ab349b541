"""Request-level serving simulation: hand-computed queues, KV budgets, KV transfers,
reproducibility, traces, percentiles, fair sharing, routing and the ``serve`` CLI."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy
import yaml
from pydantic import ValidationError

from codesign.cli import main
from codesign.errors import SpecError
from codesign.serving.arrivals import arrival_times, client_generators, sample_lengths
from codesign.serving.metrics import summarize
from codesign.serving.replica import blocks_for
from codesign.serving.sim import ServingResult, simulate_serving, with_overrides
from codesign.serving.stages import choose_route, effective_hit_fraction, search_time_s
from codesign.serving.tiers import FairShareChannel
from codesign.serving.timeline import chrome_trace
from codesign.serving.traces import TraceWarning, load_trace
from codesign.specs.serving import (
    FixedLength,
    GammaArrival,
    KvRetrievalStageSpec,
    LognormalLength,
    PoissonArrival,
    RagStageSpec,
    RouteStageSpec,
    ServingSpec,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "serving"

# prefill 0.8 ms per token; a decode step 12 ms + 1 ms per decoding sequence
FIXED = {"prefill_s_per_token": 0.0008, "decode_step_s": 0.012, "decode_s_per_seq": 0.001,
         "kv_capacity_tokens": 100_000}

TRACE_4 = "arrival_s,input_tokens,output_tokens\n0.0,100,5\n0.05,50,3\n0.10,100,6\n0.15,20,2\n"


def engine(name: str = "e", scheduler: dict[str, Any] | None = None, count: int = 1,
           **cost: Any) -> dict[str, Any]:
    return {"name": name, "device": "h100", "count": count,
            "models": [{"model": "llama3-8b", "step_cost": {**FIXED, **cost}}],
            "scheduler": scheduler or {"name": "continuous"}}


def trace_spec(tmp_path: Path, text: str, scheduler: dict[str, Any], **cost: Any) -> ServingSpec:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return ServingSpec.parse({
        "engines": [engine(scheduler=scheduler, **cost)],
        "clients": [{"name": "c", "model": "llama3-8b",
                     "arrival": {"process": "trace", "path": str(path)}}],
        "record_token_times": True})


def times(result: ServingResult) -> list[tuple[float, float, list[float]]]:
    out = []
    for r in result.requests:
        d = r.to_dict(token_times=True)
        out.append((d["ttft_s"], d["e2e_s"], d["token_times_s"]))
    return out


def check(result: ServingResult, expected: list[tuple[float, float, list[float]]]) -> None:
    got = times(result)
    assert len(got) == len(expected)
    for (ttft, e2e, toks), (ettft, ee2e, etoks) in zip(got, expected, strict=True):
        assert ttft == pytest.approx(ettft, abs=1e-12)
        assert e2e == pytest.approx(ee2e, abs=1e-12)
        assert toks == pytest.approx(etoks, abs=1e-12)


# --- hand-computed queues -------------------------------------------------------------------


def test_static_batching_hand_computed(tmp_path: Path) -> None:
    """Batches of 2, prompts padded to the longest, the batch decodes until its longest
    request ends; arrivals at 0, 0.05, 0.10, 0.15 s."""
    res = simulate_serving(trace_spec(tmp_path, TRACE_4, {"name": "static",
                                                          "max_batch_size": 2}))
    # r0 alone: prefill 100 tok = 0.08 s; 4 decode steps of 0.012 + 0.001 = 0.013 s
    r0 = [0.08, 0.093, 0.106, 0.119, 0.132]
    # r1 + r2 at 0.132: padded prefill 2 x 100 tok = 0.16 s -> 0.292; steps of 0.012 + 2 x
    # 0.001 (r1 finished early is still computed as padding) until r2's 6th token
    batch = [0.292 + 0.014 * k for k in range(6)]
    # r3 at 0.362: prefill 20 tok = 0.016 s, one decode step of 0.013 s
    r3 = [0.378, 0.391]
    check(res, [(0.08, 0.132, r0), (0.292 - 0.05, 0.320 - 0.05, batch[:3]),
                (0.292 - 0.10, batch[5] - 0.10, batch), (0.378 - 0.15, 0.391 - 0.15, r3)])
    m = res.metrics()
    tpot = sorted([0.013, 0.014, 0.014, 0.013])
    assert m["latency_s"]["tpot"]["mean"] == pytest.approx(sum(tpot) / 4)
    assert m["latency_s"]["queue"]["max"] == pytest.approx(0.362 - 0.15)


def test_continuous_batching_hand_computed(tmp_path: Path) -> None:
    """vLLM-style: a prefill step for each arrival (prefill first), then decode steps over
    everything running."""
    res = simulate_serving(trace_spec(tmp_path, TRACE_4, {"name": "continuous"}))
    # prefills: r0 0->0.08, r1 0.08->0.12, r2 0.12->0.20, r3 0.20->0.216;
    # decode steps cost 0.012 + 0.001 per running sequence: 4, 3, 2, 2, 1 sequences
    ends = [0.232, 0.247, 0.261, 0.275, 0.288]
    check(res, [(0.08, 0.275, [0.08, *ends[:4]]),
                (0.12 - 0.05, 0.247 - 0.05, [0.12, *ends[:2]]),
                (0.20 - 0.10, 0.288 - 0.10, [0.20, *ends]),
                (0.216 - 0.15, 0.232 - 0.15, [0.216, ends[0]])])
    m = res.metrics()
    tpots = [(0.275 - 0.08) / 4, (0.247 - 0.12) / 2, (0.288 - 0.20) / 5, 0.232 - 0.216]
    assert m["latency_s"]["tpot"]["p50"] == pytest.approx(float(np.percentile(tpots, 50)))
    assert m["latency_s"]["ttft"]["max"] == pytest.approx(0.10)
    assert m["throughput"]["window_s"] == pytest.approx(0.288)
    assert m["throughput"]["output_tokens_per_s"] == pytest.approx(16 / 0.288)
    assert m["replicas"][0]["steps"] == 4 + 5
    assert m["replicas"][0]["utilization"] == pytest.approx(1.0)


def test_chunked_prefill_hand_computed(tmp_path: Path) -> None:
    """Token budget 64: r0's 100-token prompt takes chunks of 64 and 36; r1 (20 tokens,
    arriving at 0.06 s) is prefilled in the same step as r0's first decode."""
    text = "arrival_s,input_tokens,output_tokens\n0.0,100,3\n0.06,20,2\n"
    res = simulate_serving(trace_spec(tmp_path, text, {"name": "chunked_prefill",
                                                       "token_budget": 64}))
    # 64 x 0.0008 = 0.0512; 36 x 0.0008 = 0.0288 -> r0's first token at 0.08; mixed step:
    # 20 x 0.0008 + 0.012 + 0.001 = 0.029 -> 0.109; decode of both: 0.014 -> 0.123
    check(res, [(0.08, 0.123, [0.08, 0.109, 0.123]), (0.109 - 0.06, 0.123 - 0.06,
                                                      [0.109, 0.123])])


# --- KV budget ------------------------------------------------------------------------------


def kv_tight_spec(scheduler: dict[str, Any], n: int = 12) -> ServingSpec:
    return ServingSpec.parse({
        "engines": [engine(scheduler=scheduler, kv_capacity_tokens=256)],
        "clients": [{"name": "c", "model": "llama3-8b",
                     "arrival": {"process": "poisson", "rate_rps": 50.0}, "num_requests": n,
                     "input_tokens": {"dist": "uniform", "low": 20, "high": 60},
                     "output_tokens": {"dist": "uniform", "low": 30, "high": 90}}]})


@pytest.mark.parametrize("scheduler", [
    {"name": "continuous", "watermark_fraction": 0.0},
    {"name": "continuous"},
    {"name": "chunked_prefill", "token_budget": 32, "watermark_fraction": 0.0},
    {"name": "static", "max_batch_size": 4},
])
def test_kv_budget_never_exceeded(scheduler: dict[str, Any]) -> None:
    spec = kv_tight_spec(scheduler)
    res = simulate_serving(spec)
    inst = res.instances[0]
    assert inst.total_blocks == 256 // 16
    used = [s[5] for s in inst.steps]
    assert max(used) <= inst.total_blocks
    assert inst.peak_blocks <= inst.total_blocks
    assert inst.free_blocks == inst.total_blocks  # everything returned at the end
    assert all(r.completed for r in res.requests)
    for r in res.requests:  # each request produced exactly its tokens despite preemption
        assert r.generated_tokens == r.output_tokens
        assert len(r.token_times()) == r.output_tokens
        tt = r.token_times()
        assert tt == sorted(tt)
    if scheduler["name"] in ("continuous", "chunked_prefill"):
        # 12 requests of up to 150 tokens share 256 KV tokens: decode must preempt
        assert inst.preemptions > 0
        assert any(r.preemptions for r in res.requests)


def test_request_larger_than_kv_is_rejected() -> None:
    spec = ServingSpec.parse({
        "engines": [engine(kv_capacity_tokens=64)],
        "clients": [{"name": "c", "model": "llama3-8b",
                     "arrival": {"process": "constant", "rate_rps": 1.0}, "num_requests": 2,
                     "input_tokens": {"dist": "fixed", "value": 100},
                     "output_tokens": {"dist": "fixed", "value": 4}}]})
    res = simulate_serving(spec)
    assert all(r.rejected and "KV blocks" in r.rejected for r in res.requests)
    assert res.metrics()["requests"]["rejected"] == 2


# --- disaggregated ----------------------------------------------------------------------------


def disagg_spec(n: int = 40, link: dict[str, Any] | None = None) -> ServingSpec:
    return ServingSpec.parse({
        "engines": [
            engine("pre", {"name": "disaggregated", "decode_engine": "dec",
                           "kv_link": link or {"via": "link", "bandwidth_GBps": 1.0,
                                               "latency_us": 10.0}},
                   count=2, kv_bytes_per_token=1000.0),
            engine("dec", {"name": "continuous", "watermark_fraction": 0.0}, count=2,
                   kv_capacity_tokens=2000)],
        "clients": [{"name": "c", "model": "llama3-8b",
                     "arrival": {"process": "poisson", "rate_rps": 40.0}, "num_requests": n,
                     "input_tokens": {"dist": "uniform", "low": 50, "high": 400},
                     "output_tokens": {"dist": "uniform", "low": 1, "high": 60}}]})


def test_disaggregated_accounts_every_kv_byte() -> None:
    res = simulate_serving(disagg_spec())
    handed = [r for r in res.requests if r.output_tokens >= 2]
    assert any(r.output_tokens == 1 for r in res.requests)  # those finish at prefill
    expected = sum(1000.0 * r.prompt_tokens for r in handed)
    assert sum(t.bytes for t in res.kv_transfers) == pytest.approx(expected, rel=1e-12)
    assert len(res.kv_transfers) == len(handed)
    assert res.metrics()["kv_transfers"]["bytes"] == pytest.approx(expected, rel=1e-12)
    for r in handed:
        assert r.kv_transfer_bytes == pytest.approx(1000.0 * r.prompt_tokens)
        assert r.generated_tokens == r.output_tokens
    for inst in res.instances:
        assert inst.free_blocks == inst.total_blocks
        assert max(s[5] for s in inst.steps) <= inst.total_blocks
    pre = [i for i in res.instances if i.engine == "pre"]
    assert all(i.dstep == 0 for i in pre)  # the prefill engine never decodes


def test_disaggregated_single_transfer_time() -> None:
    """One request: 300 prompt tokens x 1000 B over 1 GB/s after 10 us."""
    spec = with_overrides(disagg_spec(), num_requests=1)
    spec = spec.model_copy(update={"clients": [spec.clients[0].model_copy(update={
        "input_tokens": FixedLength(value=300), "output_tokens": FixedLength(value=5)})]})
    res = simulate_serving(spec)
    (t,) = res.kv_transfers
    assert t.end_s - t.start_s == pytest.approx(10e-6 + 300 * 1000 / 1e9)
    (r,) = res.requests
    # prefill 300 x 0.0008 = 0.24 s; transfer; 4 decode steps of 0.013 s
    assert r.first_token_s == pytest.approx(0.24)
    assert r.finish_s == pytest.approx(0.24 + 10e-6 + 3e-4 + 4 * 0.013)


def test_disaggregated_over_network_model() -> None:
    res = simulate_serving(disagg_spec(10, {"via": "network", "topology": "dgx-h100"}))
    assert all(r.completed for r in res.requests)
    for t in res.kv_transfers:
        # 400 Gb/s NIC per GPU, one GPU per prefill replica here: no faster than the wire
        assert t.end_s - t.start_s >= t.bytes / 50e9


# --- reproducibility, traces ------------------------------------------------------------------


def rag_spec() -> ServingSpec:
    return ServingSpec.parse(yaml.safe_load(RAG_YAML))


RAG_YAML = """
engines:
  - name: embed
    device: h100
    count: 1
    models: [{model: llama3-8b, step_cost: {prefill_s_per_token: 0.0001, decode_step_s: 0.01,
                                             kv_capacity_tokens: 50000}}]
  - name: llm
    device: h100
    count: 2
    models: [{model: llama3-70b, step_cost: {prefill_s_per_token: 0.0004, decode_step_s: 0.02,
                                              decode_s_per_seq: 0.0002,
                                              kv_capacity_tokens: 20000,
                                              kv_bytes_per_token: 160000}}]
    scheduler: {name: chunked_prefill, token_budget: 512}
cpu_pools: [{name: cpu, nodes: 1, slots_per_node: 2}]
memory_tiers:
  - {name: dram, kind: host_dram, capacity_GB: 100, bandwidth_GBps: 10, latency_us: 5}
stages:
  rag: {kind: rag, embedding_engine: embed, cpu_pool: cpu, index_vectors: 1000000,
        base_ms: 1, per_million_vectors_ms: 3, per_result_ms: 0.1, top_k: 4,
        tokens_per_document: 100}
  prefix: {kind: kv_retrieval, tier: dram, hit_fraction: 0.5, prefix_tokens: 256}
  think: {kind: reasoning, thinking_tokens: {dist: uniform, low: 10, high: 40}, rounds: 2,
          tool_tokens: 20, round_gap_s: 0.05}
clients:
  - name: c
    model: llama3-70b
    arrival: {process: gamma, rate_rps: 8, cv: 2}
    num_requests: 60
    input_tokens: {dist: lognormal, mean: 300, sigma: 0.5}
    output_tokens: {dist: uniform, low: 5, high: 50}
    request_types:
      - {name: full, weight: 2, stages: [rag, prefix, think]}
      - {name: plain}
slo: {ttft_s: 0.5, tpot_s: 0.05}
"""


def test_same_seed_same_results_different_seed_different() -> None:
    spec = rag_spec()
    a = simulate_serving(spec).to_dict(requests=True)
    b = simulate_serving(spec).to_dict(requests=True)
    for d in (a, b):
        d.pop("wall_s")
    assert a == b
    c = simulate_serving(with_overrides(spec, seed=1)).to_dict(requests=True)
    assert [r["arrival_s"] for r in c["requests"]] != [r["arrival_s"] for r in a["requests"]]
    assert c["latency_s"] != a["latency_s"]


def test_rag_reasoning_pipeline_stages() -> None:
    res = simulate_serving(rag_spec())
    full = [r for r in res.requests if r.request_type == "full"]
    plain = [r for r in res.requests if r.request_type == "plain"]
    assert full and plain
    for r in full:
        names = [s[0] for s in r.stages]
        assert names[:2] == ["rag.embed", "rag.search"]
        assert r.prompt_tokens == r.input_tokens + 4 * 100
        gens = [s for s in r.seqs if s.label.startswith("generate")]
        assert len(gens) == 2  # two reasoning rounds
        # round 2's prompt = round 1's prompt + its output + 20 tool tokens
        assert gens[1].prompt == gens[0].prompt + gens[0].out + 20
        assert 10 + r.output_tokens <= gens[1].out <= 40 + r.output_tokens
        search = next(s for s in r.stages if s[0] == "rag.search")
        assert search[2] - search[1] >= (1 + 3 + 0.4) * 1e-3 - 1e-12
        if r.kv_hit:
            assert r.cached_tokens == 256
            assert r.tier_bytes == 256 * 160000
    for r in plain:
        assert r.prompt_tokens == r.input_tokens and not r.stages
    m = res.metrics()
    hits = sum(r.kv_hit for r in res.requests)
    assert m["memory_tiers"]["dram"]["reads"] == hits > 0
    assert m["memory_tiers"]["dram"]["bytes"] == hits * 256 * 160000


def test_trace_malformed_lines_reported_rest_loads(tmp_path: Path) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("timestamp,input_length,output_length\n0.5,10,3\noops,10,3\n"
                        "1.5,20,4\n2.0,-3,4\n2.5,7\n3.0,30,5\n")
    with pytest.warns(TraceWarning) as caught:
        tr = load_trace(csv_path)
    msgs = [str(w.message) for w in caught]
    assert any("line 3" in m for m in msgs)
    assert any("line 5" in m for m in msgs)
    assert any("line 6" in m for m in msgs)
    assert len(tr) == 3 and len(tr.problems) == 3
    assert tr.arrival_s.tolist() == [0.0, 1.0, 2.5]
    assert tr.input_tokens is not None and tr.input_tokens.tolist() == [10, 20, 30]

    jl = tmp_path / "t.jsonl"
    jl.write_text('{"timestamp": 1000, "input_length": 5, "output_length": 2}\n'
                  '{"timestamp": 1500, "input_length": 6, \n'
                  '{"timestamp": 3000, "input_length": 7, "output_length": 4}\n')
    with pytest.warns(TraceWarning, match="line 2"):
        tr2 = load_trace(jl, time_unit="ms")
    assert tr2.arrival_s.tolist() == [0.0, 2.0]
    assert tr2.output_tokens is not None and tr2.output_tokens.tolist() == [2, 4]


def test_trace_replay_in_simulation(tmp_path: Path) -> None:
    spec = trace_spec(tmp_path, TRACE_4 + "bad,1,1\n", {"name": "continuous"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        res = simulate_serving(spec)
    assert [r.arrival_s for r in res.requests] == [0.0, 0.05, 0.10, 0.15]
    assert [r.output_tokens for r in res.requests] == [5, 3, 6, 2]
    assert len(res.problems) == 1 and "line 6" in res.problems[0]


# --- small pieces -----------------------------------------------------------------------------


def test_percentiles_match_numpy() -> None:
    sample = np.arange(1, 101, dtype=float)
    s = summarize(sample)
    assert s["p50"] == pytest.approx(50.5)
    assert s["p90"] == pytest.approx(90.1)
    assert s["p99"] == pytest.approx(99.01)
    rng = np.random.default_rng(3)
    x = rng.lognormal(0, 1, 777)
    s = summarize(x)
    for p in (50, 90, 99):
        assert s[f"p{p}"] == float(np.percentile(x, p))
    assert s["mean"] == pytest.approx(float(x.mean()))
    assert summarize([])["p50"] is None


def test_fair_share_channel() -> None:
    env = simpy.Environment()
    ch = FairShareChannel(env, "tier", rate=1e9)
    done: dict[str, float] = {}

    def reader(name: str, start: float, nbytes: float) -> Any:
        yield env.timeout(start)
        yield ch.transfer(nbytes)
        done[name] = env.now

    env.process(reader("a", 0.0, 1e9))
    env.process(reader("b", 0.5, 1e9))
    env.process(reader("c", 10.0, 1e9))
    env.process(reader("d", 10.0, 1e9))
    env.run()
    # a alone for 0.5 s (0.5 GB), then shares: a's last 0.5 GB at 0.5 GB/s -> 1.5 s;
    # b had 0.5 GB by then and finishes alone at 2.0 s; c and d share from the start -> 12 s
    assert done == pytest.approx({"a": 1.5, "b": 2.0, "c": 12.0, "d": 12.0})
    assert ch.total_bytes == 4e9
    assert ch.max_concurrency == 2


def test_fair_share_per_transfer_cap() -> None:
    env = simpy.Environment()
    ch = FairShareChannel(env, "link", rate=10.0, per_transfer_rate=2.0)
    evs = [ch.transfer(4.0) for _ in range(3)]
    env.run()
    # 3 x min(2, 10/3) = 2 units/s each: 2 s
    assert all(e.value.end_s == pytest.approx(2.0) for e in evs)


def test_arrivals_and_lengths_statistics() -> None:
    rng = client_generators(5, 1)[0]
    t = arrival_times(PoissonArrival(rate_rps=4.0), rng, num_requests=40_000)
    gaps = np.diff(t)
    assert t[0] == 0.0
    assert gaps.mean() == pytest.approx(0.25, rel=0.02)
    g = np.diff(arrival_times(GammaArrival(rate_rps=4.0, cv=3.0), rng, num_requests=40_000))
    assert g.mean() == pytest.approx(0.25, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(3.0, rel=0.08)
    d = arrival_times(PoissonArrival(rate_rps=4.0), rng, duration_s=100.0)
    assert d.max() < 100.0 and len(d) == pytest.approx(400, rel=0.2)
    x = sample_lengths(LognormalLength(mean=500, sigma=0.6), 40_000, rng)
    assert x.mean() == pytest.approx(500, rel=0.02)


def test_arrival_rate_and_cv_are_bounded() -> None:
    # cv**2 overflows past ~1e154 (shape 1/cv**2 = 0 divided by zero); the spec bounds cv to
    # (0, 100], where the gaps stay finite with the requested mean rate's scale
    with pytest.raises(ValidationError, match="less than or equal to 100"):
        GammaArrival(rate_rps=4.0, cv=1e308)
    rng = client_generators(5, 1)[0]
    t = arrival_times(GammaArrival(rate_rps=4.0, cv=100.0), rng, num_requests=1_000)
    assert np.isfinite(t).all() and (np.diff(t) >= 0).all()
    # a subnormal rate made every arrival time infinite (NaN latencies): rates are bounded
    for rate in (1e-320, 1e12):
        with pytest.raises(ValidationError, match="rate_rps"):
            PoissonArrival(rate_rps=rate)


def test_stage_formulas() -> None:
    st = RagStageSpec(embedding_engine="e", cpu_pool="p", index_vectors=50_000_000,
                      scan_fraction=0.1, base_ms=2.0, per_million_vectors_ms=4.0,
                      per_result_ms=0.5, top_k=10, tokens_per_document=100)
    assert search_time_s(st) == pytest.approx((2.0 + 4.0 * 50 * 0.1 + 0.5 * 10) / 1e3)
    kv = KvRetrievalStageSpec(tier="t", hit_fraction=0.8, prefix_tokens=100,
                              distinct_prefixes=10)
    assert effective_hit_fraction(kv, 1e9, 4e8) == pytest.approx(0.8 * 1e9 / 4e9)
    assert effective_hit_fraction(kv, 1e12, 4e8) == pytest.approx(0.8)
    route = RouteStageSpec.model_validate({
        "rules": [{"max_input_tokens": 100, "model": "small"}],
        "split": [{"weight": 3, "model": "big"}, {"weight": 1, "model": "other"}]})
    assert choose_route(route, 50, 0.9) == ("small", None)
    assert choose_route(route, 500, 0.74) == ("big", None)
    assert choose_route(route, 500, 0.76) == ("other", None)
    assert blocks_for(33, 16) == 3


def test_cost_per_million_tokens(tmp_path: Path) -> None:
    spec = trace_spec(tmp_path, TRACE_4, {"name": "continuous"})
    spec = spec.model_copy(update={"engines": [spec.engines[0].model_copy(
        update={"price_usd_per_hour": 3.6})], "electricity_usd_per_kWh": 0.1})
    res = simulate_serving(spec)
    c = res.metrics()["cost"]
    hours = 0.288 / 3600
    rent = 3.6 * hours
    kwh = 700 * hours / 1000  # H100 SXM board power from the catalog
    assert c["rental_usd"] == pytest.approx(rent)
    assert c["energy_kWh"] == pytest.approx(kwh)
    assert c["total_usd"] == pytest.approx(rent + 0.1 * kwh)
    assert c["usd_per_million_output_tokens"] == pytest.approx((rent + 0.1 * kwh) / 16 * 1e6)


def test_timeline_has_engine_and_request_tracks(tmp_path: Path) -> None:
    res = simulate_serving(disagg_spec(8))
    tr = chrome_trace(res)
    ev = tr["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "step"]
    assert len(steps) == sum(len(i.steps) for i in res.instances)
    names = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert "engine pre" in names and "engine dec" in names
    assert sum(n.startswith("request ") for n in names) == 8
    assert {e["cat"] for e in ev if e.get("ph") == "X"} >= {"step", "prefill", "decode",
                                                           "kv_transfer"}
    assert all(e["dur"] >= 0 for e in ev if e.get("ph") == "X")


# --- spec validation and CLI --------------------------------------------------------------------


@pytest.mark.parametrize("patch, needle", [
    ({"clients": [{"name": "c", "model": "nope", "arrival": {"process": "poisson",
                                                           "rate_rps": 1},
                   "num_requests": 1, "input_tokens": {"dist": "fixed", "value": 1},
                   "output_tokens": {"dist": "fixed", "value": 1}}]},
     "clients.0.model: no engine serves 'nope'"),
    ({"engines": [engine(scheduler={"name": "fcfs"})]}, "does not match any of the expected"),
    ({"engines": [engine(scheduler={"name": "disaggregated", "decode_engine": "x"})]},
     "decode_engine: unknown engine 'x'"),
    ({"bogus": 1}, "bogus: unknown field"),
    # every replica is its own step loop: a 1e15-device engine hung building them
    ({"engines": [engine(count=10**15)]},
     "engines.0.count: Input should be less than or equal to 16384"),
])
def test_bad_spec_one_line(patch: dict[str, Any], needle: str) -> None:
    data = yaml.safe_load(BASE_YAML)
    data.update(patch)
    with pytest.raises(SpecError) as exc:
        ServingSpec.parse(data, "spec.yaml")
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


BASE_YAML = """
engines:
  - name: e
    device: h100
    count: 2
    models: [{model: llama3-8b, step_cost: {prefill_s_per_token: 0.0001, decode_step_s: 0.01,
                                             kv_capacity_tokens: 10000}}]
clients:
  - name: c
    model: llama3-8b
    arrival: {process: poisson, rate_rps: 20}
    num_requests: 30
    input_tokens: {dist: uniform, low: 10, high: 200}
    output_tokens: {dist: uniform, low: 2, high: 40}
slo: {ttft_s: 0.2}
"""


def test_cli_json_shape_and_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE_YAML)
    trace = tmp_path / "tl.json"
    code = main(["serve", str(spec), "--format", "json", "--requests", "12", "--seed", "4",
                 "--trace", str(trace)])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    assert d["requests"]["total"] == 12 == d["requests"]["completed"]
    for k in ("ttft", "tpot", "e2e", "queue"):
        assert set(d["latency_s"][k]) == {"mean", "p50", "p90", "p99", "max"}
    assert set(d["throughput"]) >= {"requests_per_s", "output_tokens_per_s",
                                    "requests_per_s_per_gpu", "output_tokens_per_s_per_gpu"}
    assert d["goodput"]["slo"]["ttft_s"] == 0.2
    assert 0 <= d["goodput"]["fraction"] <= 1
    assert len(d["replicas"]) == 2 and d["throughput"]["gpus"] == 2
    assert set(d["series"]["replicas"]) == {r["name"] for r in d["replicas"]}
    assert d["cost"]["usd_per_million_output_tokens"] > 0
    assert json.loads(trace.read_text())["traceEvents"]
    code = main(["serve", str(spec)])
    table = capsys.readouterr().out
    assert code == 0 and "TTFT" in table and "goodput" in table and "per million" in table


@pytest.mark.parametrize("text", ["engines: []\nclients: []\n", "- not a mapping\n",
                                  BASE_YAML.replace("rate_rps: 20", "rate_rps: -1")])
def test_cli_bad_spec_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             text: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    code = main(["serve", str(spec)])
    out, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("codesign: ")
    assert "Traceback" not in err + out


def test_examples_parse() -> None:
    from codesign.serving.sim import load_serving_spec

    for path in sorted(EXAMPLES.glob("*.yaml")):
        spec = load_serving_spec(path)
        assert spec.engines and spec.clients


def test_aggregate_pricer_matches_step_cost_model() -> None:
    """The O(1) decode pricing equals pricing the full context list."""
    pytest.importorskip("codesign.serving.step_cost")
    from codesign.serving.sim import aggregate_pricer, default_cost
    from codesign.specs.serving import EngineSpec

    eng = EngineSpec.model_validate({"name": "e", "device": "h100", "count": 2,
                                     "models": [{"model": "llama3-8b", "plan": {"tp": 2}}]})
    cost = default_cost(eng, eng.models[0], "engines.0.models.0")
    agg = aggregate_pricer(cost)
    assert agg is not None
    rng = np.random.default_rng(0)
    for _ in range(20):
        ctx = rng.integers(1, 4000, rng.integers(1, 64)).tolist()
        pre = [(int(n), int(c)) for n, c in rng.integers(1, 500, (rng.integers(0, 3), 2))]
        assert agg(pre, len(ctx), float(sum(ctx))) == pytest.approx(
            cost.step_time_s(pre, ctx), rel=1e-9)
        assert agg(pre, 0, 0.0) == pytest.approx(cost.step_time_s(pre, []), rel=1e-12)
    assert math.isfinite(cost.kv_transfer_bytes(100))


@pytest.mark.parametrize("scheduler", [
    {"name": "continuous", "watermark_fraction": 0.0},
    {"name": "chunked_prefill", "token_budget": 48, "watermark_fraction": 0.05},
])
def test_kv_blocks_match_a_recount_every_step(scheduler: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The O(1) block bookkeeping equals counting every sequence's blocks after each step."""
    from codesign.serving import replica as eng_mod

    checked = [0]
    orig = eng_mod.Instance.complete

    def complete(self: eng_mod.Instance, plan: eng_mod.StepPlan) -> None:
        orig(self, plan)
        held = sum(blocks_for(a + self.dstep, self.B) for a in self.decoding.values())
        held += sum(s.blocks for s in self.admitted if s.state != eng_mod.DECODE)
        assert self.total_blocks - self.free_blocks == held
        checked[0] += 1

    monkeypatch.setattr(eng_mod.Instance, "complete", complete)
    res = simulate_serving(kv_tight_spec(scheduler, n=25))
    assert checked[0] == len(res.instances[0].steps) > 50
    assert res.instances[0].preemptions > 0


# --- CPU engines ------------------------------------------------------------------------------


def test_cpu_engine_from_the_catalog_serves_a_model() -> None:
    """A catalog CPU socket is an engine device like a GPU: the same roofline prices its steps.
    Batch-1 decode of Llama 3 8B reads every weight once, so on one socket it takes at least
    weight bytes / DDR bandwidth and about that over the memory-bound efficiency."""
    from codesign.serving.step_cost import InferencePlan, StepCostModel
    from codesign.specs.catalog import load_gpu, load_model, load_topology

    cpu = load_gpu("xeon-8480")
    assert cpu.kind == "cpu"
    cost = StepCostModel.build(load_model("llama3-8b"), cpu, load_topology(cpu.default_topology),
                               InferencePlan())
    floor_s = cost.weight_bytes_per_gpu / cpu.hbm_bytes_per_s
    t = cost.step_time_s([], [128])
    assert floor_s / cpu.efficiency.memory_bound < t < 1.3 * floor_s / cpu.efficiency.memory_bound

    spec = ServingSpec.parse({
        "engines": [{"name": "cpu", "device": "xeon-8480", "count": 1,
                     "models": [{"model": "llama3-8b"}],
                     "scheduler": {"name": "continuous"}}],
        "clients": [{"name": "c", "model": "llama3-8b",
                     "arrival": {"process": "constant", "rate_rps": 0.1}, "num_requests": 3,
                     "input_tokens": {"dist": "fixed", "value": 64},
                     "output_tokens": {"dist": "fixed", "value": 8}}]})
    res = simulate_serving(spec)
    assert all(r.finish_s is not None for r in res.requests)
    # one request at a time: each of its 7 later tokens is one batch-1 decode step
    tpot = res.metrics()["latency_s"]["tpot"]["p50"]
    assert tpot == pytest.approx(cost.step_time_s([], [70]), rel=0.05)


def test_reasoning_rounds_are_bounded_with_a_clear_error() -> None:
    # every request's rounds are drawn up front: 10**15 rounds tried to allocate petabytes
    # (fuzz seed 9) before any message; the spec bounds them and names the field
    data = yaml.safe_load(RAG_YAML)
    data["stages"]["think"]["rounds"] = 10**15
    with pytest.raises(SpecError, match=r"rounds.*less than or equal to 1024"):
        ServingSpec.parse(data)
    data["stages"]["think"]["rounds"] = 1024
    assert ServingSpec.parse(data).stages["think"].rounds == 1024
