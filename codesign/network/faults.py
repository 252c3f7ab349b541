"""Link faults on the command line and collective costs on a faulted or shared network.

* :func:`parse_degraded` / :func:`parse_failed` read ``KIND:INDEX[:FACTOR]`` link specs
  (``nic:12:0.5``, ``leaf:3``; kinds in :data:`~codesign.network.flows.LINK_KINDS`).
* :class:`ScaledCosts` prices a collective whose group keeps fractions ``f_up`` / ``f_out``
  of its scale-up / scale-out bandwidth (from :func:`~codesign.network.flows.tier_factors`):
  the alpha-beta model of :class:`~codesign.network.model.NetworkModel` with those tiers'
  bandwidths scaled and the algorithm the healthy network chose (a collective library does
  not re-plan around a slow link). It also splits a collective into latency and transfer
  time and tells which tiers the transfer loads, for flow-level contention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from codesign.errors import SpecError
from codesign.network.algorithms import selectable_names
from codesign.network.flows import LINK_KINDS, LinkFault
from codesign.network.model import NetworkModel
from codesign.specs.topology import FullFlatTopology, TwoTierTopology
from codesign.units import MB

#: other names accepted for a link kind
ALIASES = {"nvlink": "scaleup", "scale_up": "scaleup", "scale-up": "scaleup", "up": "scaleup"}
#: bandwidth multiplier standing for "infinitely fast" when isolating latency terms
_FAST = 1e9


def _kind_index(spec: str, text: str, flag: str) -> tuple[str, int]:
    kind, _, index = spec.partition(":")
    kind = ALIASES.get(kind.strip().lower(), kind.strip().lower())
    if kind not in LINK_KINDS or not index.strip().lstrip("-").isdigit():
        raise SpecError(f"{flag} '{text}': expected KIND:INDEX with KIND one of "
                        f"{', '.join(LINK_KINDS)} (e.g. nic:12, leaf:3)")
    return kind, int(index)


def parse_degraded(text: str, flag: str = "--degraded-link") -> LinkFault:
    """``KIND:INDEX:FACTOR``: the link keeps ``FACTOR`` (0 < FACTOR <= 1) of its bandwidth."""
    spec, sep, factor = text.rpartition(":")
    if not sep or ":" not in spec:
        raise SpecError(f"{flag} '{text}': expected KIND:INDEX:FACTOR, e.g. nic:12:0.5")
    kind, index = _kind_index(spec, text, flag)
    try:
        f = float(factor)
    except ValueError:
        raise SpecError(f"{flag} '{text}': FACTOR must be a number in (0, 1]") from None
    if not 0.0 < f <= 1.0:
        raise SpecError(f"{flag} '{text}': FACTOR must be in (0, 1], got {factor}")
    return LinkFault(kind, index, f)


def parse_failed(text: str, flag: str = "--failed-link") -> LinkFault:
    """``KIND:INDEX``: the link is down and its traffic is routed around it."""
    kind, index = _kind_index(text, text, flag)
    return LinkFault(kind, index, 0.0)


@dataclass(frozen=True)
class CommProfile:
    """A collective as the contention model sees it (seconds at full speed).

    ``usage`` maps ``(tier, direction)`` (tier ``up`` or ``out``, direction ``tx``/``rx``)
    to the fraction of a rank's link on that tier the transfer keeps busy, averaged over the
    transfer (the tier's share of the transfer time × the achieved fraction of the wire
    rate at that message size × the bandwidth factor of a faulted group)."""

    time_s: float
    latency_s: float
    usage: tuple[tuple[tuple[str, str], float], ...]

    @property
    def transfer_s(self) -> float:
        return max(self.time_s - self.latency_s, 0.0)


def combine(profiles: list[CommProfile]) -> CommProfile:
    """Profiles of collectives that run back to back as one task: times add, usages are
    weighted by transfer time."""
    time_s = sum(p.time_s for p in profiles)
    lat = sum(p.latency_s for p in profiles)
    tr = sum(p.transfer_s for p in profiles)
    usage: dict[tuple[str, str], float] = {}
    if tr > 0:
        for p in profiles:
            for key, u in p.usage:
                usage[key] = usage.get(key, 0.0) + u * p.transfer_s / tr
    return CommProfile(time_s, lat, tuple(sorted(usage.items())))


class ScaledCosts:
    """Collective costs of ``network``'s layout when a group keeps a fraction of a tier's
    bandwidth. ``cost(..., 1.0, 1.0)`` is exactly ``network.collective(...).time_s``."""

    def __init__(self, network: NetworkModel) -> None:
        self.network = network
        self._models: dict[tuple[float, float, str], NetworkModel] = {}
        self._profiles: dict[tuple[str, str, float, float, float], CommProfile] = {}

    def _model(self, f_up: float, f_out: float, algorithm: str) -> NetworkModel:
        key = (f_up, f_out, algorithm)
        model = self._models.get(key)
        if model is None:
            topo = self.network.topology
            scaled: TwoTierTopology | FullFlatTopology
            if isinstance(topo, FullFlatTopology):
                scaled = topo.model_copy(update={"bandwidth_GBps": topo.bandwidth_GBps * f_up})
            else:
                scaled = topo.model_copy(update={
                    "scale_up": topo.scale_up.model_copy(
                        update={"bandwidth_GBps": topo.scale_up.bandwidth_GBps * f_up}),
                    "scale_out": topo.scale_out.model_copy(
                        update={"nic_bandwidth_Gbps": topo.scale_out.nic_bandwidth_Gbps
                                * f_out})})
            model = NetworkModel(scaled, self.network.layout, algorithm,
                                 routing=self.network.routing)
            self._models[key] = model
        return model

    def _forced(self, algorithm: str) -> str:
        """The algorithm a faulted group keeps: the one costed when a plan may request it,
        else (direct, measured, none) the plan's."""
        return algorithm if algorithm in selectable_names() else self.network.algorithm

    def cost(self, kind: str, group: str, size: float, f_up: float = 1.0,
             f_out: float = 1.0) -> float:
        """Seconds for ``kind`` on every ``group`` with the tiers' bandwidths scaled."""
        base = self.network.collective(kind, group, size)
        if (f_up == 1.0 and f_out == 1.0) or base.tier == "local":
            return base.time_s
        if base.algorithm == "measured":  # a measured time has no bandwidth term to scale
            used = {"scale_up": f_up, "fullflat": f_up, "scale_out": f_out}.get(
                base.tier, min(f_up, f_out))
            return base.time_s / used
        return self._model(f_up, f_out, self._forced(base.algorithm)).collective(
            kind, group, size).time_s

    def profile(self, kind: str, group: str, size: float, f_up: float = 1.0,
                f_out: float = 1.0) -> CommProfile:
        """Latency / transfer split and link usage of one collective (see
        :class:`CommProfile`): latency is the cost with both tiers infinitely fast; a tier's
        transfer share is the time its bandwidth adds."""
        key = (kind, group, size, f_up, f_out)
        hit = self._profiles.get(key)
        if hit is not None:
            return hit
        t = self.cost(kind, group, size, f_up, f_out)
        base = self.network.collective(kind, group, size)
        if t <= 0.0 or base.tier == "local":
            prof = CommProfile(t, t, ())
        else:
            alg = self._forced(base.algorithm)
            big = _FAST

            def at(up: float, out: float) -> float:
                return self._model(up, out, alg).collective(kind, group, size).time_s

            lat = min(at(big, big), t)
            tr = t - lat
            flat = isinstance(self.network.topology, FullFlatTopology)
            if flat or base.tier in ("scale_up", "fullflat"):
                shares = {"up": 1.0}
            elif base.tier == "scale_out":
                shares = {"out": 1.0}
            else:  # both tiers: each one's share is the time its bandwidth adds
                up_t = max(at(f_up, big) - lat, 0.0)
                out_t = max(at(big, f_out) - lat, 0.0)
                tot = up_t + out_t
                shares = ({"up": up_t / tot, "out": out_t / tot} if tot > 0
                          else {"up": 0.5, "out": 0.5})
            usage: list[tuple[tuple[str, str], float]] = []
            for tier, share in shares.items():
                f = f_up if tier == "up" else f_out
                u = min(1.0, share * self.efficiency(tier, size) * f)
                if tr > 0 and u > 0:
                    directions = ("tx",) if kind == "p2p" else ("tx", "rx")
                    usage += [((tier, d), u) for d in directions]
            prof = CommProfile(t, lat, tuple(usage))
        self._profiles[key] = prof
        return prof

    def efficiency(self, tier: str, size: float) -> float:
        """Achieved fraction of a ``tier`` link's wire rate for ``size``-byte messages."""
        topo = self.network.topology
        spec = (topo if isinstance(topo, FullFlatTopology)
                else topo.scale_up if tier == "up" else topo.scale_out)
        half = spec.efficiency_half_size_MB * MB
        if half <= 0:
            return spec.efficiency_max
        if size <= 0 or not math.isfinite(size):
            return 0.0
        return spec.efficiency_max * size / (size + half)
