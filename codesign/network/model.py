"""Network cost model: time of a collective on a communication group of a placed layout.

Tiers. A two-tier topology has a scale-up tier (``bandwidth_GBps·1e9`` bytes/s per GPU per
direction, α = ``latency_us``) and a scale-out tier (``nic_bandwidth_Gbps·1e9/8`` bytes/s per GPU,
divided by ``oversubscription`` when the group's rank span exceeds ``full_bisection_gpus``;
α = ``latency_us + hop_latency_us·(2·switch_tiers - 1)``). A FullFlat topology has one tier.

Message-size efficiency. Each tier's bandwidth is scaled by
``eff(S) = efficiency_max · S_MB / (S_MB + efficiency_half_size_MB)``, evaluated on the size
argument of the (sub-)collective that runs on that tier: ``S`` for a flat collective and for the
intra-domain phases of a hierarchical one, ``S/k`` for its inter-domain phase.

Algorithm choice. ``"auto"`` takes the fastest applicable algorithm (NCCL-like):

* group inside one scale-up domain — ring or in_network (when the tier has switch reduction);
  NCCL's tree is a chain inside a domain, so it costs as a ring there and is not offered;
* group across domains with one member per domain — flat ring / tree / in_network on scale-out;
* group across domains with ``k > 1`` members per domain — the two-level hierarchical algorithm
  (best sub-algorithm per phase), or a flat algorithm at scale-out bandwidth if that is faster;
* FullFlat — ring / tree / in_network on the single tier.

An explicit ``"ring"``, ``"tree"`` or ``"in_network"`` uses that algorithm (for in_network across
domains with ``k > 1``: switch reduction on the inter-domain phase of the hierarchical scheme, as
NCCL CollNet does); ``"hierarchical"`` uses the two-level scheme where the group spans domains
with ``k > 1`` and degenerates to ``"auto"`` elsewhere. When the requested algorithm does not
apply (tree all-gather, in_network without switch support) the ring is used; ``CommCost``
reports the algorithm actually costed. all_to_all and p2p are always ``"direct"``.

These rules are the registered algorithms' (:mod:`codesign.network.algorithms`): the flat
candidates on a tier are the registry's flat algorithms available there, and the requested
algorithm narrows them (``flat_choices``), narrows the inter-domain phase of the two-level
scheme (``outer_choices``) and takes the flat or the two-level cost (``pick``).

Measured collectives. With ``measured`` (a :class:`~codesign.measured.CollectiveTable`)
a collective whose kind, group size (and tier, where the table gives one) and size the table
covers takes the interpolated measured time, reported as algorithm ``"measured"``; the group's
tier is ``scale_up`` inside one scale-up domain, ``scale_out`` (one rank per domain) or ``mixed``
across domains (matched by ``scale_out`` rows), ``fullflat`` on FullFlat. Everything else is
costed by the alpha-beta model above, unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from codesign.network import algorithms as registry
from codesign.network import mesh_mapping, torus
from codesign.network.algorithms.base import CollectiveAlgorithm
from codesign.network.algorithms.direct import all_to_all, p2p
from codesign.network.algorithms.hierarchical import HIERARCHICAL_PHASES, hierarchical
from codesign.network.placement import (
    GroupPlacement,
    Layout,
    folded_expert_groups,
    group_dims,
    layout_for,
    members_below,
    place_group,
)
from codesign.network.taper import slowdown
from codesign.network.token_routing import TokenRouting
from codesign.specs.parallel import COLLECTIVE_ALGORITHMS
from codesign.specs.topology import FullFlatTopology, ScaleUpSpec, TwoTierTopology
from codesign.units import GB, MB, gbps_to_bytes_per_s, us_to_s

if TYPE_CHECKING:
    from codesign.measured import CollectiveTable
    from codesign.specs.model import MoESpec
    from codesign.specs.parallel import ParallelismSpec

COLLECTIVE_KINDS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "p2p",
)
ALGORITHMS: list[str] = COLLECTIVE_ALGORITHMS
"""Algorithms a model may be built with: the registry's selectable ones (a live list)."""
TIERS: tuple[str, ...] = ("scale_up", "scale_out", "mixed", "fullflat", "local")

