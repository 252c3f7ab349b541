"""Serving studies (``kind: serving``): paths into a ServingSpec, variants, rows of serving
metrics, and the four serving studies in experiments/.

A tiny serving system with fixed step costs gives rows whose values are computed by hand; the
studies run in their smoke size and must write rows and every figure they declare, and keep
two properties that hold by construction of their systems.
"""

from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

from codesign.cli import main
from codesign.errors import SpecError
from codesign.experiments.axes import expand_points
from codesign.experiments.point import evaluate_point, row_columns
from codesign.experiments.serving_axes import (
    SERVING_METRIC_COLUMNS,
    catalog_serving_systems,
    load_serving_data,
    resolve_serving,
    set_path,
)
from codesign.experiments.spec import ExperimentSpec, load_experiment
from codesign.specs.catalog import load_gpu
from codesign.specs.serving import (
    ChunkedPrefillSchedulerSpec,
    ContinuousSchedulerSpec,
    ServingSpec,
    StaticSchedulerSpec,
)

STUDIES_DIR = Path(__file__).resolve().parent.parent / "experiments"
SERVING_STUDIES = ["reasoning-rounds", "rag-batching", "kv-tier", "disaggregated-vs-colocated",
                   "decode-hbm", "speculative", "decode-latency", "decode-graphs"]

#: one engine of two replicas with fixed step costs: a 100-token prompt prefills in 0.1 s, each
#: of the 10 decode steps after the first token takes 0.01 s
PREFILL_S_PER_TOKEN = 0.001
DECODE_STEP_S = 0.01
TINY: dict[str, Any] = {
    "kind": "serving", "name": "tiny", "seed": 1,
    "engines": [{"name": "llm", "device": "h100", "count": 2,
                 "models": [{"model": "llama3-8b", "step_cost": {
                     "kind": "fixed", "prefill_s_per_token": PREFILL_S_PER_TOKEN,
                     "decode_step_s": DECODE_STEP_S, "kv_capacity_tokens": 100_000}}],
                 "scheduler": {"name": "continuous", "max_num_batched_tokens": 4096}}],
    "clients": [{"name": "chat", "model": "llama3-8b",
                 "arrival": {"process": "constant", "rate_rps": 1.0}, "num_requests": 5,
                 "input_tokens": {"dist": "fixed", "value": 100},
                 "output_tokens": {"dist": "fixed", "value": 11}}],
    "memory_tiers": [{"name": "remote", "kind": "remote_memory", "capacity_GB": 100,
                      "bandwidth_GBps": 10}],
    "stages": {"think": {"kind": "reasoning", "rounds": 1,
                         "thinking_tokens": {"dist": "fixed", "value": 0}}},
    "slo": {"ttft_s": 0.15},
}


def _study(sweep: Any = None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "tiny-study", "kind": "serving",
                            "base": {"serving": copy.deepcopy(TINY)}}
    if sweep is not None:
        data["sweep"] = sweep
    for key, value in extra.items():
        if key in ("overrides", "variants"):
            data["base"][key] = value
        else:
            data[key] = value
    return data


# ---- paths ---------------------------------------------------------------------------------------


def test_list_elements_by_position_or_name_and_entries_by_key() -> None:
    data = ServingSpec.parse(TINY).model_dump()
    a, b = copy.deepcopy(data), copy.deepcopy(data)
    set_path(a, "engines.0.count", 4)
    set_path(b, "engines.llm.count", 4)
    assert a == b and a["engines"][0]["count"] == 4
    set_path(a, "clients.chat.arrival.rate_rps", 3.0)
    set_path(a, "stages.think.rounds", 3)
    set_path(a, "memory_tiers.remote.bandwidth_GBps", 25.0)
    spec = ServingSpec.parse(a)
    assert spec.clients[0].arrival.rate_rps == 3.0
    assert spec.stages["think"].rounds == 3  # type: ignore[union-attr]
    assert spec.memory_tiers[0].bandwidth_GBps == 25.0


def test_switching_the_scheduler_kind_keeps_shared_settings_and_drops_the_rest() -> None:
    data = ServingSpec.parse(TINY).model_dump()
    set_path(data, "engines.llm.scheduler.max_num_seqs", 64)
    static = copy.deepcopy(data)
    set_path(static, "engines.llm.scheduler.name", "static")
    sch = ServingSpec.parse(static).engines[0].scheduler
    assert isinstance(sch, StaticSchedulerSpec)
    assert sch.max_num_seqs == 64 and sch.max_batch_size == 8  # kept; the static default
    assert "max_num_batched_tokens" not in static["engines"][0]["scheduler"]
    chunked = copy.deepcopy(data)
    set_path(chunked, "engines.llm.scheduler.name", "chunked_prefill")
    set_path(chunked, "engines.llm.scheduler.token_budget", 512)
    sch2 = ServingSpec.parse(chunked).engines[0].scheduler
    assert isinstance(sch2, ChunkedPrefillSchedulerSpec) and sch2.token_budget == 512


