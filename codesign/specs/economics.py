"""What a data center's parts cost and draw, and how a site prices them: the ``economics`` of a
topology (``TwoTierTopology.economics``, ``FullFlatTopology.economics``).

Prices are purchase prices (capital expenditure) in USD, amortized over
``amortization_years``; power is watts at the wall of the IT equipment, multiplied by ``pue``
for the facility. Network parts are priced per 400 Gb/s of port rate and scaled linearly with
the rate a topology uses (an ASSUMPTION: within one generation, price and power per bit are
roughly flat across 400G and 800G parts: 800G modules list at $1,100-1,400 against $600-800
for 400G, about $650 per 400 Gb/s either way, luxoptx.com "800G Optical Module Cost
Analysis", 2025). Every default below cites its source in its field's description; they are
estimates of their date, meant to be swept (``topology.economics.<field>`` in a study).

The accelerator itself is priced by its catalog entry (``GpuSpec.price_usd``, ``tdp_W``).
"""

from __future__ import annotations

from pydantic import Field

from codesign.specs.base import Spec

#: electricity price default, USD per kWh: EIA Electric Power Annual 2023 (released
#: 2024-10-17), average revenue per kWh to commercial customers in Virginia, the largest
#: US data-center market: 8.95 cents/kWh (eia.gov/electricity/annual/secrev-map.php); the
#: serving cost model uses the same figure
DEFAULT_ELECTRICITY_USD_PER_KWH = 0.0895
#: power usage effectiveness of an AI data center: Uptime Institute Global Data Center Survey
#: 2024 reports an industry average of 1.56; hyperscale fleets report 1.08-1.2 (Google 2024
#: Environmental Report: fleet-wide trailing-twelve-month PUE 1.10); 1.2 is taken for a new
#: GPU data center (an assumption between the two)
DEFAULT_PUE = 1.2


