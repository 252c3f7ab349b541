"""Activation recompute of a validation row: what the row states, or the least that fits.

A row that states its recompute gets it (:func:`~codesign.validation.prose.read_recompute`);
one that states a number of recomputed layers per pipeline chunk
(:func:`~codesign.validation.prose.read_recompute_layers`) gets full recompute on that many
layers of each chunk (Megatron-Core ``--recompute-method block``; fewer when a chunk holds
fewer layers, as Megatron recomputes every layer then). A row that states none gets the least
recompute that fits in HBM, tried in this order: none, selective, full on the fewest layers
per chunk that fit (found per micro-batch size and interleaving depth with the memory check
alone, no simulation per layer count), full on every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from codesign.api import build_models, check_memory
from codesign.errors import InfeasiblePlan
from codesign.specs.run import TrainingRun
from codesign.validation.prose import (
    read_number,
    read_recompute,
    read_recompute_layers,
    read_recompute_modules,
    read_recompute_prose,
)
from codesign.workload.dims import largest_chunk_layers


@dataclass(frozen=True)
class RecomputeChoice:
    """One candidate group's recompute: ``kind`` (none / selective / full); with full,
    ``layers`` recomputed per chunk as stated (None: every layer), or ``least``: the fewest
    layers per chunk that fit, chosen per candidate run."""

    kind: str
    layers: int | None = None
    least: bool = False


def stated_recompute(cell: str, notes_text: str) -> str | None:
    """The recompute a row states: its ``activation_recompute`` cell, else (the cell empty,
    "not stated" or unreadable) selective when the row names Megatron-Core recompute modules
    (:func:`~codesign.validation.prose.read_recompute_modules`: "recompute_modules:
    [layernorm, moe_act]", "recomputation of RMSNorm and MLA up-projection"), else its free
    text's (:func:`~codesign.validation.prose.read_recompute_prose`: "with
    rematerialization", "remat_policy: minimal"); ``None`` when none states one."""
    kind = read_recompute(cell)
    if kind is None and read_recompute_modules(f"{cell} {notes_text}") is not None:
        return "selective"
    return read_recompute_prose(notes_text) if kind is None else kind


#: the hardware-to-model FLOPs ratio at and above which a row's utilizations imply full
#: recompute: recomputing every layer re-runs the forward, 2 of the 6 FLOPs per parameter per
#: token, so HFU / MFU = 8 / 6 = 1.33 (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 6:
#: "model FLOPs utilization" excludes and "hardware FLOPs utilization" includes the
#: recompute); selective recompute re-runs only the attention core (a few percent), and full
#: recompute on part of the layers lands between. 1.25 is the midpoint of 1.17 (half the
#: layers) and 1.33: the cut-off below which a row is not read as recomputing every layer
FULL_RECOMPUTE_HFU_RATIO = 1.25


def recompute_from_utilization(mfu_cell: str, hfu_cell: str) -> str | None:
    """"full" when the row's HFU and MFU cells (percent or fraction, as
    :func:`~codesign.validation.prose.read_number` reads them) differ by the recomputed
    forward (ratio :data:`FULL_RECOMPUTE_HFU_RATIO` or more); ``None`` otherwise."""
    mfu, hfu = read_number(mfu_cell), read_number(hfu_cell)
    if mfu is None or hfu is None or mfu.value <= 0:
        return None
    return "full" if hfu.value / mfu.value >= FULL_RECOMPUTE_HFU_RATIO else None


def recompute_choices(cell: str, notes_text: str, notes: list[str],
                      utilization: tuple[str, str] = ("", "")) -> list[RecomputeChoice]:
    """The recompute groups of a row, in the order they are tried (the first with a feasible
    run is reported). ``cell``: the row's ``activation_recompute``; ``notes_text``: its other
    prose (a stated layer count may sit there); ``utilization``: its ``mfu_pct`` and
    ``hfu_pct`` cells (:func:`recompute_from_utilization`)."""
    kind = stated_recompute(cell, notes_text)
    if kind is not None and read_recompute(cell) is None:
        notes.append(f"recompute {kind}, as the row's notes state it")
    if kind is None and recompute_from_utilization(*utilization) is not None:
        kind = "full"
        notes.append(f"recompute full: HFU {utilization[1]} / MFU {utilization[0]} is the "
                     f"recomputed forward (ratio >= {FULL_RECOMPUTE_HFU_RATIO}; 8/6 with "
                     "every layer recomputed)")
    layers = None if "uniform" in cell.lower() else (read_recompute_layers(cell)
                                                     or read_recompute_layers(notes_text))
    if layers is not None and kind in (None, "full"):
        notes.append(f"recompute: full on the first {layers} layers of each pipeline chunk, "
                     "as the row states (Megatron block method)")
        return [RecomputeChoice("full", layers)]
    if kind is not None:
        return [RecomputeChoice(kind)]
    notes.append("recompute not stated: the least recompute that fits in HBM")
    return [RecomputeChoice("none"), RecomputeChoice("selective"),
            RecomputeChoice("full", least=True), RecomputeChoice("full")]


def with_layers(run: TrainingRun, layers: int | None) -> TrainingRun:
    """``run`` recomputing ``layers`` per chunk (None: every layer)."""
    return run.model_copy(update={"parallel": run.parallel.model_copy(
        update={"recompute_num_layers": layers})})


def fits(run: TrainingRun) -> bool:
    """Whether ``run`` builds and fits in HBM (:func:`codesign.api.check_memory`)."""
    try:
        graph, _, network = build_models(run)
    except InfeasiblePlan:
        return False
    return check_memory(run, graph, network)[1] is None


def least_recompute_layers(run: TrainingRun) -> int | None:
    """The fewest layers per chunk ``run`` (recompute full) must recompute to fit in HBM,
    below every layer of its largest chunk; ``None`` when even that does not fit (or the
    chunks hold one layer). Memory does not grow with the count (a recomputed layer keeps its
    input only), so a bisection finds it."""
    most = largest_chunk_layers(run)
    if most < 2 or not fits(with_layers(run, most - 1)):
        return None
    low, high = 1, most - 1  # high fits
    while low < high:
        mid = (low + high) // 2
        if fits(with_layers(run, mid)):
            high = mid
        else:
            low = mid + 1
    return high


def apply_choice(run: TrainingRun, choice: RecomputeChoice) -> tuple[TrainingRun, str] | None:
    """``run`` (recompute ``choice.kind``) with the choice's layer count and the label of
    what was assumed ('' when nothing beyond the kind); ``None`` when ``choice`` gives this
    candidate no run (the least count: nothing short of every layer fits)."""
    if choice.least:
        n = least_recompute_layers(run)
        if n is None:
            return None
        return with_layers(run, n), (f"recompute: full on {n} of {largest_chunk_layers(run)} "
                                     "layers per chunk (Megatron block method)")
    if choice.layers is None:
        return run, ""
    most = largest_chunk_layers(run)
    if choice.layers >= most:  # Megatron recomputes every layer of a chunk this short
        return run, f"recompute: every layer ({most} per chunk)"
    return with_layers(run, choice.layers), ""
