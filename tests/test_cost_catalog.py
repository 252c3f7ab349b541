"""Every catalog accelerator is priced (issue 16 item 1): a cited purchase price, cloud price
per accelerator-hour and board power, so a training report and a serving run print finite
rental and owned costs; one new part's costs recomputed by hand."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from codesign.api import simulate
from codesign.report.training import format_table
from codesign.serving.sim import simulate_serving
from codesign.specs.catalog import catalog_entries, load_gpu
from codesign.specs.serving import ServingSpec

ACCELERATORS = sorted(d["name"] for _, d in catalog_entries("hardware")
                      if d.get("kind", "gpu") != "cpu")
PRICED = ("price_usd", "price_usd_per_hour", "tdp_W")


def test_the_catalog_lists_every_accelerator_of_the_issue() -> None:
    assert set(ACCELERATORS) == {
        "a100-40gb", "a100-80gb", "b200", "b300", "gaudi3", "gb200", "gb300", "h100-sxm",
        "h20", "h200", "h800", "mi250x", "mi300x", "mi325x", "mi355x", "tpu-v4", "tpu-v5e",
        "tpu-v5p", "tpu-v6e",
        # issue 12's second batch: parts of published training runs
        "a800-80gb", "gaudi2", "gh200", "gh200-144gb", "h100-nvl", "h100-pcie", "mi250",
        "tpu-v3", "v100-16gb", "v100-32gb",
        # the H100 variant of torchtitan's published benchmarks
        "h100-sxm-96gb",
        # parts of published runs the issue does not list: PCIe A100, MI210, Trainium 1/2,
        # TPU v7 (Ironwood)
        "a100-80gb-pcie", "mi210", "trainium", "trainium2", "tpu-v7"}


@pytest.mark.parametrize("name", ACCELERATORS)
def test_every_accelerator_has_cited_dated_prices(name: str) -> None:
    gpu = load_gpu(name)
    for field in PRICED:
        assert getattr(gpu, field) is not None and getattr(gpu, field) > 0, field
        cite = gpu.sources[field]
        if field != "tdp_W":  # prices are of their date
            assert re.search(r"20[12]\d", cite), f"{field}: no date in {cite!r}"
        if "rule" in cite:  # a derived figure says so
            assert "ESTIMATE" in cite, field


def _training(name: str) -> Any:
    return simulate(model="llama3-8b", gpu=name, num_gpus=16, tp=4, pp=1, zero_stage=3,
                    recompute="full", global_batch_size=64, micro_batch_size=1)


@pytest.mark.parametrize("name", ACCELERATORS)
def test_training_report_has_rental_and_owned_cost(name: str) -> None:
    r = _training(name)
    assert r.feasible, r.reason
    c = r.cost
    for key in ("usd_per_step", "usd_per_trillion_tokens", "tco_usd_per_step",
                "tco_usd_per_trillion_tokens", "tco_tokens_per_usd", "tco_tokens_per_J"):
        assert c[key] is not None and math.isfinite(c[key]) and c[key] > 0, key
    assert c["missing"] == [] and c["tco_missing"] == []
    text = format_table(r)
    assert "  cost: $" in text and "  owned cost: $" in text and "not known" not in text


def tiny_serving(device: str) -> ServingSpec:
    """One replica with fixed step costs: five 100-token prompts 1 s apart, each prefilled in
    0.1 s and decoded in 10 steps of 0.01 s: busy 1.0 s of a 4.2 s run."""
    return ServingSpec.parse({
        "kind": "serving", "name": "tiny", "seed": 1,
        "engines": [{"name": "llm", "device": device, "count": 1,
                     "models": [{"model": "llama3-8b", "step_cost": {
                         "kind": "fixed", "prefill_s_per_token": 0.001, "decode_step_s": 0.01,
                         "kv_capacity_tokens": 100_000}}],
                     "scheduler": {"name": "continuous", "max_num_batched_tokens": 4096}}],
        "clients": [{"name": "chat", "model": "llama3-8b",
                     "arrival": {"process": "constant", "rate_rps": 1.0}, "num_requests": 5,
                     "input_tokens": {"dist": "fixed", "value": 100},
                     "output_tokens": {"dist": "fixed", "value": 11}}]})


@pytest.mark.parametrize("name", ACCELERATORS)
def test_serving_run_has_rental_and_owned_cost(name: str) -> None:
    c = simulate_serving(tiny_serving(name)).metrics()["cost"]
    assert c["missing"] == [] and c["owned_missing"] == []
    for key in ("rental_usd", "usd_per_million_output_tokens", "owned_usd",
                "owned_usd_per_million_output_tokens", "output_tokens_per_J"):
        assert c[key] is not None and math.isfinite(c[key]) and c[key] > 0, key


# TPU v5p as the catalog prices it (hardware/tpu-v5p.yaml): Google Cloud list $4.20 per
# chip-hour; owned $5,500 x 4.20 / 2.70 = $8,556; 192 W x 459 / 275 = 320.5 W
V5P_HOURLY, V5P_PRICE, V5P_W = 4.20, 8556.0, 320.5


def test_tpu_v5p_figures_follow_their_stated_rules() -> None:
    gpu = load_gpu("tpu-v5p")
    assert gpu.price_usd_per_hour == V5P_HOURLY
    assert gpu.price_usd == pytest.approx(5500 * 4.20 / 2.70, abs=0.5) == V5P_PRICE
    assert gpu.tdp_W == pytest.approx(192 * 459 / 275, abs=0.05) == V5P_W


def test_tpu_v5p_training_rental_cost_by_hand() -> None:
    r = _training("tpu-v5p")
    hours = r.step_time_s / 3600
    kwh = 16 * V5P_W * 1.2 * hours / 1000  # PUE 1.2
    usd = 16 * V5P_HOURLY * hours + kwh * 0.0895  # $/kWh, EIA 2023 Virginia commercial
    assert r.cost["usd_per_step"] == pytest.approx(usd)
    assert r.cost["energy_kWh_per_step"] == pytest.approx(kwh)


def test_tpu_v5p_serving_costs_by_hand() -> None:
    c = simulate_serving(tiny_serving("tpu-v5p")).metrics()["cost"]
    sim_h = 4.2 / 3600  # last request arrives at 4 s and takes 0.2 s
    # rented: the chip-hour price plus board power (PUE 1) at the default electricity price
    assert c["rental_usd"] == pytest.approx(V5P_HOURLY * sim_h)
    assert c["energy_kWh"] == pytest.approx(V5P_W * sim_h / 1000)
    # owned: one chip and one host's share (economics defaults: $7,250 and 550 W per
    # accelerator, 8 per host), busy 1.0 of 4.2 s, idle draw 15% of TDP, PUE 1.2, equipment
    # over 5 years, facility $11,700 per kW of full power over 15 years, 8,766 h a year
    u = 1.0 / 4.2
    it_w = V5P_W * (0.15 + 0.85 * u) + 550
    full_w = V5P_W + 550
    rate = (V5P_PRICE + 7250) / (5 * 8766) + full_w / 1000 * 11_700 / (15 * 8766)
    kwh = it_w * 1.2 / 1000 * sim_h
    assert c["owned_capex_usd"] == pytest.approx(V5P_PRICE + 7250 + full_w / 1000 * 11_700)
    assert c["owned_energy_kWh"] == pytest.approx(kwh)
    assert c["owned_usd"] == pytest.approx(rate * sim_h + kwh * 0.0895)
