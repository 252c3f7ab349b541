"""Owned-data-center cost and power (issue 16 item 1): component counts by hand for a fat
tree, a rail-optimized fabric, a tapered fabric and FullFlat, and the TCO of a step
recomputed from those counts and the cited economics."""

from __future__ import annotations

import pytest

from codesign.api import simulate
from codesign.network.inventory import fat_tree, fat_tree_tiers, inventory
from codesign.report.cost import HOURS_PER_YEAR, training_tco
from codesign.report.metrics import compute_fraction
from codesign.specs.catalog import load_gpu, load_topology
from codesign.specs.economics import Economics
from codesign.specs.topology import FullFlatTopology, ScaleOutSpec, ScaleUpSpec, TwoTierTopology


def two_tier(nic_gbps: float = 400.0, rail: bool = False, oversub: float = 1.0,
             bisection: int | None = None, **econ: object) -> TwoTierTopology:
    return TwoTierTopology(
        name="t", scale_up=ScaleUpSpec(domain_size=8, bandwidth_GBps=450, latency_us=2.0),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=nic_gbps, latency_us=4.0, switch_tiers=2,
                               oversubscription=oversub, full_bisection_gpus=bisection,
                               rail_optimized=rail),
        economics=Economics(**econ))  # type: ignore[arg-type]


def test_fat_tree_tiers_hold_two_times_half_radix_to_the_t() -> None:
    # 64-port switches: 1 tier holds 64, 2 tiers 2*32^2 = 2,048, 3 tiers 2*32^3 = 65,536
    assert [fat_tree_tiers(n, 64) for n in (64, 65, 2048, 2049, 65536, 65537)] == \
        [1, 2, 2, 3, 3, 4]


def test_two_tier_fat_tree_counted_by_hand() -> None:
    # 1,024 GPUs, one 400G NIC each, 64-port switches (25.6 Tb/s): 32 leaves (32 down, 32 up)
    # and 16 spines; links 1,024 NIC-leaf + 1,024 leaf-spine, all optical: 4,096
    # transceivers. The 'H100 Freakonomics' spreadsheet (tech-talk-cto.com, Aug 2024) counts
    # 48 switches for 1,024 H100s and 5,120 for 65,536: the same rule.
    inv = inventory(two_tier(), 1024)
    assert inv.switches == (32, 16) and inv.switch_ports == 48 * 64
    assert (inv.nics, inv.hosts) == (1024, 128)
    assert (inv.optical_links, inv.transceivers, inv.cables) == (2048, 4096, 2048)
    assert sum(inventory(two_tier(), 65536).switches) == 2048 + 2048 + 1024


def test_rail_optimized_fabric_has_the_fat_tree_s_counts() -> None:
    # rails regroup the leaves (one per local rank per scalable unit); they remove none
    assert inventory(two_tier(rail=True), 1024) == inventory(two_tier(), 1024)


def test_taper_and_port_rate_change_the_counts() -> None:
    # 2:1 taper above 512 GPUs: 512 leaf-spine links, 8 spines
    tapered = inventory(two_tier(oversub=2.0, bisection=512), 1024)
    assert tapered.switches == (32, 8) and tapered.optical_links == 1024 + 512
    # 800G NICs on 25.6 Tb/s switches: 32 ports, 2 tiers hold 512 -> 3 tiers for 1,024
    fast = inventory(two_tier(nic_gbps=800), 1024)
    assert fast.switches == (64, 64, 32) and fast.port_Gbps == 800
    # copper NIC-to-leaf links: no transceivers on them
    dac = inventory(two_tier(optical_endpoint_links=False), 1024)
    assert dac.transceivers == 2 * 1024 and dac.electrical_links == 1024
    assert fat_tree(100, 64, 1) == ((2,), 0)


def test_fullflat_and_single_domain_counts() -> None:
    ff = FullFlatTopology(name="ff", bandwidth_GBps=900, latency_us=2)
    inv = inventory(ff, 1024)  # 900 GB/s = 7,200 Gb/s = 18 ports of 400G per GPU
    assert (inv.ocs_ports, inv.transceivers, inv.optical_links) == (18 * 1024,) * 3
    assert inv.switches == () and inv.nics == 0
    one = inventory(two_tier(), 8)
    assert (one.nics, one.switches, one.transceivers) == (0, (), 0)


