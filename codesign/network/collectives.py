"""Alpha-beta cost formulas for collectives: one pure function per (algorithm, kind).

Conventions (all functions):

* ``size`` is bytes per rank: all_reduce — the buffer; all_gather — the gathered OUTPUT (each
  rank contributes ``size / n``); reduce_scatter — the INPUT (each rank ends with ``size / n``);
  all_to_all — everything a rank sends including its own share (``size·(n-1)/n`` leaves it);
  broadcast — the buffer; p2p — the bytes sent.
* ``n`` is the number of ranks in the group; ``n <= 1`` or ``size <= 0`` costs 0.
* ``bw`` is bytes/s per GPU per direction, already multiplied by the message-size efficiency.
* ``alpha`` is the per-step latency in seconds.
* Every function returns seconds; ``math.inf`` means "not applicable" (see :func:`flat_collective`).
"""

from __future__ import annotations

import math

INF = math.inf


def _trivial(size: float, n: int) -> bool:
    if n < 1:
        raise ValueError(f"group size must be >= 1, got {n}")
    if size < 0:
        raise ValueError(f"message size must be >= 0 bytes, got {size}")
    return n == 1 or size == 0


def log2_steps(n: int) -> int:
    """``ceil(log2 n)``: depth of a binary tree over ``n`` ranks (0 for n <= 1)."""
    return max(0, (n - 1).bit_length())


# --- ring ------------------------------------------------------------------------------------


def ring_all_reduce(size: float, n: int, bw: float, alpha: float) -> float:
    """Ring all-reduce (reduce-scatter + all-gather): ``2(n-1)/n · S/bw + 2(n-1)·α``."""
    if _trivial(size, n):
        return 0.0
    return 2.0 * (n - 1) / n * size / bw + 2.0 * (n - 1) * alpha


def ring_all_gather(size: float, n: int, bw: float, alpha: float) -> float:
    """Ring all-gather of a ``S``-byte output: ``(n-1)/n · S/bw + (n-1)·α``."""
    if _trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + (n - 1) * alpha


def ring_reduce_scatter(size: float, n: int, bw: float, alpha: float) -> float:
    """Ring reduce-scatter of a ``S``-byte input: ``(n-1)/n · S/bw + (n-1)·α``."""
    if _trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + (n - 1) * alpha


def ring_broadcast(size: float, n: int, bw: float, alpha: float) -> float:
    """Pipelined ring (chain) broadcast: ``S/bw + (n-1)·α``."""
    if _trivial(size, n):
        return 0.0
    return size / bw + (n - 1) * alpha


# --- tree (NCCL double binary tree) ----------------------------------------------------------


def tree_all_reduce(size: float, n: int, bw: float, alpha: float) -> float:
    """Double-binary-tree all-reduce: ``2(n-1)/n · S/bw + 2·ceil(log2 n)·α``.

    Bandwidth term as a ring (the two trees each carry half the data), latency logarithmic.
    NCCL has no tree all-gather / reduce-scatter / broadcast (see :func:`flat_collective`).
    """
    if _trivial(size, n):
        return 0.0
    return 2.0 * (n - 1) / n * size / bw + 2.0 * log2_steps(n) * alpha


# --- in-network reduction (SHARP / NVLS) -----------------------------------------------------


def in_network_all_reduce(size: float, n: int, bw: float, alpha: float) -> float:
    """Switch-side all-reduce: each rank sends ``S`` up and receives ``S`` back: ``S/bw + 2α``."""
    if _trivial(size, n):
        return 0.0
    return size / bw + 2.0 * alpha


def in_network_all_gather(size: float, n: int, bw: float, alpha: float) -> float:
    """Switch multicast all-gather: ``(n-1)/n · S/bw + 2α``."""
    if _trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + 2.0 * alpha


def in_network_reduce_scatter(size: float, n: int, bw: float, alpha: float) -> float:
    """Switch-side reduce-scatter: ``(n-1)/n · S/bw + 2α``."""
    if _trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + 2.0 * alpha


# --- point to point and all-to-all -----------------------------------------------------------


def p2p(size: float, bw: float, alpha: float) -> float:
    """One point-to-point send of ``S`` bytes: ``S/bw + α``."""
    if size < 0:
        raise ValueError(f"message size must be >= 0 bytes, got {size}")
    if size == 0:
        return 0.0
    return size / bw + alpha


