"""The space of parallelism plans a search covers, and the enumeration of its valid plans.

A :class:`SearchSpace` lists the allowed values of each searched plan field (``None``: automatic
values derived from the model and the system, see :func:`axis_values`). The data-parallel size is
derived (``num_gpus / (tp·pp·cp)``); every other plan setting (global batch, sequence length,
dtype, schedule, expert TP, placement ...) comes from the run, or from ``fixed``, which also pins
searched fields.

Validity is decided by the simulator's own rules, not a copy of them: the
:class:`~codesign.specs.parallel.ParallelismSpec` validator and
:func:`~codesign.workload.dims.plan_problems`. Those rules only involve the structural fields
(tp, pp, cp, ep, vpp, micro-batch size, with the run's settings), so they are checked once per
structural combination and the switches (recompute, ZeRO stage, sequence parallelism, overlap)
are expanded afterwards. Switches that cannot change anything for a plan are not expanded (only
the first listed value is kept): sequence parallelism and TP communication overlap when tp = 1,
gradient-reduce overlap when the data-parallel group has one rank, parameter-gather overlap when
it has one rank or under ZeRO-0 (the engine gives the same result for every value).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Literal

from pydantic import Field, StrictInt, ValidationError, model_validator

from codesign.errors import SpecError
from codesign.specs.base import Spec, format_validation_error
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.specs.topology import TwoTierTopology
from codesign.workload.dims import plan_problems

Recompute = Literal["none", "selective", "full"]

#: the searched plan fields, in enumeration order
SEARCH_FIELDS: tuple[str, ...] = (
    "tp", "pp", "cp", "ep", "vpp", "micro_batch_size", "recompute", "zero_stage",
    "sequence_parallel", "tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather",
)
STRUCTURAL: tuple[str, ...] = SEARCH_FIELDS[:6]
SWITCHES: tuple[str, ...] = SEARCH_FIELDS[6:]

#: automatic micro-batch sizes and interleaving depths
AUTO_MICRO_BATCH = (1, 2, 4, 8)
AUTO_VPP = (1, 2, 3, 4, 6, 8)
#: largest automatic TP / PP / CP / EP degree
AUTO_MAX_DEGREE = 64
#: automatic CP keeps at least this many tokens per rank
AUTO_CP_MIN_TOKENS = 4096


class SearchSpace(Spec):
    """Allowed values per searched plan field; ``None`` = automatic (see :func:`axis_values`)."""

    tp: list[StrictInt] | None = Field(default=None, min_length=1)
    pp: list[StrictInt] | None = Field(default=None, min_length=1)
    cp: list[StrictInt] | None = Field(default=None, min_length=1)
    ep: list[StrictInt] | None = Field(default=None, min_length=1)
    vpp: list[StrictInt] | None = Field(default=None, min_length=1)
    micro_batch_size: list[StrictInt] | None = Field(default=None, min_length=1)
    recompute: list[Recompute] | None = Field(default=None, min_length=1)
    zero_stage: list[Literal[0, 1, 2, 3]] | None = Field(default=None, min_length=1)
    sequence_parallel: list[bool] | None = Field(default=None, min_length=1)
    tp_comm_overlap: list[bool] | None = Field(default=None, min_length=1)
    overlap_grad_reduce: list[bool] | None = Field(default=None, min_length=1)
    overlap_param_gather: list[bool] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        for name in STRUCTURAL:
            values = getattr(self, name)
            if values is not None and any(v < 1 for v in values):
                raise ValueError(f"{name}: values must be whole numbers >= 1, got {values}")
        return self


@dataclass(frozen=True, slots=True)
class PlanPoint:
    """One searched plan: the values of the searched fields (dp is derived)."""

    tp: int
    pp: int
    cp: int
    ep: int
    vpp: int
    micro_batch_size: int
    recompute: str
    zero_stage: int
    sequence_parallel: bool
    tp_comm_overlap: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool

    def settings(self) -> dict[str, Any]:
        """The searched fields as plan settings."""
        return {name: getattr(self, name) for name in SEARCH_FIELDS}


@dataclass
class Enumeration:
    """Valid plans of a space, and how many plans each rule rejected.

    ``rejected`` counts full plans (structural combination × its switch combinations) by
    reason class (:func:`reason_class` of the first problem)."""

    base: TrainingRun
    axes: dict[str, list[Any]]
    plans: list[PlanPoint]
    rejected: Counter[str] = field(default_factory=Counter)


def reason_class(reason: str) -> str:
    """A reason with its numbers replaced by ``N`` (plans that fail the same rule share it)."""
    if reason.startswith("out of memory"):
        return "out of memory"
    return re.sub(r"\b\d+(\.\d+)?\b", "N", reason)


def base_run(run: TrainingRun, fixed: dict[str, Any] | None) -> TrainingRun:
    """``run`` with the non-searched settings of ``fixed`` applied (validated).

    Raises :class:`SpecError` naming an unknown field or a bad value."""
    fixed = dict(fixed or {})
    allowed = set(ParallelismSpec.model_fields)
    unknown = sorted(set(fixed) - allowed)
    if unknown:
        raise SpecError(f"fixed: unknown plan field '{unknown[0]}'; allowed: "
                        f"{', '.join(sorted(allowed))}")
    if not fixed:
        return run
    data = run.parallel.model_dump()
    data.update(fixed)
    par = ParallelismSpec.parse(data, "fixed")
    return run.model_copy(update={"parallel": par})


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def auto_values(name: str, run: TrainingRun) -> list[Any]:
    """Automatic values of one searched field for ``run``'s model and system.

    tp: powers of two up to the scale-up domain (64 at most); pp: powers of two and divisors of
    the layer count up to min(layers, 64); cp: 1, and powers of two that keep at least 4,096
    tokens per rank (16 at most); ep: 1 for a dense model, else powers of two dividing the
    expert count (64 at most); vpp: 1, 2, 3, 4, 6, 8 where the layers split evenly over
    pp × vpp (Megatron-LM's condition for interleaving); micro-batch 1, 2, 4, 8; recompute all
    three; ZeRO 0-3; sequence parallelism and TP overlap both ways; DP overlaps on (they never
    slow the engine down; list both values to search them).
    """
    m, n = run.model, run.num_gpus
    if name == "tp":
        domain = (run.topology.scale_up.domain_size if isinstance(run.topology, TwoTierTopology)
                  else n)
        return _powers_of_two(min(domain, n, AUTO_MAX_DEGREE))
    if name == "pp":
        top = min(m.num_layers, n, AUTO_MAX_DEGREE)
        divisors = {d for d in range(1, top + 1) if m.num_layers % d == 0}
        return sorted(divisors | set(_powers_of_two(top)))
    if name == "cp":
        top = min(run.seq_len // AUTO_CP_MIN_TOKENS, 16, n)
        return [1] + [c for c in _powers_of_two(top) if c > 1]
    if name == "ep":
        if m.moe is None:
            return [1]
        return [e for e in _powers_of_two(min(m.moe.num_experts, n, AUTO_MAX_DEGREE))
                if m.moe.num_experts % e == 0]
    if name == "vpp":
        return list(AUTO_VPP)
    if name == "micro_batch_size":
        return list(AUTO_MICRO_BATCH)
    if name == "recompute":
        return ["none", "selective", "full"]
    if name == "zero_stage":
        return [0, 1, 2, 3]
    if name in ("sequence_parallel", "tp_comm_overlap"):
        return [False, True]
    if name in ("overlap_grad_reduce", "overlap_param_gather"):
        return [True]
    raise ValueError(f"not a searched field: {name}")


def axis_values(run: TrainingRun, space: SearchSpace | None,
                fixed: dict[str, Any] | None = None) -> dict[str, list[Any]]:
    """Values searched per field: pinned by ``fixed``, listed in ``space``, or automatic."""
    space = space or SearchSpace()
    fixed = fixed or {}
    axes: dict[str, list[Any]] = {}
    for name in SEARCH_FIELDS:
        if name in fixed:
            axes[name] = [fixed[name]]
        elif getattr(space, name) is not None:
            axes[name] = list(dict.fromkeys(getattr(space, name)))
        else:
            axes[name] = auto_values(name, run)
    if run.parallel.fsdp:  # FSDP is ZeRO-3 whatever zero_stage says
        axes["zero_stage"] = [3]
    return axes


def _auto_vpp_ok(run: TrainingRun, pp: int, vpp: int) -> bool:
    return vpp == 1 or (pp > 1 and run.model.num_layers % (pp * vpp) == 0)


def switch_combos(axes: dict[str, list[Any]], tp: int, dense_ranks: int) -> list[tuple[Any, ...]]:
    """Switch settings (recompute, zero, sp, tp overlap, grad overlap, gather overlap) to expand
    for one structural combination: switches that change nothing keep their first value.
    ``dense_ranks``: ranks of the group that reduces dense gradients (dp, or dp × cp)."""
    sp = axes["sequence_parallel"] if tp > 1 else axes["sequence_parallel"][:1]
    tpo = axes["tp_comm_overlap"] if tp > 1 else axes["tp_comm_overlap"][:1]
    ogr = axes["overlap_grad_reduce"] if dense_ranks > 1 else axes["overlap_grad_reduce"][:1]
    out: list[tuple[Any, ...]] = []
    for rc, zero in product(axes["recompute"], axes["zero_stage"]):
        opg = axes["overlap_param_gather"]
        if dense_ranks <= 1 or zero == 0:
            opg = opg[:1]
        out.extend((rc, zero, *rest) for rest in product(sp, tpo, ogr, opg))
    return out


def structural_problems(base: TrainingRun, tp: int, pp: int, cp: int, ep: int, vpp: int,
                        mbs: int) -> list[str]:
    """Reasons (the simulator's own rules) why a structural combination cannot run."""
    data = base.parallel.model_dump()
    data.update(tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, micro_batch_size=mbs)
    try:
        par = ParallelismSpec.model_validate(data)
    except ValidationError as exc:
        return [format_validation_error(exc, "plan")]
    return plan_problems(base.model_copy(update={"parallel": par}))


def enumerate_plans(run: TrainingRun, space: SearchSpace | None = None,
                    fixed: dict[str, Any] | None = None) -> Enumeration:
    """Every valid plan of ``space`` (with ``fixed`` pinned) on ``run``'s model and system."""
    base = base_run(run, fixed)
    space = space or SearchSpace()
    axes = axis_values(base, space, fixed)
    auto_vpp = space.vpp is None and "vpp" not in (fixed or {})
    plans: list[PlanPoint] = []
    rejected: Counter[str] = Counter()
    n = base.num_gpus
    for tp, pp, cp, ep, vpp, mbs in product(*(axes[k] for k in STRUCTURAL)):
        if auto_vpp and not _auto_vpp_ok(base, pp, vpp):
            continue
        par = tp * pp * cp
        dp = base.parallel.dp if base.parallel.dp is not None else max(n // par, 1)
        dense_ranks = dp * cp if cp > 1 else dp
        combos = switch_combos(axes, tp, dense_ranks)
        problems = structural_problems(base, tp, pp, cp, ep, vpp, mbs)
        if problems:
            rejected[reason_class(problems[0])] += len(combos)
            continue
        plans.extend(PlanPoint(tp, pp, cp, ep, vpp, mbs, *c) for c in combos)
    return Enumeration(base=base, axes=axes, plans=plans, rejected=rejected)


def plan_run(base: TrainingRun, point: PlanPoint) -> TrainingRun:
    """The validated run of one plan (``base`` supplies every non-searched setting)."""
    data = base.parallel.model_dump()
    data.update(point.settings())
    par = ParallelismSpec.parse(data, "plan")
    return base.model_copy(update={"parallel": par})