def test_tco_of_a_step_recomputed_from_the_counts() -> None:
    topo, gpu = two_tier(), load_gpu("h100")
    e = topo.economics
    c = training_tco(topo, gpu, 1024, 10.0, 4e6, 0.8)
    equipment = (1024 * 30_000 + 1024 * e.host_usd_per_gpu + 1024 * e.nic_usd_per_400G
                 + 48 * 64 * e.switch_usd_per_400G_port + 4096 * e.transceiver_usd_per_400G
                 + 2048 * e.cable_usd)
    fixed_W = (1024 * e.host_W_per_gpu + 1024 * e.nic_W_per_400G
               + 3072 * e.switch_W_per_400G_port + 4096 * e.transceiver_W_per_400G)
    facility = (1024 * 700 + fixed_W) / 1e3 * e.facility_usd_per_kW  # sized at full power
    assert c["tco_capex_usd_by_part"]["facility"] == pytest.approx(facility)
    assert c["tco_capex_usd"] == pytest.approx(equipment + facility)
    it_W = 1024 * 700 * (0.15 + 0.85 * 0.8) + fixed_W
    assert c["tco_it_power_kW"] == pytest.approx(it_W / 1e3)
    kwh = it_W * e.pue / 1e3 * 10 / 3600
    rate = (equipment / (e.amortization_years * HOURS_PER_YEAR)
            + facility / (e.facility_amortization_years * HOURS_PER_YEAR))
    usd = rate * 10 / 3600 + kwh * e.electricity_usd_per_kWh
    assert c["tco_amortized_usd_per_hour"] == pytest.approx(rate)
    assert c["tco_energy_kWh_per_step"] == pytest.approx(kwh)
    assert c["tco_usd_per_step"] == pytest.approx(usd)
    assert c["tco_usd_per_trillion_tokens"] == pytest.approx(usd * 1e12 / 4e6)
    assert c["tco_tokens_per_J"] == pytest.approx(4e6 / (kwh * 3.6e6))


def test_serving_owned_cost_per_request_from_the_same_parts() -> None:
    from codesign.serving.metrics import _owned_cost
    from codesign.specs.economics import Economics as Econ

    class Inst:  # one replica of 8 H100 busy half the time
        name, gpus, busy_s = "r0", 8, 50.0

    class Spec:
        electricity_usd_per_kWh = 0.1

    class Result:
        def __init__(self) -> None:
            self.instances = [Inst()]
            self.gpus = {"r0": load_gpu("h100")}
            self.spec = Spec()

    out = _owned_cost(Result(), 100.0, 10_000, 30_000, 40)  # type: ignore[arg-type]
    e = Econ(electricity_usd_per_kWh=0.1)
    equipment = 8 * (30_000 + e.host_usd_per_gpu)
    facility = 8 * (700 + e.host_W_per_gpu) / 1e3 * e.facility_usd_per_kW
    it_W = 8 * 700 * (0.15 + 0.85 * 0.5) + 8 * e.host_W_per_gpu
    kwh = it_W * e.pue / 1e3 * 100 / 3600
    usd = (equipment / (5 * HOURS_PER_YEAR) + facility / (15 * HOURS_PER_YEAR)) * 100 / 3600 \
        + kwh * 0.1
    assert out["owned_usd"] == pytest.approx(usd)
    assert out["owned_usd_per_request"] == pytest.approx(usd / 40)
    assert out["owned_usd_per_million_output_tokens"] == pytest.approx(usd / 10_000 * 1e6)
    assert out["output_tokens_per_J"] == pytest.approx(10_000 / (kwh * 3.6e6))


def test_no_price_no_tco_but_the_counts() -> None:
    gpu = load_gpu("h100").model_copy(update={"price_usd": None})
    c = training_tco(two_tier(), gpu, 64, 1.0, 1e6, 0.5)
    assert c["tco_usd_per_step"] is None and c["tco_missing"] == ["price_usd"]
    assert c["inventory"]["nics"] == 64


def test_reports_carry_the_tco_with_the_simulated_utilization() -> None:
    r = simulate()
    assert r.step_time_s is not None
    u = compute_fraction(r.breakdown_s, r.step_time_s)
    assert 0.3 < u <= 1.0 and r.cost["gpu_utilization"] == pytest.approx(u)
    assert r.cost["inventory"]["switches"] == 48  # dgx-h100, 1,024 GPUs, 64-port switches
    assert r.cost["tco_tokens_per_usd"] > 0


def test_catalog_topologies_take_the_cited_defaults() -> None:
    assert load_topology("dgx-h100").economics == Economics()
    assert load_topology("fullflat-gb200").economics.pue == 1.2