def test_point_applies_overrides_then_variant_then_axes() -> None:
    spec = ExperimentSpec.parse(_study(
        overrides={"clients.chat.num_requests": 7, "engines.llm.count": 4},
        variants={"static": {"engines.llm.scheduler.name": "static",
                             "engines.llm.scheduler.max_batch_size": 4},
                  "base": {}},
        sweep={"axes": {"variant": ["static", "base"],
                        "engines.llm.count": [1, 2]}}))
    points = expand_points(spec)
    assert [p.overrides for p in points] == [
        {"variant": "static", "engines.llm.count": 1}, {"variant": "static",
                                                         "engines.llm.count": 2},
        {"variant": "base", "engines.llm.count": 1}, {"variant": "base",
                                                       "engines.llm.count": 2}]
    serving, base_dir = resolve_serving(spec, points[0].overrides)
    assert base_dir is None  # inline system
    assert serving.clients[0].num_requests == 7  # base override
    assert serving.engines[0].count == 1  # the axis wins over the base override
    sch = serving.engines[0].scheduler
    assert isinstance(sch, StaticSchedulerSpec) and sch.max_batch_size == 4
    other, _ = resolve_serving(spec, points[3].overrides)
    assert isinstance(other.engines[0].scheduler, ContinuousSchedulerSpec)
    assert other.engines[0].count == 2


@pytest.mark.parametrize(("axes", "message"), [
    ({"engines.llm.schedular.name": ["static"]},
     "sweep[0].axes: unknown path 'engines.llm.schedular.name': 'engines.llm' of inline "
     "serving system has no field 'schedular'; allowed: name, device, count, topology, "
     "models, scheduler"),
    ({"engines.gpu.count": [1]},
     "unknown path 'engines.gpu.count': 'engines' of inline serving system has no element "
     "'gpu'; give a position 0-0 or a name: llm"),
    ({"stages.rag.top_k": [4]},
     "'stages' of inline serving system has no entry 'rag'; allowed: think"),
    ({"clients.chat.arrival": [1]}, "'clients.chat.arrival' of inline serving system is a "
                                    "group of fields; an axis sets one value: name one of: "
                                    "process, rate_rps"),
    ({"engines.llm.count.value": [1]}, "'engines.llm.count' of inline serving system is a "
                                       "value, not a group of fields"),
    ({"engines.llm.scheduler.token_budget": [512]},
     "'engines.llm.scheduler' of inline serving system has no field 'token_budget'; allowed: "
     "block_size_tokens, kv_capacity_tokens, max_num_seqs, name, max_num_batched_tokens, "
     "watermark_fraction, capacity_policy ('token_budget' is a field when name is "
     "'chunked_prefill': set 'engines.llm.scheduler.name' with it, in a variant or a zip "
     "block)"),
    ({"horizon_s.x": [1]}, "'horizon_s' is not set (null) in inline serving system, so it "
                           "has no field 'x'"),
    ({"variant": ["fast"]}, "sweep[0].axes.variant: unknown variant 'fast'; allowed: (none "
                            "defined in base.variants)"),
])
def test_invalid_serving_path_is_rejected_naming_it_and_the_allowed_names(
        axes: dict[str, list[Any]], message: str) -> None:
    with pytest.raises(SpecError) as exc:
        ExperimentSpec.parse(_study({"axes": axes}))
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_kind_and_its_fields_go_together_in_a_zip_block_not_a_product() -> None:
    axes = {"engines.llm.scheduler.name": ["static", "chunked_prefill"],
            "engines.llm.scheduler.token_budget": [512, 1024]}
    with pytest.raises(SpecError, match=r"\(engines.llm.scheduler.name=static\) has no field "
                                        r"'token_budget'"):
        ExperimentSpec.parse(_study({"mode": "product", "axes": axes}))
    zipped = {"engines.llm.scheduler.name": ["chunked_prefill", "chunked_prefill"],
              "engines.llm.scheduler.token_budget": [512, 1024]}
    spec = ExperimentSpec.parse(_study({"mode": "zip", "axes": zipped}))
    serving, _ = resolve_serving(spec, expand_points(spec)[1].overrides)
    sch = serving.engines[0].scheduler
    assert isinstance(sch, ChunkedPrefillSchedulerSpec) and sch.token_budget == 1024


