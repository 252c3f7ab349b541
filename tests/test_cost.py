"""Money and energy of a training step (issue 16 item 1, first part), by hand."""

from __future__ import annotations

import pytest

from codesign.api import simulate
from codesign.report.cost import DEFAULT_PUE, device_cost, training_cost
from codesign.specs.catalog import load_gpu
from codesign.specs.serving import DEFAULT_ELECTRICITY_USD_PER_KWH


def test_device_cost_closed_form() -> None:
    c = device_cost(8, 4.0, 700.0, 1800.0, electricity_usd_per_kWh=0.1, pue=1.5)
    assert c.rental_usd == pytest.approx(8 * 4.0 * 0.5)
    assert c.energy_kWh == pytest.approx(8 * 0.7 * 1.5 * 0.5)
    assert c.energy_usd == pytest.approx(8 * 0.7 * 1.5 * 0.5 * 0.1)
    assert c.total_usd == pytest.approx(16.0 + 0.42)
    missing = device_cost(8, None, 700.0, 1800.0)
    assert missing.rental_usd is None and missing.total_usd is None
    assert missing.energy_kWh is not None


def test_training_report_prices_the_step() -> None:
    r = simulate()  # the default run: 1,024 H100 SXM
    gpu = load_gpu("h100")
    assert r.step_time_s is not None and r.tokens_per_step is not None
    hours = r.step_time_s / 3600
    kwh = 1024 * gpu.tdp_W * DEFAULT_PUE * hours / 1000  # type: ignore[operator]
    usd = 1024 * gpu.price_usd_per_hour * hours + kwh * DEFAULT_ELECTRICITY_USD_PER_KWH  # type: ignore[operator]
    c = r.cost
    assert c["energy_kWh_per_step"] == pytest.approx(kwh)
    assert c["usd_per_step"] == pytest.approx(usd)
    assert c["avg_power_kW"] == pytest.approx(1024 * 0.7 * DEFAULT_PUE)
    assert c["usd_per_trillion_tokens"] == pytest.approx(usd * 1e12 / r.tokens_per_step)
    assert c["MWh_per_trillion_tokens"] == pytest.approx(kwh * 1e12 / r.tokens_per_step / 1e3)
    assert c["tokens_per_kJ"] == pytest.approx(r.tokens_per_step / (kwh * 3600))


def test_a_gpu_without_a_price_says_so() -> None:
    c = training_cost(8, None, 400.0, 1.0, 1e6)
    assert c["usd_per_step"] is None and c["missing"] == ["price_usd_per_hour"]
    assert c["energy_kWh_per_step"] == pytest.approx(8 * 0.4 * DEFAULT_PUE / 3600)
