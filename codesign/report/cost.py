"""What a run costs in money and energy, two ways.

**Rental** (:func:`device_cost`, :func:`training_cost`; serving metrics too): devices rented
per hour (``price_usd_per_hour``, catalog, cited per GPU) plus their provisioned board power
(``tdp_W``) for the whole duration times the facility's PUE, at an electricity price.

**Owned** (:func:`training_tco`): the total cost of ownership of the data center that runs
the job: every component the topology is built from (:func:`codesign.network.inventory.
inventory`: accelerators, hosts, NICs, switch ports, transceivers, cables, OCS ports) priced
by the GPU's ``price_usd`` and the topology's ``economics`` and amortized over its
``amortization_years``, plus the energy: accelerators draw ``idle + (TDP - idle) x u`` with
``u`` the fraction of the step they compute, everything else its fixed power, all times the
PUE; and the facility (building, power and cooling plant) sized for the equipment at full
power and amortized over its own, longer life. Defaults: :mod:`codesign.specs.economics`
(cited there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codesign.network.inventory import REFERENCE_PORT_GBPS, Inventory, inventory
from codesign.specs.economics import DEFAULT_ELECTRICITY_USD_PER_KWH, DEFAULT_PUE, Economics
from codesign.specs.gpu import GpuSpec
from codesign.specs.topology import FullFlatTopology, TwoTierTopology

#: hours in an average year (365.25 days)
HOURS_PER_YEAR = 8766.0


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


def capex_by_part(inv: Inventory, gpu: GpuSpec, econ: Economics) -> dict[str, float | None]:
    """Purchase price of each part of ``inv`` (USD; accelerators ``None`` without a price)."""
    rate = inv.port_Gbps / REFERENCE_PORT_GBPS
    return {
        "accelerators": inv.gpus * gpu.price_usd if gpu.price_usd is not None else None,
        "hosts": inv.gpus * econ.host_usd_per_gpu,
        "nics": inv.nics * econ.nic_usd_per_400G * rate,
        "switches": inv.switch_ports * econ.switch_usd_per_400G_port * rate,
        "transceivers": inv.transceivers * econ.transceiver_usd_per_400G * rate,
        "cables": inv.cables * econ.cable_usd,
        "ocs": inv.ocs_ports * econ.ocs_usd_per_port,
    }


def power_by_part(inv: Inventory, gpu: GpuSpec, econ: Economics,
                  utilization: float) -> dict[str, float | None]:
    """IT power of each part of ``inv`` (W) when the accelerators compute a fraction
    ``utilization`` of the time (accelerators ``None`` without a TDP)."""
    rate = inv.port_Gbps / REFERENCE_PORT_GBPS
    u = min(max(utilization, 0.0), 1.0)
    idle = econ.gpu_idle_fraction
    return {
        "accelerators": (inv.gpus * gpu.tdp_W * (idle + (1.0 - idle) * u)
                         if gpu.tdp_W is not None else None),
        "hosts": inv.gpus * econ.host_W_per_gpu,
        "nics": inv.nics * econ.nic_W_per_400G * rate,
        "switches": inv.switch_ports * econ.switch_W_per_400G_port * rate,
        "transceivers": inv.transceivers * econ.transceiver_W_per_400G * rate,
        "ocs": inv.ocs_ports * econ.ocs_W_per_port,
    }


@dataclass(frozen=True)
class OwnedCost:
    """Owned cost of equipment over ``seconds`` (module docstring): capital by part (USD,
    the facility sized for the equipment at full power), IT power by part (W) at the given
    utilization, the amortized rate (USD/h) and the energy (kWh, facility) and its price;
    the totals are ``None`` where the accelerator lacks a price or a TDP."""

    capex_by_part: dict[str, float | None]
    power_W_by_part: dict[str, float | None]
    capex_usd: float | None
    it_power_W: float | None
    facility_power_kW: float | None
    amortized_usd_per_hour: float | None
    energy_kWh: float | None
    usd: float | None


def owned_cost(inv: Inventory, gpu: GpuSpec, econ: Economics, utilization: float,
               seconds: float) -> OwnedCost:
    """What owning ``inv`` costs over ``seconds`` when its accelerators compute a fraction
    ``utilization`` of the time."""
    capex = capex_by_part(inv, gpu, econ)
    power = power_by_part(inv, gpu, econ, utilization)
    full = power_by_part(inv, gpu, econ, 1.0)
    it_W = None if power["accelerators"] is None else sum(
        v for v in power.values() if v is not None)
    full_W = None if full["accelerators"] is None else sum(
        v for v in full.values() if v is not None)
    capex["facility"] = full_W / 1000.0 * econ.facility_usd_per_kW if full_W else None
    equipment = None if capex["accelerators"] is None else sum(
        v for k, v in capex.items() if v is not None and k != "facility")
    rate = None
    if equipment is not None and capex["facility"] is not None:
        rate = (equipment / (econ.amortization_years * HOURS_PER_YEAR)
                + capex["facility"] / (econ.facility_amortization_years * HOURS_PER_YEAR))
    total = (equipment + capex["facility"]
             if equipment is not None and capex["facility"] is not None else None)
    facility_kW = it_W * econ.pue / 1000.0 if it_W is not None else None
    hours = seconds / 3600.0
    kwh = facility_kW * hours if facility_kW is not None else None
    usd = (rate * hours + kwh * econ.electricity_usd_per_kWh
           if rate is not None and kwh is not None else None)
    return OwnedCost(capex, power, total, it_W, facility_kW, rate, kwh, usd)


def training_tco(topology: TwoTierTopology | FullFlatTopology, gpu: GpuSpec, num_gpus: int,
                 step_time_s: float, tokens_per_step: float, utilization: float
                 ) -> dict[str, Any]:
    """Owned cost of a training step (module docstring): capital and power by part, the
    amortized rate, and per step, per trillion tokens, tokens per USD and per joule;
    ``None`` where the accelerator lacks ``price_usd`` or ``tdp_W`` (listed in
    ``tco_missing``)."""
    econ = topology.economics
    inv = inventory(topology, num_gpus)
    c = owned_cost(inv, gpu, econ, utilization, step_time_s)
    missing = [n for n, v in (("price_usd", gpu.price_usd), ("tdp_W", gpu.tdp_W)) if v is None]
    usd, kwh = c.usd, c.energy_kWh
    per_t = 1e12 / tokens_per_step if tokens_per_step else None
    return {
        "tco_capex_usd": c.capex_usd, "tco_capex_usd_by_part": c.capex_by_part,
        "tco_power_W_by_part": c.power_W_by_part,
        "tco_it_power_kW": c.it_power_W / 1000.0 if c.it_power_W else None,
        "tco_facility_power_kW": c.facility_power_kW,
        "tco_amortized_usd_per_hour": c.amortized_usd_per_hour,
        "tco_usd_per_step": usd, "tco_energy_kWh_per_step": kwh,
        "tco_usd_per_trillion_tokens": usd * per_t if usd is not None and per_t else None,
        "tco_MWh_per_trillion_tokens": (kwh * per_t / 1000.0
                                        if kwh is not None and per_t else None),
        "tco_tokens_per_usd": tokens_per_step / usd if usd else None,
        "tco_tokens_per_J": tokens_per_step / (kwh * 3.6e6) if kwh else None,
        "gpu_utilization": min(max(utilization, 0.0), 1.0),
        "inventory": inv.as_dict(), "inventory_notes": list(inv.notes),
        "amortization_years": econ.amortization_years, "tco_missing": missing,
    }


__all__ = ["DEFAULT_ELECTRICITY_USD_PER_KWH", "DEFAULT_PUE", "HOURS_PER_YEAR", "DeviceCost",
           "OwnedCost", "capex_by_part", "device_cost", "owned_cost", "power_by_part",
           "training_cost", "training_tco"]