class Economics(Spec):
    """Component prices and powers, and the site's settings (see the module docstring)."""

    amortization_years: float = Field(
        default=5.0, gt=0,
        description="years over which capital is spread. Hyperscalers depreciate servers over "
                    "5-6 years (Microsoft FY2023 10-K: 6 years; Meta 2025 10-K: 5.5 years); "
                    "5 is taken for accelerators, which age faster")
    electricity_usd_per_kWh: float = Field(
        default=DEFAULT_ELECTRICITY_USD_PER_KWH, ge=0,
        description="electricity price, USD/kWh (EIA Electric Power Annual 2023: Virginia "
                    "commercial average, the largest US data-center market)")
    pue: float = Field(
        default=DEFAULT_PUE, ge=1,
        description="facility power / IT power (Uptime Institute 2024 survey: industry average "
                    "1.56; Google 2024 Environmental Report: fleet 1.10; 1.2 an ASSUMPTION for "
                    "a new GPU data center)")
    gpu_idle_fraction: float = Field(
        default=0.15, ge=0, le=1,
        description="accelerator draw when idle, as a fraction of its TDP; draw grows linearly "
                    "to TDP with the fraction of the step it computes. ASSUMPTION: an idle H100 "
                    "SXM reads about 70-120 W of its 700 W in nvidia-smi")
    host_usd_per_gpu: float = Field(
        default=7_250.0, ge=0,
        description="server share per accelerator (CPUs, memory, storage, chassis, scale-up "
                    "switches) without the NICs: an 8x H100 node with 8x 400G NICs quoted "
                    "$310,000 (Thinkmate quotation, Aug 2024, in tech-talk-cto.com 'H100 "
                    "Freakonomics'), less 8 H100 at the catalog's $30,000 and 8 NICs at "
                    "$1,500, over 8 GPUs")
    host_W_per_gpu: float = Field(
        default=550.0, ge=0,
        description="server power per accelerator without the accelerators and NICs: DGX H100 "
                    "system power 10.2 kW max (NVIDIA DGX H100 datasheet) less 8 x 700 W GPUs "
                    "and 8 NICs, over 8 GPUs")
    nic_usd_per_400G: float = Field(
        default=1_500.0, ge=0,
        description="scale-out NIC per 400 Gb/s port (ConnectX-7 class). ESTIMATE: street "
                    "prices of single-port 400G ConnectX-7 cards, 2024")
    nic_W_per_400G: float = Field(
        default=25.0, ge=0,
        description="NIC power per 400 Gb/s port. ESTIMATE: ConnectX-7 400G adapters are "
                    "specified at about 20-25 W typical")
    switch_usd_per_400G_port: float = Field(
        default=562.5, ge=0,
        description="packet switch price per 400 Gb/s port: a 64-port 400G InfiniBand switch "
                    "at $36,000 (FS.com, Aug 2024; NVIDIA's own about $50,000), in "
                    "tech-talk-cto.com 'H100 Freakonomics' spreadsheet")
    switch_W_per_400G_port: float = Field(
        default=11.7, ge=0,
        description="switch power per 400 Gb/s port without optics. ESTIMATE: a 25.6 Tb/s "
                    "Quantum-2 QM9700 draws about 750 W typical with passive cables, over its "
                    "64 ports")
    switch_capacity_Tbps: float = Field(
        default=25.6, gt=0,
        description="switch capacity: ports per switch = capacity / port rate (the priced "
                    "switch, Quantum-2 QM9700: 64 x 400 Gb/s = 25.6 Tb/s; Spectrum-4 and "
                    "Quantum-X800 class switches: 51.2 and 115.2 Tb/s)")
    transceiver_usd_per_400G: float = Field(
        default=700.0, ge=0,
        description="optical transceiver per 400 Gb/s end: 400G QSFP-DD $600-800, 800G OSFP "
                    "DR8 $1,100-1,400 (luxoptx.com '800G Optical Module Cost Analysis', 2025)")
    transceiver_W_per_400G: float = Field(
        default=8.5, ge=0,
        description="transceiver power per 400 Gb/s end: NVIDIA MMA4Z00-NS400 400G OSFP 8 W "
                    "typical; the switch-side twin-port 2x400G OSFP is a 17 W class-8 module "
                    "(NVIDIA QM97XX user manual)")
    cable_usd: float = Field(
        default=100.0, ge=0,
        description="fiber per link: MPO trunk cables $50-150 (luxoptx.com, 2025)")
    optical_endpoint_links: bool = Field(
        default=True,
        description="NIC-to-leaf links are optical (two transceivers); False: copper (DAC), "
                    "no transceivers (DGX SuperPOD reference architectures use optics)")
    ocs_usd_per_port: float = Field(
        default=1_000.0, ge=0,
        description="optical circuit switch per port (FullFlat, torus cube faces). ESTIMATE: "
                    "no public list price; a MEMS OCS port is priced near a packet-switch port "
                    "plus its transceiver")
    ocs_W_per_port: float = Field(
        default=0.5, ge=0,
        description="OCS power per port: a MEMS OCS draws about 100 W for 136 ports (Jouppi "
                    "et al. 2023, TPU v4: 'Palomar' OCS uses mirrors, no O-E-O conversion)")
    gpus_per_host: int = Field(
        default=8, ge=1,
        description="accelerators per server (HGX/DGX nodes: 8; a GB200 NVL72 compute tray "
                    "holds 4: set it per topology)")
    facility_usd_per_kW: float = Field(
        default=11_700.0, ge=0,
        description="data-center building, power and cooling plant per kW of IT load: about "
                    "$11.7M per MW in US markets (Cushman & Wakefield, Data Center Development "
                    "Cost Guide 2025; ESTIMATE of its date), sized for the equipment at full "
                    "power")
    facility_amortization_years: float = Field(
        default=15.0, gt=0,
        description="years over which the facility is spread (ASSUMPTION: buildings and "
                    "their electrical and cooling plant are depreciated over 15-20 years)")


__all__ = ["DEFAULT_ELECTRICITY_USD_PER_KWH", "DEFAULT_PUE", "Economics"]