_CACHE_LIMIT = 1 << 16


@dataclass(frozen=True)
class CommCost:
    """Cost of one collective call.

    Attributes:
        time_s: seconds.
        algorithm: the algorithm costed: ring, tree, in_network, hierarchical, direct, none, or
            measured (interpolated from a measured collectives table).
        tier: scale_up, scale_out, mixed (both tiers), fullflat, or local (no communication).
    """

    time_s: float
    algorithm: str
    tier: str


LOCAL = CommCost(0.0, "none", "local")


@dataclass(frozen=True)
class Tier:
    """One network tier as seen by a GPU.

    Attributes:
        name: scale_up, scale_out or fullflat.
        bandwidth: wire rate, bytes/s per GPU per direction.
        alpha: per-step latency, seconds.
        efficiency_max: achieved fraction of ``bandwidth`` for large messages.
        efficiency_half_size: message size reaching half of ``efficiency_max``, bytes.
        in_network: switch-side reduction available.
        log_tree: a logarithmic-depth tree is possible (False inside an NVLink domain, where
            NCCL's tree is a chain).
    """

    name: str
    bandwidth: float
    alpha: float
    efficiency_max: float
    efficiency_half_size: float
    in_network: bool
    log_tree: bool

    @classmethod
    def of_link(cls, name: str, link: ScaleUpSpec | FullFlatTopology, log_tree: bool) -> Tier:
        """The tier of a scale-up domain or a FullFlat network (GB/s, us, MB in the spec)."""
        return cls(name=name, bandwidth=link.bandwidth_GBps * GB,
                   alpha=us_to_s(link.latency_us), efficiency_max=link.efficiency_max,
                   efficiency_half_size=link.efficiency_half_size_MB * MB,
                   in_network=link.in_network_reduction, log_tree=log_tree)

    def efficiency(self, size_bytes: float) -> float:
        """``efficiency_max · S / (S + half_size)``; ``efficiency_max`` when half is 0."""
        if self.efficiency_half_size <= 0.0:
            return self.efficiency_max
        if size_bytes <= 0.0:
            return 0.0
        return self.efficiency_max * size_bytes / (size_bytes + self.efficiency_half_size)

    def bw(self, size_bytes: float) -> float:
        """Achieved bandwidth for a message of ``size_bytes``, bytes/s (floored to stay > 0)."""
        return max(self.bandwidth * self.efficiency(size_bytes), 1e-30)

    def algorithms(self, kind: str) -> tuple[str, ...]:
        """Flat algorithms of the registry applicable to ``kind`` on this tier, in order of
        preference."""
        return tuple(alg.name for alg in registry.flat_algorithms()
                     if alg.available(self) and math.isfinite(alg.time(kind, 1.0, 2, 1.0, 0.0)))