def all_to_all(
    size: float,
    n: int,
    per_domain: int,
    bw_up: float,
    alpha_up: float,
    bw_out: float,
    alpha_out: float,
) -> float:
    """Direct (pairwise) all-to-all over ``n`` ranks, ``k = per_domain`` of them per domain.

    ``max((k-1)/n · S/bw_up, (n-k)/n · S/bw_out) + α_up·[k>1] + α_out·[n>k]``: the intra- and
    inter-domain shares move on different links at the same time, and all sends are issued
    concurrently, so each tier used adds a single α. With ``k = n`` (one domain) this is
    ``(n-1)/n · S/bw_up + α_up``.
    """
    if _trivial(size, n):
        return 0.0
    k = max(1, min(per_domain, n))
    t_up = (k - 1) / n * size / bw_up if k > 1 else 0.0
    t_out = (n - k) / n * size / bw_out if n > k else 0.0
    return max(t_up, t_out) + (alpha_up if k > 1 else 0.0) + (alpha_out if n > k else 0.0)


# --- dispatch for single-tier (flat) algorithms ----------------------------------------------

FLAT_ALGORITHMS: tuple[str, ...] = ("ring", "tree", "in_network")

_FLAT = {
    ("ring", "all_reduce"): ring_all_reduce,
    ("ring", "all_gather"): ring_all_gather,
    ("ring", "reduce_scatter"): ring_reduce_scatter,
    ("ring", "broadcast"): ring_broadcast,
    ("tree", "all_reduce"): tree_all_reduce,
    ("in_network", "all_reduce"): in_network_all_reduce,
    ("in_network", "all_gather"): in_network_all_gather,
    ("in_network", "reduce_scatter"): in_network_reduce_scatter,
}


def flat_collective(
    kind: str, algorithm: str, size: float, n: int, bw: float, alpha: float
) -> float:
    """Seconds for ``kind`` with a single-tier ``algorithm``; ``math.inf`` when not applicable.

    Applicable pairs: ring — all_reduce, all_gather, reduce_scatter, broadcast; tree —
    all_reduce; in_network — all_reduce, all_gather, reduce_scatter.
    """
    fn = _FLAT.get((algorithm, kind))
    if fn is None:
        return INF
    return fn(size, n, bw, alpha)


# --- two-level hierarchical ------------------------------------------------------------------


#: phases of each two-level collective of an ``S``-byte buffer over ``n = k × m`` ranks:
#: (kind, "intra" or "inter", fraction of S the phase moves). The ``k`` inter-domain
#: collectives run concurrently, one per rail (each GPU has its own NIC).
#:
#: * all-reduce: RS_intra(S; k) + AR_inter(S/k; m) + AG_intra(S; k); with rings
#:   ``2(k-1)/k·S/bw_up + 2(k-1)·α_up + 2(m-1)/m·(S/k)/bw_out + 2(m-1)·α_out``.
#: * all-gather of an S-byte output: AG_inter(S/k; m) + AG_intra(S; k): each rail gathers its
#:   ``m`` pieces of ``S/n`` first (``(m-1)·S/n`` bytes cross the scale-out tier per rank, the
#:   minimum), then each domain gathers the ``k`` blocks of ``S/k``.
#: * reduce-scatter of an S-byte input: RS_intra(S; k) + RS_inter(S/k; m), the mirror image.
HIERARCHICAL_PHASES: dict[str, tuple[tuple[str, str, float], ...]] = {
    "all_reduce": (("reduce_scatter", "intra", 1.0), ("all_reduce", "inter", -1.0),
                   ("all_gather", "intra", 1.0)),
    "all_gather": (("all_gather", "inter", -1.0), ("all_gather", "intra", 1.0)),
    "reduce_scatter": (("reduce_scatter", "intra", 1.0), ("reduce_scatter", "inter", -1.0)),
}


def hierarchical(kind: str, size: float, per_domain: int, num_domains: int, bw_up: float,
                 alpha_up: float, bw_out: float, alpha_out: float, intra: str = "ring",
                 inter: str = "ring") -> float:
    """Two-level ``kind`` over ``n = k × m`` ranks (``k = per_domain``, ``m = num_domains``):
    the phases of :data:`HIERARCHICAL_PHASES`, intra-domain ones with flat algorithm ``intra``
    (ring or in_network) on the scale-up tier, inter-domain ones with ``inter`` (ring, tree or
    in_network) on the scale-out tier (a fraction of -1 means ``S/k``). Seconds."""
    if _trivial(size, per_domain * num_domains):
        return 0.0
    k, m = per_domain, num_domains
    total = 0.0
    for phase_kind, level, frac in HIERARCHICAL_PHASES[kind]:
        part = size / k if frac < 0 else size * frac
        if level == "intra":
            total += flat_collective(phase_kind, intra, part, k, bw_up, alpha_up)
        else:
            total += flat_collective(phase_kind, inter, part, m, bw_out, alpha_out)
    return total
