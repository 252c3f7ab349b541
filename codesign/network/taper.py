"""Oversubscribed (tapered) fabrics: how much a collective slows when its group leaves a pod.

A two-tier topology with ``oversubscription o > 1`` and ``full_bisection_gpus P`` is
non-blocking inside each pod of ``P`` consecutive ranks; a pod's uplinks carry ``P·B/o``
bytes/s per direction (``B``: one NIC). Every group of one kind runs its collective at the same
time (the symmetric engine prices one and assumes all run), so the load on a pod's uplinks is
the traffic of all the groups with members in that pod. With ``m`` members of a group in a pod
(the pod holds ``P/m`` groups' shares):

* **ring-like** collectives (ring, tree, the inter-domain phase of the two-level scheme) and
  **pipeline sends** visit a pod's members consecutively: each group has one flow leaving the
  pod, ``P/m`` flows share ``P·B/o``, so a crossing flow gets ``B·m/o``; the ring runs at its
  slowest edge: bandwidth ``B / max(1, o/m)``. A pipeline whose stages are ``s`` ranks apart has
  ``m = P/s`` (every hop crosses when ``s >= P``: ``m = 1``, the full taper ``o``).
* **all-to-all**: each rank sends the fraction ``1 - m/n`` of its data out of the pod, so the
  pod's demand is ``P·B·(1 - m/n)``: bandwidth ``B / max(1, o·(1 - m/n))``.

Placement therefore matters as it does on real tapered fabrics (the Llama 3 cluster keeps PP
inside DP so that only DP crosses its 1:7 layer; Llama 3 report, arXiv 2407.21783,
Sec. 3.3.1-3.3.2). The contention engine (:mod:`codesign.network.flows`) routes the same pod
uplinks flow by flow.
"""

from __future__ import annotations


def slowdown(kind: str, size: int, in_pod: int, oversubscription: float) -> float:
    """Factor (>= 1) dividing the scale-out bandwidth of a ``kind`` collective on groups of
    ``size`` ranks with ``in_pod`` members per pod, on a fabric tapered ``oversubscription``:1
    above the pod (see the module docstring)."""
    m = max(1, min(in_pod, size))
    if kind == "all_to_all":
        return max(1.0, oversubscription * (1.0 - m / size))
    return max(1.0, oversubscription / m)