@pytest.mark.parametrize(("data", "message"), [
    (_study(variants={"bad": {"engines.llm.count": 0}}),
     "base.variants.bad: ServingSpec.engines.0.count: Input should be greater than or equal "
     "to 1"),
    (_study(variants={"bad": {"engines.llm.scheduler.budget": 1}}),
     "base.variants.bad: unknown path: 'engines.llm.scheduler' of inline serving system has "
     "no field 'budget'"),
    (_study(overrides={"clients.web.num_requests": 5}),
     "base.overrides: unknown path: 'clients' of inline serving system has no element 'web'"),
    ({"name": "x", "kind": "serving", "base": {"serving": "no-such-system"}},
     "serving system 'no-such-system' not found: give a serving spec file, or one of the "
     "catalog's: serving/"),
    ({"name": "x", "kind": "serving", "base": {"model": "llama3-70b", "serving": TINY}},
     "base.model: a serving study's base has serving, overrides and variants"),
    ({"name": "x", "kind": "serving", "base": {}}, "base.serving: a serving study needs a "
                                                   "serving system"),
    ({"name": "x", "base": {"serving": TINY}}, "base.serving: only a study of kind: serving "
                                               "has a serving system"),
    (_study(metrics=["mfu"]), "unknown metric 'mfu'; allowed: ttft_mean_s, ttft_p50_s"),
    (_study(search={"objective": "mfu"}), "search: a serving study has no parallelism search"),
])
def test_invalid_serving_study_gives_one_line(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as exc:
        ExperimentSpec.parse(data)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_catalog_serving_systems_load_and_resolve_by_short_name() -> None:
    systems = catalog_serving_systems()
    assert len(systems) >= 4 and all(s.startswith("serving/") for s in systems)
    for ref in systems:
        data, base_dir = load_serving_data(ref)
        assert base_dir is not None and base_dir.name == "serving"
        ServingSpec.parse(data)
    short = systems[0].removeprefix("serving/").removesuffix(".yaml")
    assert load_serving_data(short)[0] == load_serving_data(systems[0])[0]


def test_study_file_finds_serving_systems_next_to_it_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    fast = copy.deepcopy(TINY)
    fast["name"] = "tiny-fast"
    fast["engines"][0]["models"][0]["step_cost"]["prefill_s_per_token"] = 0.0005
    (tmp_path / "systems").mkdir()
    (tmp_path / "systems" / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "systems" / "fast.yaml").write_text(yaml.safe_dump(fast))
    study = {"name": "two-systems", "kind": "serving",
             "base": {"serving": "systems/tiny.yaml",
                      "variants": {"fast": {"serving": "systems/fast.yaml"}, "tiny": {}}},
             "sweep": [{"axes": {"serving": ["systems/tiny.yaml", "systems/fast.yaml"]}},
                       {"axes": {"variant": ["fast", "tiny"]}}]}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    monkeypatch.chdir("/")
    spec = load_experiment(tmp_path / "study.yaml")
    assert spec.base.serving == str(tmp_path / "systems" / "tiny.yaml")
    rows = [evaluate_point(spec, p) for p in expand_points(spec)]
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert rows[1]["serving"] == str(tmp_path / "systems" / "fast.yaml")  # the axis value
    assert [r["serving"] for r in rows[2:]] == ["tiny-fast", "tiny"]  # the system's name
    for r in (rows[1], rows[2]):  # 100 tokens at 0.5 ms
        assert r["ttft_p50_s"] == pytest.approx(0.05)
    assert rows[3]["ttft_p50_s"] == pytest.approx(0.1)


# ---- rows ----------------------------------------------------------------------------------------


def test_rows_hold_hand_computed_latencies_throughput_and_cost() -> None:
    spec = ExperimentSpec.parse(_study({"axes": {"clients.chat.arrival.rate_rps": [1.0]}}))
    (point,) = expand_points(spec)
    row = evaluate_point(spec, point)
    assert list(row) == row_columns(spec)
    assert row["status"] == "ok" and row["reason"] == ""
    assert row["serving"] == "tiny" and row["num_gpus"] == 2
    assert row["clients.chat.arrival.rate_rps"] == 1.0
    # one request at a time (arrivals 1 s apart, 0.2 s of work each)
    ttft = 100 * PREFILL_S_PER_TOKEN  # the prefill step gives the first token
    e2e = ttft + 10 * DECODE_STEP_S  # then 10 decode steps
    for stat in ("p50", "p99", "max"):
        assert row[f"ttft_{stat}_s"] == pytest.approx(ttft)
        assert row[f"tpot_{stat}_s"] == pytest.approx(DECODE_STEP_S)
        assert row[f"e2e_{stat}_s"] == pytest.approx(e2e)
        assert row[f"queue_{stat}_s"] == pytest.approx(0.0, abs=1e-12)
    window = 4.0 + e2e  # first arrival at 0, last at 4 s
    assert row["window_s"] == pytest.approx(window)
    assert row["requests_per_s"] == pytest.approx(5 / window)
    assert row["output_tokens_per_s"] == pytest.approx(55 / window)
    assert row["output_tokens_per_s_per_gpu"] == pytest.approx(55 / window / 2)
    assert row["goodput_rps"] == pytest.approx(5 / window)  # TTFT 0.1 s <= 0.15 s
    assert row["goodput_fraction"] == 1.0
    assert row["gpu_utilization"] == pytest.approx(5 * e2e / (2 * window))
    assert row["requests_completed"] == 5 and row["requests_rejected"] == 0
    gpu = load_gpu("h100")
    assert gpu.price_usd_per_hour is not None and gpu.tdp_W is not None
    hours = window / 3600
    cost = 2 * gpu.price_usd_per_hour * hours + 2 * gpu.tdp_W / 1000 * hours * 0.0895
    assert row["cost_usd"] == pytest.approx(cost)
    assert row["cost_usd_per_mtok"] == pytest.approx(cost / 55 * 1e6)
    assert row["sim_wall_s"] > 0


def test_a_model_that_does_not_fit_is_infeasible_and_a_bad_value_fails() -> None:
    big = copy.deepcopy(TINY)
    big["engines"][0]["models"] = [{"model": "llama3-70b", "plan": {"tp": 1}}]
    big["clients"][0]["model"] = "llama3-70b"
    spec = ExperimentSpec.parse({"name": "x", "kind": "serving", "base": {"serving": big},
                                 "sweep": {"axes": {"engines.llm.count": [1]}}})
    row = evaluate_point(spec, expand_points(spec)[0])
    assert row["status"] == "infeasible"
    assert "engines.0.models.0" in row["reason"] and "KV cache" in row["reason"]
    assert all(math.isnan(row[c]) for c in SERVING_METRIC_COLUMNS)
    bad = ExperimentSpec.parse(_study({"axes": {"clients.chat.arrival.rate_rps": [-1.0]}}))
    row = evaluate_point(bad, expand_points(bad)[0])
    assert row["status"] == "failed" and row["serving"] == "tiny"
    assert row["reason"].startswith("SpecError: ") and "rate_rps" in row["reason"]
    assert math.isnan(row["ttft_p99_s"])


def test_all_requests_rejected_is_infeasible() -> None:
    spec = ExperimentSpec.parse(_study(
        {"axes": {"engines.llm.models.0.step_cost.kv_capacity_tokens": [32]}}))
    row = evaluate_point(spec, expand_points(spec)[0])
    assert row["status"] == "infeasible"
    assert row["reason"].startswith("all 5 requests rejected")


def test_training_studies_are_unchanged_by_the_serving_fields() -> None:
    spec = load_experiment("overlap")
    assert spec.kind == "training" and spec.base.serving is None
    dumped = spec.model_dump(mode="json")
    assert dumped["kind"] == "training"
    # the results hash covers what it covered before serving studies existed
    again = ExperimentSpec.parse({k: v for k, v in dumped.items() if k != "kind"})
    assert again.results_hash() == spec.results_hash()
    assert "plan.tp" in row_columns(spec) and "ttft_p99_s" not in row_columns(spec)


# ---- the studies -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SERVING_STUDIES)
def test_serving_study_validates_and_states_its_question(name: str) -> None:
    text = (STUDIES_DIR / f"{name}.yaml").read_text()
    assert text.startswith("#") and sum(ln.startswith("#") for ln in text.splitlines()) >= 5
    spec = load_experiment(name)
    assert spec.name == name and spec.kind == "serving" and spec.title
    assert len(spec.question.split()) >= 12
    assert isinstance(spec.base.serving, str) and spec.base.serving.startswith("serving/")
    # one to three figures per study, as each section of docs/experiments.md shows: none
    # would answer nothing, more than three is two questions in one study; and a smoke size
    assert 1 <= len(spec.plots) <= 3 and spec.smoke is not None
    assert spec.smoke_spec().num_points <= min(spec.num_points, 8)
    for plot in spec.plots:
        assert plot.y in SERVING_METRIC_COLUMNS


def _smoke(name: str, tmp_path: Path) -> Any:
    from codesign.experiments.runner import run_experiment
    from codesign.experiments.store import load_results

    spec = load_experiment(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a skipped plot fails the test
        summary = run_experiment(spec, tmp_path, jobs=1, smoke=True, progress=False)
    df = load_results(tmp_path)
    assert len(df) == spec.smoke_spec().num_points == summary.points_total
    assert (df["status"] == "ok").all(), df["reason"].tolist()
    assert (df["ttft_p99_s"] > 0).all() and (df["e2e_p50_s"] >= df["ttft_p50_s"]).all()
    assert (df["goodput_rps"] <= df["requests_per_s"] + 1e-9).all()
    assert (df["requests_completed"] == df["requests_completed"].iloc[0]).all()
    for plot in spec.plots:
        for ext in ("pdf", "png"):
            f = tmp_path / "figures" / f"{plot.file}.{ext}"
            assert f.is_file() and f.stat().st_size > 1000, f
    return df


@pytest.mark.parametrize("name", ["rag-batching", "disaggregated-vs-colocated"])
def test_serving_study_smoke_run_writes_rows_and_figures(name: str, tmp_path: Path) -> None:
    df = _smoke(name, tmp_path)
    assert df["variant"].nunique() == len(df)


def test_more_reasoning_rounds_never_lower_the_median_latency(tmp_path: Path) -> None:
    """Every extra round adds thinking tokens and a 0.5 s tool call to each request."""
    df = _smoke("reasoning-rounds", tmp_path).sort_values("stages.think.rounds")
    assert df["stages.think.rounds"].tolist() == [1, 4]
    e2e = df["e2e_p50_s"].tolist()
    assert e2e[1] >= e2e[0] + 3 * 0.5  # at least three more tool calls


def test_less_remote_bandwidth_never_lowers_p99_ttft(tmp_path: Path) -> None:
    """The same requests read the same prefixes; a slower pool only delays the reads."""
    df = _smoke("kv-tier", tmp_path)
    remote = df[df["variant"] == "remote memory"].sort_values(
        "memory_tiers.remote.bandwidth_GBps")
    assert remote["memory_tiers.remote.bandwidth_GBps"].tolist() == [6.25, 50.0]
    ttft = remote["ttft_p99_s"].tolist()
    assert ttft[0] >= ttft[1]
    # a 1.01 GB prefix alone takes 0.16 s at 6.25 GB/s: the median pays at least that more
    # than at 50 GB/s (20 ms)
    p50 = remote["ttft_p50_s"].tolist()
    assert p50[0] - p50[1] >= 1.0066e9 * (1 / 6.25e9 - 1 / 50e9) * 0.9
    dram = df[df["variant"] == "host DRAM"]
    assert float(dram["ttft_p50_s"].iloc[0]) <= p50[0]


def test_decode_tpot_moves_by_calls_times_hops_times_latency(tmp_path: Path) -> None:
    """Every decode step of Llama 3 70B pays each latency term of its collectives: TP16 over
    two nodes, (161 all-reduces × 2 + 1 all-gather) α across 3 switch hops; TP8 in a node,
    161 custom all-reduces × 2 NVLink crossings + 2 for the logits all-gather (counts in
    tests/test_decode_latency.py). The mean TPOT of a batch of one moves by that much."""
    df = _smoke("decode-latency", tmp_path)
    hop = df.dropna(subset=["engines.llm.topology.scale_out.hop_latency_us"]).sort_values(
        "engines.llm.topology.scale_out.hop_latency_us")
    assert hop["engines.llm.topology.scale_out.hop_latency_us"].tolist() == [0.1, 10.0]
    tpot = hop["tpot_mean_s"].tolist()
    assert tpot[1] - tpot[0] == pytest.approx((161 * 2 + 1) * 3 * 9.9e-6, rel=1e-6)
    up = df.dropna(subset=["engines.llm.topology.scale_up.latency_us"]).sort_values(
        "engines.llm.topology.scale_up.latency_us")
    assert up["engines.llm.topology.scale_up.latency_us"].tolist() == [0.5, 16.0]
    tpot = up["tpot_mean_s"].tolist()
    assert tpot[1] - tpot[0] == pytest.approx((161 * 2 + 2) * 15.5e-6, rel=1e-6)


def test_cli_lists_and_shows_serving_studies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in SERVING_STUDIES)
    assert "llama3-70b" not in out  # serving systems in experiments/serving/ are no studies
    assert main(["experiment", "show", "disaggregated-vs-colocated"]) == 0
    out = capsys.readouterr().out
    assert "base: serving system serving/llama3-70b-pd-8xh100.yaml" in out
    assert "variant disaggregated 6P:2D: engines.prefill.count=6 engines.decode.count=2" in out
    assert "points: 45 (smoke: 2)" in out
