"""Alpha-beta cost formulas for collectives: one pure function per (algorithm, kind).

The formulas live with their algorithm in :mod:`codesign.network.algorithms` (``ring``,
``tree``, ``in_network``, ``hierarchical``, ``direct``); this module gathers them under their
historical names and dispatches a flat algorithm by name (:func:`flat_collective`).

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

from codesign.network.algorithms import flat_algorithms, flat_time
from codesign.network.algorithms.base import INF
from codesign.network.algorithms.direct import all_to_all, p2p
from codesign.network.algorithms.hierarchical import HIERARCHICAL_PHASES, hierarchical
from codesign.network.algorithms.in_network import (
    in_network_all_gather,
    in_network_all_reduce,
    in_network_reduce_scatter,
)
from codesign.network.algorithms.ring import (
    ring_all_gather,
    ring_all_reduce,
    ring_broadcast,
    ring_reduce_scatter,
)
from codesign.network.algorithms.tree import log2_steps, tree_all_reduce


def flat_collective(
    kind: str, algorithm: str, size: float, n: int, bw: float, alpha: float
) -> float:
    """Seconds for ``kind`` with a single-tier ``algorithm``; ``math.inf`` when not applicable.

    Built-in applicable pairs: ring — all_reduce, all_gather, reduce_scatter, broadcast; tree —
    all_reduce; in_network — all_reduce, all_gather, reduce_scatter.
    """
    return flat_time(kind, algorithm, size, n, bw, alpha)


def flat_algorithm_names() -> tuple[str, ...]:
    """The registered single-tier algorithms, in order of preference."""
    return tuple(a.name for a in flat_algorithms())


__all__ = ["HIERARCHICAL_PHASES", "INF", "all_to_all", "flat_algorithm_names", "flat_collective",
           "hierarchical", "in_network_all_gather", "in_network_all_reduce",
           "in_network_reduce_scatter", "log2_steps", "p2p", "ring_all_gather", "ring_all_reduce",
           "ring_broadcast", "ring_reduce_scatter", "tree_all_reduce"]
