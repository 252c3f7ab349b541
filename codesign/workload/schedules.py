"""Pipeline schedules: the order in which each stage runs its forward and backward passes.

Each schedule returns, per pipeline stage, a list of ``(phase, microbatch, chunk)`` with
``phase`` ``"F"`` or ``"B"``. Orders follow Megatron-LM's implementations:

* ``gpipe``: all forwards, then all backwards (Huang et al. 2019).
* ``1f1b``: ``pp - stage - 1`` warm-up forwards, then one-forward-one-backward, then cool-down
  (PipeDream-Flush, Narayanan et al. 2021).
* ``interleaved``: virtual chunks; warm-up ``2·(pp - stage - 1) + (vpp - 1)·pp``; forward
  ``k`` runs chunk ``(k mod pp·vpp) // pp`` of micro-batch ``(k // (pp·vpp))·pp + k mod pp``;
  backwards visit chunks in reverse (Narayanan et al. 2021, Sec. 2.2).
"""

from __future__ import annotations

Step = tuple[str, int, int]


def gpipe(pp: int, n_mb: int) -> list[list[Step]]:
    return [[("F", m, 0) for m in range(n_mb)] + [("B", m, 0) for m in range(n_mb)]
            for _ in range(pp)]


def one_f_one_b(pp: int, n_mb: int) -> list[list[Step]]:
    out = []
    for stage in range(pp):
        warm = min(pp - stage - 1, n_mb)
        order: list[Step] = [("F", m, 0) for m in range(warm)]
        for i in range(n_mb - warm):
            order += [("F", warm + i, 0), ("B", i, 0)]
        order += [("B", m, 0) for m in range(n_mb - warm, n_mb)]
        out.append(order)
    return out


def interleaved(pp: int, vpp: int, n_mb: int) -> list[list[Step]]:
    if n_mb % pp:
        raise ValueError(f"interleaved schedule needs micro-batches ({n_mb}) divisible by pp")
    total = n_mb * vpp
    group = pp * vpp

    def fwd(k: int) -> Step:
        return ("F", (k // group) * pp + k % pp, (k % group) // pp)

    def bwd(k: int) -> Step:
        return ("B", (k // group) * pp + k % pp, vpp - 1 - (k % group) // pp)

    out = []
    for stage in range(pp):
        warm = min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
        order = [fwd(k) for k in range(warm)]
        for i in range(total - warm):
            order += [fwd(warm + i), bwd(i)]
        order += [bwd(k) for k in range(total - warm, total)]
        out.append(order)
    return out


def schedule(kind: str, pp: int, vpp: int, n_mb: int) -> list[list[Step]]:
    """Per-stage orders for schedule ``kind`` (``gpipe``, ``1f1b`` or ``interleaved``)."""
    if kind == "gpipe":
        return gpipe(pp, n_mb)
    if kind == "1f1b":
        return one_f_one_b(pp, n_mb)
    if kind == "interleaved":
        return interleaved(pp, vpp, n_mb)
    raise ValueError(f"unknown schedule {kind!r}; allowed: gpipe, 1f1b, interleaved")


def max_in_flight(order: list[Step], weights: dict[int, float]) -> float:
    """Peak sum of ``weights[chunk]`` over forwards not yet matched by their backward."""
    live = peak = 0.0
    for phase, _, chunk in order:
        live += weights[chunk] if phase == "F" else -weights[chunk]
        peak = max(peak, live)
    return peak
