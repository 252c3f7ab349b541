"""What a network is built from: component counts of a topology at a GPU count.

Counted from the same topology spec the network model prices (pure functions, no prices;
:mod:`codesign.report.cost` prices them with the topology's ``economics``).

**Two-tier.** Every GPU has one scale-out NIC port at ``nic_bandwidth_Gbps``. The fat tree
is a folded Clos of switches with ``R = switch_capacity_Tbps / port rate`` ports, non-blocking
up to its top tier: one switch holds ``R`` GPUs, two tiers ``R²/2``, three ``R³/4``, and the
job gets the fewest tiers ``t`` that hold it (``fat_tree_tiers``). Every tier below the top
has ``N/(R/2)`` switches (half their ports down, half up) and the top ``N/R`` (all ports
down); each of the ``t - 1`` tier boundaries carries ``N`` links, the top one
``N / oversubscription`` when the fabric is tapered above ``full_bisection_gpus`` (the top
tier then shrinks in proportion). A rail-optimized fabric has the same counts (its leaves are
grouped by rail, not removed). Links: ``N`` GPU-to-leaf plus the inter-switch ones; every
link is one cable; optical links have two transceivers (GPU-to-leaf ones only when
``economics.optical_endpoint_links``). A single-domain job (every GPU in one scale-up
domain) needs no scale-out network. Hosts: ``N / gpus_per_host``.

**Torus domain.** No switches: ``k`` links per chip (two per dimension, each shared by two
chips), electrical (cables, no transceivers) — TPU v4 joins its 4x4x4 cubes through optical
circuit switches, which this count leaves out.

**FullFlat.** Every GPU's ``bandwidth_GBps`` leaves it as optical ports at the economics'
reference rate of 400 Gb/s (co-packaged optics: one transceiver per GPU port) into one tier
of optical circuit switch ports, one per GPU port.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from codesign.specs.topology import FullFlatTopology, TwoTierTopology

#: the port rate component prices are quoted per, Gb/s
REFERENCE_PORT_GBPS = 400.0


@dataclass(frozen=True)
class Inventory:
    """Component counts of a network for ``gpus`` accelerators.

    ``port_Gbps``: the rate of the scale-out (or FullFlat) ports counted; ``switches``: packet
    switches per tier, leaf first; ``switch_ports``: ports of those switches (provisioned);
    ``optical_links``/``electrical_links``: cables of each kind; ``transceivers``: optical
    ends; ``ocs_ports``: optical circuit switch ports."""

    gpus: int
    hosts: int
    nics: int = 0
    port_Gbps: float = REFERENCE_PORT_GBPS
    switches: tuple[int, ...] = ()
    switch_ports: int = 0
    optical_links: int = 0
    electrical_links: int = 0
    transceivers: int = 0
    ocs_ports: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def cables(self) -> int:
        return self.optical_links + self.electrical_links

    def as_dict(self) -> dict[str, object]:
        """The counts as a flat mapping (report and JSON output)."""
        return {"gpus": self.gpus, "hosts": self.hosts, "nics": self.nics,
                "port_Gbps": self.port_Gbps, "switches_per_tier": list(self.switches),
                "switches": sum(self.switches), "switch_ports": self.switch_ports,
                "optical_links": self.optical_links, "electrical_links": self.electrical_links,
                "cables": self.cables, "transceivers": self.transceivers,
                "ocs_ports": self.ocs_ports}


def fat_tree_tiers(n: int, radix: int) -> int:
    """Tiers of the smallest non-blocking folded Clos of ``radix``-port switches that holds
    ``n`` endpoints: ``t`` tiers hold ``2·(radix/2)^t``."""
    t = 1
    while n > 2 * (radix / 2) ** t:
        t += 1
    return t


def fat_tree(n: int, radix: int, tiers: int, oversubscription: float = 1.0
             ) -> tuple[tuple[int, ...], int]:
    """Switches per tier (leaf first) and inter-switch links of a ``tiers``-level fat tree
    for ``n`` endpoints (see the module docstring)."""
    if tiers <= 1:
        return (math.ceil(n / radix),), 0
    half = radix / 2
    top_links = n / oversubscription
    switches = [math.ceil(n / half)] * (tiers - 2)
    switches.insert(0, math.ceil(n / half))  # leaves
    switches.append(math.ceil(top_links / radix))  # top tier, all ports down
    links = int(n * (tiers - 2) + math.ceil(top_links))
    return tuple(switches), links


def inventory(topology: TwoTierTopology | FullFlatTopology, gpus: int) -> Inventory:
    """Component counts of ``topology`` for ``gpus`` accelerators (module docstring)."""
    econ = topology.economics
    hosts = math.ceil(gpus / econ.gpus_per_host)
    if isinstance(topology, FullFlatTopology):
        ports = math.ceil(topology.bandwidth_GBps * 8 / REFERENCE_PORT_GBPS) * gpus
        return Inventory(gpus, hosts, port_Gbps=REFERENCE_PORT_GBPS, optical_links=ports,
                         transceivers=ports, ocs_ports=ports,
                         notes=("FullFlat: one co-packaged optical port per 400 Gb/s of each "
                                "GPU's bandwidth into one tier of OCS ports",))
    up, out = topology.scale_up, topology.scale_out
    notes: list[str] = []
    electrical = 0
    if up.torus is not None:
        electrical = gpus * len(up.torus.dims)
        notes.append("torus links counted as electrical cables; the optical circuit "
                     "switches joining cubes are not counted")
    if gpus <= up.domain_size:
        return Inventory(gpus, hosts, electrical_links=electrical,
                         notes=(*notes, "one scale-up domain: no scale-out network"))
    rate = out.nic_bandwidth_Gbps
    radix = max(2, int(econ.switch_capacity_Tbps * 1000 // rate))
    tiers = needed = fat_tree_tiers(gpus, radix)
    if needed > out.switch_tiers:
        notes.append(f"{gpus} GPUs need {needed} switch tiers of {radix}-port switches "
                     f"(the topology states {out.switch_tiers}); counted with {needed}")
    taper = out.oversubscription if (out.full_bisection_gpus is not None
                                     and gpus > out.full_bisection_gpus) else 1.0
    switches, inter = fat_tree(gpus, radix, tiers, taper)
    endpoint_optical = gpus if econ.optical_endpoint_links else 0
    optical = inter + endpoint_optical
    return Inventory(
        gpus, hosts, nics=gpus, port_Gbps=rate, switches=switches,
        switch_ports=sum(switches) * radix, optical_links=optical,
        electrical_links=electrical + (gpus - endpoint_optical), transceivers=2 * optical,
        notes=tuple(notes))


__all__ = ["REFERENCE_PORT_GBPS", "Inventory", "fat_tree", "fat_tree_tiers", "inventory"]