class NetworkModel:
    """Collective costs for a layout placed on a topology.

    Build once per (topology, layout, algorithm); :meth:`collective` is cached and cheap.
    ``measured``: a collectives table consulted before the model (see module docstring).
    """

    def __init__(
        self,
        topology: TwoTierTopology | FullFlatTopology,
        layout: Layout,
        algorithm: str = "auto",
        *,
        measured: CollectiveTable | None = None,
        routing: TokenRouting | None = None,
    ) -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(
                f"unknown collective algorithm '{algorithm}'; allowed: {', '.join(ALGORITHMS)}"
            )
        self.topology = topology
        self.layout = layout
        self.algorithm = algorithm
        self._requested = registry.algorithm(algorithm)
        self._choices: dict[tuple[str, Tier], tuple[CollectiveAlgorithm, ...]] = {}
        self.measured = measured
        #: MoE token copies sent once per destination domain (DeepEP); ``None``: NCCL's
        #: all-to-all, one send per copy
        self.routing = routing
        self._placements: dict[str, GroupPlacement] = {}
        #: expert groups folded over TP×CP×DP (:meth:`from_parallelism`); consumers that walk
        #: the layout's dims (per-rank engine, Chakra export) refuse such a model
        self.folded = False
        self._out_tiers: dict[tuple[str, str, int], Tier] = {}
        self._cache: dict[tuple[str, str, float], CommCost] = {}
        #: a group's ``(size, stride)`` rank generators where they are not the layout's dims
        #: (folded expert groups), for the torus geometry
        self._generators: dict[str, tuple[tuple[int, int], ...]] = {}
        self._geometries: dict[str, torus.Geometry] = {}
        self._torus_tiers: dict[str, Tier] = {}
        self._torus_shape: tuple[int, ...] | None = None
        #: layout dim -> whole torus dimensions (``torus.mapping: mesh``), see mesh_mapping
        self._mesh_axes: dict[str, mesh_mapping.Axes] = {}
        if isinstance(topology, FullFlatTopology):
            self.domain_size = layout.world
            self._up = Tier.of_link("fullflat", topology, log_tree=True)
        else:
            up = topology.scale_up
            self.domain_size = up.domain_size
            self._up = Tier.of_link("scale_up", up, log_tree=False)
            if up.torus is not None:
                n = min(layout.world, up.domain_size)
                self._torus_shape = torus.slice_shape(up.torus.dims, n)
                if up.torus.mapping == "mesh":
                    self._map_mesh(up.torus.dims, n)

    @classmethod
    def from_parallelism(
        cls,
        topology: TwoTierTopology | FullFlatTopology,
        parallelism: ParallelismSpec,
        dp: int | None = None,
        *,
        measured: CollectiveTable | None = None,
        moe: MoESpec | None = None,
    ) -> NetworkModel:
        """Model for a :class:`ParallelismSpec`; ``dp`` overrides / supplies ``parallelism.dp``;
        ``moe``: the model's routing, for the plan's ``moe_dispatcher`` (``deepep``: EP
        all-to-alls forwarded per domain, :mod:`codesign.network.token_routing`)."""
        dp = dp if dp is not None else parallelism.dp
        if dp is None:
            raise ValueError("data-parallel size unknown: pass dp= or set parallelism.dp")
        p = parallelism
        fold = p.ep > 1 and dp % p.ep != 0  # MoE parallel folding: EP over TP×CP×DP
        layout = layout_for(tp=p.tp, cp=p.cp, ep=1 if fold else p.ep, dp=dp, pp=p.pp,
                            order=tuple(p.placement_order))
        routing = (TokenRouting.of(moe) if moe is not None and p.moe_dispatcher == "deepep"
                   else None)
        model = cls(topology, layout, p.collective_algorithm, measured=measured,
                    routing=routing)
        if fold:
            if tuple(p.placement_order)[:3] not in (("tp", "cp", "ep"), ("tp", "ep", "cp")):
                raise ValueError("MoE parallel folding (ep not dividing dp) needs the default "
                                 "placement order (tp, cp innermost)")
            model.folded = True
            model._placements.update(folded_expert_groups(
                p.tp, p.cp, dp, p.ep, p.expert_tp, model.domain_size))
            edp = max(p.tp * p.cp * dp // (p.ep * p.expert_tp), 1)
            model._generators.update({"ep": ((p.ep, p.expert_tp),),
                                      "edp": ((edp, p.ep * p.expert_tp),),
                                      "edp_cp": ((edp, p.ep * p.expert_tp),)})
        return model

    # --- groups ----------------------------------------------------------------------------

    def group_size(self, group: str) -> int:
        """Ranks in one ``group`` (e.g. ``"tp"``, ``"dp"``, ``"world"``)."""
        return self.placement(group).size

    def placement(self, group: str) -> GroupPlacement:
        """How ``group`` sits on the scale-up domains (cached)."""
        p = self._placements.get(group)
        if p is None:
            group_dims(group)  # ValueError listing the allowed names
            p = place_group(self.layout, group, self.domain_size)
            self._placements[group] = p
        return p

    def _scale_out(self, group: str, p: GroupPlacement, kind: str = "ring",
                   per: int = 1) -> Tier:
        """The scale-out tier seen by a ``kind`` collective on ``group`` (hop latency; on a
        tapered fabric, the pod uplinks' share when the group leaves its pod,
        :mod:`codesign.network.taper`); ``per``: the group runs as ``per`` sub-groups
        (the inter-domain phase of the two-level scheme, ``per`` = members per domain)."""
        shape = "all_to_all" if kind == "all_to_all" else "ring"
        key = (group, shape, per)
        tier = self._out_tiers.get(key)
        if tier is not None:
            return tier
        assert isinstance(self.topology, TwoTierTopology)
        out = self.topology.scale_out
        bandwidth = gbps_to_bytes_per_s(out.nic_bandwidth_Gbps)
        hops = 2 * out.switch_tiers - 1
        if out.rail_optimized and self._same_rail(group, p):
            hops = 1  # one rail's leaf switch joins the whole group, untapered
        elif out.full_bisection_gpus is not None and p.span > out.full_bisection_gpus:
            in_pod = members_below(self._group_generators(group), out.full_bisection_gpus)
            bandwidth /= slowdown(shape, p.size // per, in_pod // per, out.oversubscription)
        tier = Tier(
            name="scale_out",
            bandwidth=bandwidth,
            alpha=us_to_s(out.latency_us + out.hop_latency_us * hops),
            efficiency_max=out.efficiency_max,
            efficiency_half_size=out.efficiency_half_size_MB * MB,
            in_network=out.in_network_reduction,
            log_tree=True,
        )
        self._out_tiers[key] = tier
        return tier

    # --- costs -----------------------------------------------------------------------------

    def collective(self, kind: str, group: str, size_bytes: float) -> CommCost:
        """Cost of one ``kind`` collective of ``size_bytes`` on every ``group`` concurrently.

        ``size_bytes`` follows :mod:`codesign.network.collectives` (all_gather: output size;
        reduce_scatter: input size; all_to_all: all a rank sends incl. its own share). A group
        of one rank, or zero bytes, costs nothing (tier ``"local"``).
        """
        key = (kind, group, size_bytes)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if kind not in COLLECTIVE_KINDS:
            raise ValueError(
                f"unknown collective kind '{kind}'; allowed: {', '.join(COLLECTIVE_KINDS)}"
            )
        if size_bytes < 0 or math.isnan(size_bytes):
            raise ValueError(f"size_bytes must be >= 0, got {size_bytes}")
        cost = self._compute(kind, group, float(size_bytes))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = cost
        return cost

    def _compute(self, kind: str, group: str, size: float) -> CommCost:
        p = self.placement(group)
        n = p.size
        if n <= 1 or size == 0.0:
            return LOCAL
        up = self._up
        in_domain = not p.crosses_domains
        if self.measured is not None:
            hit = self._measured(kind, p, size)
            if hit is not None:
                return hit

        if self._torus_shape is not None:
            if in_domain and (kind != "p2p" or p.aligned):
                return self._torus_cost(kind, group, size)
            up = self._torus_tier(group)

        if kind == "p2p":
            # Pipeline-style neighbours: intra-domain only if every neighbour pair of every
            # group is inside a domain; otherwise the slowest (scale-out) hop sets the pace.
            tier = up if in_domain and p.aligned else self._scale_out(group, p, kind)
            return CommCost(p2p(size, tier.bw(size), tier.alpha), "direct", tier.name)

        if in_domain:
            if kind == "all_to_all":
                t = all_to_all(size, n, n, up.bw(size), up.alpha, 1.0, 0.0)
                return CommCost(t, "direct", up.name)
            return self._best_flat(kind, n, size, up)

        out = self._scale_out(group, p, kind)
        k = p.ranks_per_domain
        if kind == "all_to_all":
            share = (self.routing.network_share(p.num_domains)
                     if group == "ep" and self.routing is not None else None)
            t = all_to_all(size, n, k, up.bw(size), up.alpha, out.bw(size), out.alpha, share)
            return CommCost(t, "direct", "mixed" if k > 1 else "scale_out")

        flat = self._best_flat(kind, n, size, out)
        if k <= 1 or kind not in HIERARCHICAL_PHASES:
            return flat
        hier = self._best_hierarchical(kind, k, p.num_domains, size, up,
                                       self._scale_out(group, p, kind, per=k))
        return self._requested.pick(flat, hier)

    # --- torus scale-up domains ------------------------------------------------------------

    def geometry(self, group: str) -> torus.Geometry:
        """Where rank 0's ``group`` lies in the torus slice (members inside the slice only)."""
        g = self._geometries.get(group)
        if g is None:
            assert self._torus_shape is not None, "not a torus scale-up domain"
            ids = torus.members(self._slice_generators(group), prod(self._torus_shape))
            wrap = self.topology.scale_up.torus.wrap_from  # type: ignore[union-attr]
            g = self._geometries[group] = torus.geometry(ids, self._torus_shape, wrap)
        return g

    def _map_mesh(self, max_dims: tuple[int, ...], n: int) -> None:
        """Map the layout dims onto whole torus dimensions of an ``n``-chip slice
        (:mod:`codesign.network.mesh_mapping`); no mapping when the layout does not tile the
        slice evenly (row-major geometry for every group)."""
        sizes = [size for _, size in self.layout.sizes]
        extents = mesh_mapping.in_slice_extents(sizes, n)
        if extents is None:
            return
        shape, axes = mesh_mapping.mesh_slice(max_dims, n, extents)
        self._torus_shape = shape
        self._mesh_axes = {d: a for (d, _), a in zip(self.layout.sizes, axes, strict=True)}

    @property
    def mesh_axes(self) -> dict[str, mesh_mapping.Axes]:
        """Layout dim -> the torus dimensions it occupies whole (``None``: row-major
        fallback); empty unless the domain is a torus with ``mapping: mesh``."""
        return dict(self._mesh_axes)

    @property
    def torus_shape(self) -> tuple[int, ...] | None:
        """The job's torus slice shape on a torus scale-up domain, else ``None``."""
        return self._torus_shape

    def _group_generators(self, group: str) -> tuple[tuple[int, int], ...]:
        """``(size, stride)`` pairs whose digit sums are the rank ids of rank 0's group."""
        return self._generators.get(group) or tuple(
            (self.layout.size(d), self.layout.stride(d)) for d in group_dims(group))

    def _slice_generators(self, group: str) -> tuple[tuple[int, int], ...]:
        """Generators of rank 0's ``group`` in the slice's row-major chip ids: the whole
        torus dimensions of its dims under a mesh mapping, else its rank generators."""
        if self._mesh_axes and group not in self._generators:
            axes = [self._mesh_axes[d] for d in group_dims(group)]
            if all(a is not None for a in axes):
                assert self._torus_shape is not None
                flat = [i for a in axes for i in a or ()]
                return mesh_mapping.generators(self._torus_shape, flat)
        return self._group_generators(group)

    def _same_rail(self, group: str, p: GroupPlacement) -> bool:
        """Whether every member of ``group`` has the same local rank in its domain (one rail
        of a rail-optimized fabric) and the group fits in one rail block."""
        assert isinstance(self.topology, TwoTierTopology)
        out = self.topology.scale_out
        d = self.domain_size
        if not all(n <= 1 or s % d == 0 for n, s in self._group_generators(group)):
            return False
        return out.rail_block_gpus is None or p.span <= out.rail_block_gpus

    def _link_bandwidth(self) -> float:
        """Bytes/s per torus link per direction (the chip's bandwidth over its links)."""
        assert self._torus_shape is not None
        return self._up.bandwidth / (2 * len(self._torus_shape))

    def _torus_cost(self, kind: str, group: str, size: float) -> CommCost:
        g = self.geometry(group)
        link = self._link_bandwidth() * self._up.efficiency(size)
        link = max(link, 1e-30)
        alpha = self._up.alpha
        if kind in ("p2p", "all_to_all"):
            return CommCost(torus.collective_time(kind, g, size, link, alpha, False), "direct",
                            self._up.name)
        ring = torus.collective_time(kind, g, size, link, alpha, False)
        if self.algorithm == "ring":
            return CommCost(ring, "torus_ring", self._up.name)
        multi = torus.collective_time(kind, g, size, link, alpha, True)
        return (CommCost(multi, "torus_multiring", self._up.name) if multi < ring
                else CommCost(ring, "torus_ring", self._up.name))

    def _torus_tier(self, group: str) -> Tier:
        """The scale-up tier a group spanning several slices sees inside its slice: the ring
        bandwidth that moves a reduce-scatter as fast as the torus does for its in-slice
        members."""
        tier = self._torus_tiers.get(group)
        if tier is not None:
            return tier
        g = self.geometry(group)
        link = self._link_bandwidth()
        if g.size > 1:
            t = torus.reduce_scatter_time(g, 1.0, link, 0.0, self.algorithm != "ring")
            bandwidth = (g.size - 1) / g.size / t
        else:
            bandwidth = link
        up = self._up
        tier = Tier(name=up.name, bandwidth=bandwidth, alpha=up.alpha,
                    efficiency_max=up.efficiency_max,
                    efficiency_half_size=up.efficiency_half_size, in_network=False,
                    log_tree=False)
        self._torus_tiers[group] = tier
        return tier

    def group_tier(self, kind: str, p: GroupPlacement) -> str:
        """Tier a ``kind`` collective on placement ``p`` runs on (for measured lookups)."""
        if isinstance(self.topology, FullFlatTopology):
            return "fullflat"
        if not p.crosses_domains and (kind != "p2p" or p.aligned):
            return "scale_up"
        if kind != "p2p" and p.ranks_per_domain > 1:
            return "mixed"
        return "scale_out"

    def _measured(self, kind: str, p: GroupPlacement, size: float) -> CommCost | None:
        """Cost from the measured collectives table, or ``None`` where it does not cover."""
        assert self.measured is not None
        tier = self.group_tier(kind, p)
        t = self.measured.lookup(kind, p.size, size, tier)
        return None if t is None else CommCost(t, "measured", tier)

    def _best_flat(self, kind: str, n: int, size: float, tier: Tier) -> CommCost:
        """Fastest requested flat algorithm for ``kind`` on ``tier``."""
        bw = tier.bw(size)
        best = CommCost(math.inf, "none", tier.name)
        for alg in self._flat_choices(kind, tier):
            t = alg.time(kind, size, n, bw, tier.alpha)
            if t < best.time_s:
                best = CommCost(t, alg.name, tier.name)
        return best

    def _flat_choices(self, kind: str, tier: Tier) -> tuple[CollectiveAlgorithm, ...]:
        """The flat algorithms the requested one prices for ``kind`` on ``tier`` (cached)."""
        key = (kind, tier)
        hit = self._choices.get(key)
        if hit is None:
            names = self._requested.flat_choices(tier.algorithms(kind))
            hit = self._choices[key] = tuple(registry.algorithm(a) for a in names)
        return hit

    def _best_hierarchical(
        self, kind: str, k: int, m: int, size: float, up: Tier, out: Tier
    ) -> CommCost:
        """Fastest two-level scheme for ``kind`` (best applicable flat algorithm per phase)."""
        intra_kind = "all_gather" if kind == "all_gather" else "reduce_scatter"
        inter_kind = kind
        inner_algs = up.algorithms(intra_kind)
        outer_algs = self._requested.outer_choices(out.algorithms(inter_kind))
        bw_up = up.bw(size)
        bw_out = out.bw(size / k)
        best = math.inf
        for intra in inner_algs:
            for inter in outer_algs:
                t = hierarchical(kind, size, k, m, bw_up, up.alpha, bw_out, out.alpha,
                                 intra, inter)
                best = min(best, t)
        return CommCost(best, "hierarchical", "mixed")
