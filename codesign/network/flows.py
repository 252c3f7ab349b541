"""Flow-level network model: the links of a topology, routes between GPUs (around failed
links), collectives decomposed into flows, and max-min fair rates by progressive filling.

Link graph (bytes/s per direction):

* two-tier: every GPU ``g`` has a scale-up port into its domain switch (``up_tx``/``up_rx``,
  ``scale_up.bandwidth_GBps``) and a NIC (``nic_tx``/``nic_rx``, ``nic_bandwidth_Gbps / 8``)
  into the leaf switch of its scale-up domain (leaf ``k`` holds the NICs of domain ``k``). A
  leaf's uplinks into the fat-tree carry ``domain_size`` NICs' worth (``leaf_up``/
  ``leaf_down``: non-blocking inside a pod). With ``oversubscription > 1`` and
  ``full_bisection_gpus`` set, GPUs are grouped in pods of that many consecutive ranks whose
  uplinks (``pod_up``/``pod_down``) carry ``full_bisection_gpus × NIC / oversubscription``.
  A flow between two GPUs of one domain crosses ``up_tx(a), up_rx(b)``; between domains
  ``nic_tx(a), leaf_up, [pod_up, pod_down,] leaf_down, nic_rx(b)``.
* FullFlat: one non-blocking fabric, every GPU a port (``port_tx``/``port_rx``).

Faults (:class:`LinkFault`): a degraded link keeps ``factor`` of its bandwidth. A failed link
is routed around: a failed NIC's traffic crosses the scale-up port to the next GPU of its
domain (its rail peer) and leaves through that GPU's NIC, which the two GPUs then share; a
failed scale-up port sends the GPU's intra-domain traffic through its NIC and the leaf
switch; a failed leaf uplink leaves ``domain_size - 1`` of the leaf's ``domain_size``
uplinks. The slow-down then follows from the max-min fair rates of the flows that now share.

Rates. An *entity* is a set of flows that move together (a ring collective advances at its
slowest hop, so its flows form one coflow); its *path* maps each link to how many of its
flows cross it. :func:`max_min_rates` raises every entity's rate at the same pace until a
link is full or an entity reaches its demand (progressive filling / water-filling), which is
the max-min fair allocation.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from codesign.errors import SpecError
from codesign.network.algorithms import algorithm as algorithm_named
from codesign.network.algorithms import decomposition
from codesign.network.algorithms.base import SWITCH, Entity
from codesign.network.placement import Layout, group_dims
from codesign.specs.topology import FullFlatTopology, TwoTierTopology
from codesign.units import GB, gbps_to_bytes_per_s

L = TypeVar("L", bound=Hashable)

Link = tuple[str, int]
"""A link: (kind, index). Kinds: up_tx, up_rx, nic_tx, nic_rx, leaf_up, leaf_down, pod_up,
pod_down, port_tx, port_rx; index: GPU rank, domain (leaf) or pod."""

#: user-facing link names -> what they index
LINK_KINDS: dict[str, str] = {
    "nic": "GPU rank (its scale-out NIC, both directions)",
    "scaleup": "GPU rank (its scale-up port, both directions)",
    "leaf": "scale-up domain (the uplinks of its leaf switch)",
    "pod": "pod of full_bisection_gpus ranks (its uplinks; oversubscribed fabrics only)",
    "port": "GPU rank (its FullFlat port, both directions)",
}
#: kinds a failed link can be routed around
FAILABLE = ("nic", "scaleup", "leaf")


@dataclass(frozen=True)
class LinkFault:
    """A degraded (``0 < factor < 1``: that fraction of its bandwidth remains; ``1``:
    healthy) or failed (``factor == 0``) link. ``kind`` is one of :data:`LINK_KINDS`."""

    kind: str
    index: int
    factor: float

    @property
    def failed(self) -> bool:
        return self.factor == 0.0

    def label(self) -> str:
        """``kind:index`` as on the command line."""
        return f"{self.kind}:{self.index}"


class LinkGraph:
    """The links of ``topology`` for ``world`` ranks, with ``faults`` applied."""

    def __init__(self, topology: TwoTierTopology | FullFlatTopology, world: int,
                 faults: Sequence[LinkFault] = ()) -> None:
        self.topology = topology
        self.world = world
        self.flat = isinstance(topology, FullFlatTopology)
        self._scale: dict[Link, float] = {}
        self.failed_nic: set[int] = set()
        self.failed_up: set[int] = set()
        if isinstance(topology, FullFlatTopology):
            self.domain_size = world
            self.pod_size = 0
            self._cap = {"port_tx": topology.bandwidth_GBps * GB,
                         "port_rx": topology.bandwidth_GBps * GB}
        else:
            up, out = topology.scale_up, topology.scale_out
            self.domain_size = up.domain_size
            nic = gbps_to_bytes_per_s(out.nic_bandwidth_Gbps)
            pod = out.full_bisection_gpus
            self.pod_size = (pod if pod is not None and out.oversubscription > 1.0
                             and world > pod else 0)
            self._cap = {"up_tx": up.bandwidth_GBps * GB, "up_rx": up.bandwidth_GBps * GB,
                         "nic_tx": nic, "nic_rx": nic,
                         "leaf_up": nic * up.domain_size, "leaf_down": nic * up.domain_size,
                         "pod_up": nic * self.pod_size / out.oversubscription,
                         "pod_down": nic * self.pod_size / out.oversubscription}
        for f in faults:
            check_fault(f, topology, world)
            if f.kind == "nic" and f.failed:
                self.failed_nic.add(f.index)
            elif f.kind == "scaleup" and f.failed:
                self.failed_up.add(f.index)
            else:
                factor = f.factor
                if f.failed:  # a leaf keeps domain_size - 1 of its domain_size uplinks
                    factor = (self.domain_size - 1) / self.domain_size
                for link in _physical(f.kind, f.index):
                    self._scale[link] = self._scale.get(link, 1.0) * factor
        for g in self.failed_nic & self.failed_up:
            raise SpecError(f"GPU {g}: its NIC and its scale-up port both failed; it is cut off "
                            "from the network")
        for g in self.failed_nic:
            self._peer(g)  # raises when the whole domain lost its NICs

    @property
    def faulty(self) -> bool:
        """True when some link is degraded or failed."""
        return bool(self._scale or self.failed_nic or self.failed_up)

    def capacity(self, link: Link) -> float:
        """Bandwidth of ``link`` after faults, bytes/s."""
        return self._cap[link[0]] * self._scale.get(link, 1.0)

    def modified(self, link: Link) -> bool:
        """True when a fault changed the capacity of ``link``."""
        return link in self._scale

    def domain(self, g: int) -> int:
        return g // self.domain_size

    def _peer(self, g: int) -> int:
        """The GPU whose NIC carries failed-NIC ``g``'s traffic: the next one in its domain."""
        d = self.domain_size
        base = g - g % d
        for i in range(1, d):
            p = base + (g - base + i) % d
            if p not in self.failed_nic and p not in self.failed_up:
                return p
        raise SpecError(f"GPU {g}: its NIC failed and no other GPU of its scale-up domain "
                        "has a working NIC and scale-up port to reroute through")

    def _out_leg(self, a: int, direction: str) -> list[Link]:
        """Links between GPU ``a`` and its leaf switch (``tx``: leaving ``a``)."""
        if a not in self.failed_nic:
            return [(f"nic_{direction}", a)]
        p = self._peer(a)
        if direction == "tx":
            return [("up_tx", a), ("up_rx", p), ("nic_tx", p)]
        return [("nic_rx", p), ("up_tx", p), ("up_rx", a)]

    def route(self, a: int, b: int) -> list[Link]:
        """Links a flow from GPU ``a`` to GPU ``b`` crosses (``b = SWITCH``: into the switch
        and back, for in-network reduction on the tier ``a``'s scale-out NIC serves)."""
        if self.flat:
            return [("port_tx", a), ("port_rx", a if b == SWITCH else b)]
        if b == SWITCH:
            return self._out_leg(a, "tx") + self._out_leg(a, "rx")
        da, db = self.domain(a), self.domain(b)
        if da == db:
            if a in self.failed_up or b in self.failed_up:
                # through the NICs and the leaf switch of the domain
                return self._out_leg(a, "tx") + self._out_leg(b, "rx")
            return [("up_tx", a), ("up_rx", b)]
        path = [*self._out_leg(a, "tx"), ("leaf_up", da)]
        if self.pod_size:
            pa, pb = a // self.pod_size, b // self.pod_size
            if pa != pb:
                path += [("pod_up", pa), ("pod_down", pb)]
        return [*path, ("leaf_down", db), *self._out_leg(b, "rx")]

    def route_up(self, a: int) -> list[Link]:
        """Into the scale-up switch and back (in-network reduction inside a domain)."""
        if self.flat:
            return [("port_tx", a), ("port_rx", a)]
        if a in self.failed_up:  # through its NIC to the leaf switch and back
            return self._out_leg(a, "tx") + self._out_leg(a, "rx")
        return [("up_tx", a), ("up_rx", a)]


