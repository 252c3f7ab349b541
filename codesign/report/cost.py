"""What a run costs in money and energy: devices rented (or amortized) per hour and their
board power, over a duration. One function serves training reports and serving metrics.

Power is provisioned board power (``tdp_W``) for the whole duration, times the facility's
power usage effectiveness (PUE) for cooling and distribution; money is the devices'
``price_usd_per_hour`` (catalog, cited per GPU) plus the energy at an electricity price.
Defaults: :data:`codesign.specs.serving.DEFAULT_ELECTRICITY_USD_PER_KWH` (EIA, cited there)
and :data:`DEFAULT_PUE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codesign.specs.serving import DEFAULT_ELECTRICITY_USD_PER_KWH

#: power usage effectiveness of an AI data center: Uptime Institute Global Data Center Survey
#: 2024 reports an industry average of 1.56; hyperscale fleets report 1.08-1.2 (Google 2024
#: Environmental Report: fleet-wide trailing-twelve-month PUE 1.10); 1.2 is taken for a new
#: GPU data center (an assumption between the two)
DEFAULT_PUE = 1.2


@dataclass(frozen=True)
class DeviceCost:
    """Money and energy of ``devices`` devices over ``seconds`` (USD, kWh)."""

    rental_usd: float | None  # None: the device has no price
    energy_kWh: float | None  # None: the device has no tdp_W
    energy_usd: float | None
    total_usd: float | None


def device_cost(devices: int, price_usd_per_hour: float | None, tdp_W: float | None,
                seconds: float, electricity_usd_per_kWh: float = DEFAULT_ELECTRICITY_USD_PER_KWH,
                pue: float = DEFAULT_PUE) -> DeviceCost:
    """Rental ``devices × price × hours``, energy ``devices × tdp × PUE × hours`` and its
    price; a missing price or power leaves its part (and the total) ``None``."""
    hours = seconds / 3600.0
    rent = devices * price_usd_per_hour * hours if price_usd_per_hour is not None else None
    kwh = devices * tdp_W * pue * hours / 1000.0 if tdp_W is not None else None
    energy_usd = kwh * electricity_usd_per_kWh if kwh is not None else None
    total = rent + energy_usd if rent is not None and energy_usd is not None else None
    return DeviceCost(rent, kwh, energy_usd, total)


def training_cost(num_gpus: int, price_usd_per_hour: float | None, tdp_W: float | None,
                  step_time_s: float, tokens_per_step: float,
                  electricity_usd_per_kWh: float = DEFAULT_ELECTRICITY_USD_PER_KWH,
                  pue: float = DEFAULT_PUE) -> dict[str, Any]:
    """Per step and per token: USD, kWh, average facility power (kW), USD and MWh per
    trillion tokens, tokens per USD and per kJ; ``None`` where the GPU lacks a price or
    power (listed under ``missing``)."""
    c = device_cost(num_gpus, price_usd_per_hour, tdp_W, step_time_s,
                    electricity_usd_per_kWh, pue)
    per_t = 1e12 / tokens_per_step if tokens_per_step else None
    kwh, usd = c.energy_kWh, c.total_usd
    return {
        "usd_per_step": usd,
        "energy_kWh_per_step": kwh,
        "avg_power_kW": num_gpus * tdp_W * pue / 1000.0 if tdp_W is not None else None,
        "usd_per_trillion_tokens": usd * per_t if usd is not None and per_t else None,
        "MWh_per_trillion_tokens": kwh * per_t / 1000.0 if kwh is not None and per_t else None,
        "tokens_per_usd": tokens_per_step / usd if usd else None,
        "tokens_per_kJ": tokens_per_step / (kwh * 3600.0) if kwh else None,
        "electricity_usd_per_kWh": electricity_usd_per_kWh, "pue": pue,
        "missing": [name for name, v in (("price_usd_per_hour", price_usd_per_hour),
                                         ("tdp_W", tdp_W)) if v is None],
    }


__all__ = ["DEFAULT_ELECTRICITY_USD_PER_KWH", "DEFAULT_PUE", "DeviceCost", "device_cost",
           "training_cost"]
