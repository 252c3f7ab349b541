"""Link faults in the per-rank engine: bandwidth factors of group instances on the faulted link
graph (the flows of every group instance that runs concurrently are routed over the faulted
links and given max-min fair rates; an instance keeps the fraction of its healthy rate its
slowest flow keeps, per tier), and collective prices with those tiers slowed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from codesign.engine.expanded.geometry import RankGeometry
from codesign.network.algorithms import decomposition
from codesign.network.faults import CommProfile, ScaledCosts
from codesign.network.flows import (
    LinkFault,
    LinkGraph,
    collective_entities,
    group_instances,
    tier_factors,
)
from codesign.network.model import NetworkModel


def _decomposition(kind: str, algorithm: str) -> str:
    if kind == "all_to_all":
        return "a2a"
    if kind == "p2p":
        return "p2p"
    return decomposition(algorithm)


class LinkFactors:
    """Bandwidth factors of group instances on the faulted link graph, as ids into
    ``pairs`` (``(f_up, f_out)``; id 0 is healthy)."""

    def __init__(self, geo: RankGeometry, network: NetworkModel,
                 faults: Sequence[LinkFault]) -> None:
        self.geo = geo
        self.network = network
        self.scaled = ScaledCosts(network)
        topo, world = network.topology, geo.world
        self.healthy = LinkGraph(topo, world)
        self.faulted = LinkGraph(topo, world, faults)
        self.active = self.faulted.faulty
        # ranks whose flows can cross a faulted link: a failed NIC's or port's traffic stays
        # in its scale-up domain until it leaves by a peer's NIC, a leaf carries its domain's
        # flows, a pod's uplinks its pod's
        self.touched = np.zeros(world, dtype=bool)
        d = self.faulted.domain_size
        for f in faults:
            if f.kind == "port":
                self.touched[f.index] = True
            elif f.kind in ("nic", "scaleup"):
                self.touched[f.index - f.index % d:f.index - f.index % d + d] = True
            elif f.kind == "leaf":
                self.touched[f.index * d:(f.index + 1) * d] = True
            elif f.kind == "pod":
                size = self.faulted.pod_size
                self.touched[f.index * size:(f.index + 1) * size] = True
        self.pairs: list[tuple[float, float]] = [(1.0, 1.0)]
        self._ids: dict[tuple[float, float], int] = {(1.0, 1.0): 0}
        self._chunk: dict[tuple[int, str, str], np.ndarray] = {}
        self._barrier: dict[tuple[int, str, str], list[int]] = {}
        self._p2p: dict[tuple[int, int], np.ndarray] = {}
        self.slowed: dict[tuple[str, int, str], float] = {}

    def pid(self, f_up: float, f_out: float) -> int:
        key = (f_up, f_out)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.pairs)
            self.pairs.append(key)
        return i

    def _touches(self, *stages: int) -> bool:
        """True when a rank of these pipeline stages may route over a faulted link."""
        return self.active and any(bool(self.touched[self.geo.table[s]].any())
                                   for s in stages)

    def dec(self, kind: str, group: str, size: float) -> str:
        return _decomposition(kind, self.network.collective(kind, group, size).algorithm)

    def _factor_ids(self, rows: np.ndarray, dec: str, label: tuple[str, int]) -> np.ndarray:
        """Ids of the factors of each instance (row of rank ids), all running together."""
        ds = self.faulted.domain_size
        kind = {"a2a": "all_to_all", "p2p": "p2p"}.get(dec, "all_reduce")
        insts = [collective_entities(kind, dec, [int(r) for r in row], ds) for row in rows]
        fs = tier_factors(self.healthy, self.faulted, insts)
        ids = np.zeros(len(rows), dtype=np.int64)
        for i, f in enumerate(fs):
            ids[i] = self.pid(f["up"], f["out"])
            for tier in ("up", "out"):
                if f[tier] < 1.0:
                    name = ("fullflat" if self.faulted.flat else
                            "scale_out" if tier == "out" else "scale_up")
                    key = (label[0], label[1], name)
                    self.slowed[key] = min(self.slowed.get(key, 1.0), f[tier])
        return ids

    def chunk(self, stage: int, group: str, dec: str) -> np.ndarray:
        """Factor ids of ``group``'s instances inside every cluster of ``stage``, shaped
        (replica, *member with the group's axes of size 1)."""
        key = (stage, group, dec)
        hit = self._chunk.get(key)
        if hit is None:
            inst, red = self.geo.instances(stage, group)
            if not self._touches(stage):
                hit = np.zeros(red, dtype=np.int64)
            else:
                ids = self._factor_ids(inst.reshape(-1, inst.shape[-1]), dec, (group, stage))
                hit = ids.reshape(red)
            self._chunk[key] = hit
        return hit

    def barrier(self, stage: int, group: str, dec: str) -> list[int]:
        """Distinct factor ids over every instance of ``group`` at ``stage``."""
        key = (stage, group, dec)
        hit = self._barrier.get(key)
        if hit is None:
            if not self._touches(stage):
                hit = [0]
            else:
                rows = group_instances(self.geo.layout, group, {"pp": stage})
                hit = sorted({int(i) for i in self._factor_ids(rows, dec, (group, stage))})
            self._barrier[key] = hit
        return hit

    def p2p(self, src: int, dst: int) -> np.ndarray:
        """Factor id per replica of the pipeline sends from stage ``src`` to stage ``dst``
        (a neighbour, or stage 0 for the last stage's wrap-around send of an interleaved
        schedule and back)."""
        key = (src, dst)
        hit = self._p2p.get(key)
        if hit is None:
            n_rep = self.geo.n_rep
            if not self._touches(src, dst):
                hit = np.zeros(n_rep, dtype=np.int64)
            else:
                srcs = self.geo.table[src].reshape(n_rep, -1)
                dsts = self.geo.table[dst].reshape(n_rep, -1)
                ds = self.faulted.domain_size
                insts = [collective_entities("p2p", "direct", [int(a), int(b)], ds)
                         for rs, rd in zip(srcs, dsts, strict=True)
                         for a, b in zip(rs, rd, strict=True)]
                fs = tier_factors(self.healthy, self.faulted, insts)
                worst = [min(f["up"], f["out"]) for f in fs]
                per_rep = np.asarray(worst).reshape(n_rep, -1).min(axis=1)
                hit = np.array([self.pid(float(f), float(f)) for f in per_rep], dtype=np.int64)
                low = float(per_rep.min())
                if low < 1.0:
                    tier = self.network.collective("p2p", "pp", 1.0).tier
                    k = ("pp", min(src, dst), tier)
                    self.slowed[k] = min(self.slowed.get(k, 1.0), low)
            self._p2p[key] = hit
        return hit

    def cost(self, kind: str, group: str, size: float, pid: int) -> float:
        f_up, f_out = self.pairs[pid]
        return self.scaled.cost(kind, group, size, f_up, f_out)

    def profile(self, kind: str, group: str, size: float, pid: int) -> CommProfile:
        f_up, f_out = self.pairs[pid]
        return self.scaled.profile(kind, group, size, f_up, f_out)