def _physical(kind: str, index: int) -> list[Link]:
    return {"nic": [("nic_tx", index), ("nic_rx", index)],
            "scaleup": [("up_tx", index), ("up_rx", index)],
            "leaf": [("leaf_up", index), ("leaf_down", index)],
            "pod": [("pod_up", index), ("pod_down", index)],
            "port": [("port_tx", index), ("port_rx", index)]}[kind]


def check_fault(f: LinkFault, topology: TwoTierTopology | FullFlatTopology, world: int) -> None:
    """Raise :class:`SpecError` unless ``f`` names a link of ``topology`` with ``world`` GPUs."""
    flat = isinstance(topology, FullFlatTopology)
    label = f.label()
    if f.kind not in LINK_KINDS:
        raise SpecError(f"link '{label}': unknown link kind '{f.kind}'; allowed: "
                        f"{', '.join(LINK_KINDS)}")
    if not 0.0 <= f.factor <= 1.0 or math.isnan(f.factor):
        raise SpecError(f"link '{label}': bandwidth factor must be in (0, 1], got {f.factor}")
    if flat and f.kind != "port":
        raise SpecError(f"link '{label}': a FullFlat topology has only 'port' links")
    if not flat and f.kind == "port":
        raise SpecError(f"link '{label}': 'port' links belong to FullFlat topologies; a "
                        "two-tier one has nic, scaleup, leaf and pod links")
    if f.failed and f.kind not in FAILABLE:
        raise SpecError(f"link '{label}': a failed {f.kind} link cannot be routed around; "
                        f"failed links: {', '.join(FAILABLE)} (degrade it instead)")
    if isinstance(topology, TwoTierTopology):
        d = topology.scale_up.domain_size
        out = topology.scale_out
        pods = (-(-world // out.full_bisection_gpus)
                if out.full_bisection_gpus and out.oversubscription > 1
                and world > out.full_bisection_gpus else 0)
        count = {"nic": world, "scaleup": world, "leaf": -(-world // d), "pod": pods}[f.kind]
        if f.kind == "pod" and not pods:
            raise SpecError(f"link '{label}': this fabric has no oversubscribed pods "
                            "(oversubscription 1, no full_bisection_gpus, or one pod)")
        if f.failed and f.kind in ("nic", "leaf", "scaleup") and d == 1:
            raise SpecError(f"link '{label}': scale-up domains of one GPU leave no other path")
    else:
        count = world
    if not 0 <= f.index < count:
        raise SpecError(f"link '{label}': index {f.index} out of range; {f.kind} indices "
                        f"are 0..{count - 1} ({LINK_KINDS[f.kind]})")


# --- max-min fairness -----------------------------------------------------------------------


def max_min_rates(paths: Sequence[Mapping[L, float]],
                  capacity: Mapping[L, float] | Callable[[L], float],
                  demands: Sequence[float] | None = None, rel_tol: float = 1e-12) -> list[float]:
    """Max-min fair rates of entities by progressive filling.

    ``paths[i]`` maps each link entity ``i`` uses to its weight (flows of the entity on that
    link: the entity's rate ``r`` loads the link with ``weight × r``); ``capacity`` gives each
    link's capacity; ``demands[i]`` caps entity ``i`` (``inf``: elastic). All unfrozen rates
    grow together; a link that fills freezes its entities, as does an entity that reaches its
    demand. An entity on no link with no demand gets ``inf``.
    """
    n = len(paths)
    cap = capacity if callable(capacity) else capacity.__getitem__
    want = list(demands) if demands is not None else [math.inf] * n
    rate = [0.0] * n
    frozen = [False] * n
    users: dict[L, list[tuple[int, float]]] = defaultdict(list)
    for i, path in enumerate(paths):
        for link, w in path.items():
            if w > 0:
                users[link].append((i, w))
    residual = {link: float(cap(link)) for link in users}
    total = {link: float(cap(link)) for link in users}
    load = {link: sum(w for _, w in us) for link, us in users.items()}
    for i in range(n):
        if want[i] <= 0.0:
            frozen[i] = True
            for link, w in paths[i].items():
                if w > 0:
                    load[link] -= w
    active = sum(1 for f in frozen if not f)
    while active:
        delta = math.inf
        for link, w in load.items():
            if w > 1e-300:
                delta = min(delta, max(residual[link], 0.0) / w)
        for i in range(n):
            if not frozen[i] and want[i] < math.inf:
                delta = min(delta, want[i] - rate[i])
        if delta == math.inf:  # entities on no link, unbounded
            for i in range(n):
                if not frozen[i]:
                    rate[i] = math.inf
            break
        for i in range(n):
            if not frozen[i]:
                rate[i] += delta
        full: list[L] = []
        for link, w in load.items():
            if w > 1e-300:
                residual[link] -= delta * w
                if residual[link] <= rel_tol * total[link]:
                    full.append(link)
        newly: set[int] = set()
        for link in full:
            for i, _ in users[link]:
                if not frozen[i]:
                    newly.add(i)
        for i in range(n):
            if not frozen[i] and want[i] < math.inf and rate[i] >= want[i] * (1 - rel_tol):
                rate[i] = want[i]
                newly.add(i)
        if not newly:  # numerical safety: nothing froze although delta was finite
            break
        for i in newly:
            frozen[i] = True
            active -= 1
            for link, w in paths[i].items():
                if w > 0:
                    load[link] -= w
    return rate


# --- collectives as flows -------------------------------------------------------------------


def collective_entities(kind: str, algorithm: str, members: Sequence[int],
                        domain_size: int) -> list[Entity]:
    """Decompose one collective on ``members`` (rank ids) into entities.

    ``algorithm`` is the one the cost model chose (:class:`~codesign.network.model.CommCost`);
    its registered decomposition (:meth:`~codesign.network.algorithms.base.
    CollectiveAlgorithm.entities`) gives the flows: ring and tree (whose bandwidth term equals
    the ring's) and measured become a ring over the members in rank order; in_network a flow
    per member into the switch and back; hierarchical a ring inside each domain (tier up) and
    one ring per local index across the domains (tier out). All-to-all and p2p are always
    ``direct``: every ordered pair, the intra-domain pairs and the inter-domain pairs as two
    entities; p2p a flow from the first member to the second.
    """
    if len(members) <= 1:
        return []
    name = "direct" if kind in ("p2p", "all_to_all") else decomposition(algorithm)
    return algorithm_named(name).entities(kind, members, domain_size)


def entity_path(graph: LinkGraph, entity: Entity) -> dict[Link, float]:
    """Links the entity's flows cross, with how many of its flows cross each."""
    path: dict[Link, float] = defaultdict(float)
    for a, b in entity.flows:
        route = graph.route_up(a) if b == SWITCH and entity.tier == "up" else graph.route(a, b)
        for link in route:
            path[link] += 1.0
    return dict(path)


def tier_factors(healthy: LinkGraph, faulted: LinkGraph,
                 instances: Sequence[Sequence[Entity]]) -> list[dict[str, float]]:
    """For collectives running concurrently (one list of entities per instance), the
    fraction of its healthy rate each instance keeps on each tier after the faults of
    ``faulted``: ``{"up": f_up, "out": f_out}`` (1.0 where untouched), the slowest entity of
    the instance on that tier. Only entities connected by shared links to a rerouted flow or
    a degraded link are solved (max-min fairness separates over connected components)."""
    out: list[dict[str, float]] = [{"up": 1.0, "out": 1.0} for _ in instances]
    if not faulted.faulty:
        return out
    ents: list[tuple[int, Entity]] = [(i, e) for i, inst in enumerate(instances) for e in inst]
    p_h = [entity_path(healthy, e) for _, e in ents]
    p_f = [entity_path(faulted, e) for _, e in ents]
    seeds = [j for j in range(len(ents))
             if p_f[j].keys() != p_h[j].keys() or any(faulted.modified(k) for k in p_f[j])]
    if not seeds:
        return out
    by_link: dict[Link, list[int]] = defaultdict(list)
    for j in range(len(ents)):
        for link in {*p_h[j], *p_f[j]}:
            by_link[link].append(j)
    seen = set(seeds)
    queue = deque(seeds)
    while queue:
        j = queue.popleft()
        for link in {*p_h[j], *p_f[j]}:
            for k in by_link[link]:
                if k not in seen:
                    seen.add(k)
                    queue.append(k)
    comp = sorted(seen)
    r_h = max_min_rates([p_h[j] for j in comp], healthy.capacity)
    r_f = max_min_rates([p_f[j] for j in comp], faulted.capacity)
    for j, rh, rf in zip(comp, r_h, r_f, strict=True):
        i, e = ents[j]
        ratio = rf / rh if rh > 0 and math.isfinite(rh) else 1.0
        if ratio < out[i][e.tier]:
            out[i][e.tier] = ratio
    return out


# --- group enumeration ----------------------------------------------------------------------


def rank_grid(layout: Layout) -> tuple[np.ndarray, tuple[str, ...]]:
    """Rank ids as an array with one axis per layout dim, outermost dim first, and the dims
    in that axis order."""
    dims = tuple(reversed(layout.order))
    shape = tuple(layout.size(d) for d in dims)
    return np.arange(layout.world, dtype=np.int64).reshape(shape), dims


def group_instances(layout: Layout, group: str, fixed: Mapping[str, int] | None = None
                    ) -> np.ndarray:
    """Every ``group`` of ``layout`` as rows of rank ids (``fixed`` pins dims, e.g.
    ``{"pp": 0}`` for one pipeline stage); shape (groups, group size)."""
    grid, dims = rank_grid(layout)
    gd = set(group_dims(group))
    if fixed:
        index = tuple(fixed.get(d, slice(None)) for d in dims)
        grid = grid[index]
        dims = tuple(d for d in dims if d not in fixed)
    inner = [i for i, d in enumerate(dims) if d in gd]
    outer = [i for i, d in enumerate(dims) if d not in gd]
    size = int(np.prod([grid.shape[i] for i in inner])) if inner else 1
    return grid.transpose(outer + inner).reshape(-1, size)
