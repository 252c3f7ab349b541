"""The space of parallelism plans a search covers, and the enumeration of its valid plans.

A :class:`SearchSpace` lists the allowed values of each searched plan field (``None``: automatic
values derived from the model and the system, see :func:`axis_values`). The data-parallel size is
derived (``num_gpus / (tp·pp·cp)``); every other plan setting (global batch, sequence length,
dtype, schedule, expert TP, placement ...) comes from the run, or from ``fixed``, which also pins
searched fields.

The searched fields and the ``SearchSpace`` model are declared on the plan spec
(:mod:`codesign.search.fields`); ``schedule`` is searched only when values are listed for it.

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
import typing
from collections import Counter
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Literal

from pydantic import ValidationError

from codesign.errors import SpecError
from codesign.search.fields import (
    PlanPoint,
    on_request_fields,
    searched_fields,
    space_model,
    structural_fields,
    switch_fields,
)
from codesign.specs.base import format_validation_error
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.specs.topology import TwoTierTopology
from codesign.workload.dims import plan_problems

#: the always-searched plan fields, in enumeration order (declared on the spec: see
#: :mod:`codesign.search.fields`); ``schedule`` is searched on request
SEARCH_FIELDS: tuple[str, ...] = searched_fields(ParallelismSpec, ("structural", "switch"))
STRUCTURAL: tuple[str, ...] = structural_fields()
SWITCHES: tuple[str, ...] = switch_fields()

#: automatic micro-batch sizes and interleaving depths
AUTO_MICRO_BATCH = (1, 2, 4, 8)
AUTO_VPP = (1, 2, 3, 4, 6, 8)
#: largest automatic TP / PP / CP / EP degree
AUTO_MAX_DEGREE = 64
#: automatic CP keeps at least this many tokens per rank
AUTO_CP_MIN_TOKENS = 4096

#: allowed values per searched field of :class:`ParallelismSpec`; ``None`` = automatic
SearchSpace = space_model(ParallelismSpec)


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
    spec = type(run.parallel)
    allowed = set(spec.model_fields)
    unknown = sorted(set(fixed) - allowed)
    if unknown:
        raise SpecError(f"fixed: unknown plan field '{unknown[0]}'; allowed: "
                        f"{', '.join(sorted(allowed))}")
    if not fixed:
        return run
    data = run.parallel.model_dump()
    data.update(fixed)
    par = spec.parse(data, "fixed")
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
    pp × vpp (Megatron-LM's condition for interleaving); micro-batch 1, 2, 4, 8; DP overlaps
    on (they never slow the engine down; list both values to search them). Any other field:
    every choice of a ``Literal`` (recompute, ZeRO stage, schedule), both values of a switch
    (sequence parallelism, TP overlap), else the run's value.
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
    if name in ("overlap_grad_reduce", "overlap_param_gather"):
        return [True]
    spec = type(run.parallel)
    if name not in spec.model_fields:
        raise ValueError(f"not a searched field: {name}")
    ann = spec.model_fields[name].annotation
    if typing.get_origin(ann) is Literal:
        return list(typing.get_args(ann))
    if ann is bool:
        return [False, True]
    return [getattr(run.parallel, name)]


def axis_values(run: TrainingRun, space: Any | None,
                fixed: dict[str, Any] | None = None) -> dict[str, list[Any]]:
    """Values searched per field: pinned by ``fixed``, listed in ``space``, or automatic.
    Fields searched on request (``schedule``) are axes only when ``space`` lists them."""
    spec = type(run.parallel)
    space = space or space_model(spec)()
    fixed = fixed or {}
    axes: dict[str, list[Any]] = {}
    for name in searched_fields(spec):
        listed = getattr(space, name, None)
        if name in fixed:
            if name in on_request_fields(spec):
                continue  # a pinned on-request field is a setting of the base run
            axes[name] = [fixed[name]]
        elif listed is not None:
            axes[name] = list(dict.fromkeys(listed))
        elif name not in on_request_fields(spec):
            axes[name] = auto_values(name, run)
    if run.parallel.fsdp:  # FSDP is ZeRO-3 whatever zero_stage says
        axes["zero_stage"] = [3]
    return axes


def _auto_vpp_ok(run: TrainingRun, pp: int, vpp: int) -> bool:
    return vpp == 1 or (pp > 1 and run.model.num_layers % (pp * vpp) == 0)


def switch_combos(axes: dict[str, list[Any]], tp: int, dense_ranks: int,
                  switches: tuple[str, ...] = SWITCHES) -> list[tuple[Any, ...]]:
    """Switch settings (``switches``, in order) to expand for one structural combination:
    switches that change nothing keep their first value (sequence parallelism and TP
    overlap at tp = 1, DP overlaps with one rank, gather overlap under ZeRO-0).
    ``dense_ranks``: ranks of the group that reduces dense gradients (dp, or dp × cp)."""
    lists = []
    for name in switches:
        vals = axes[name]
        if (name in ("sequence_parallel", "tp_comm_overlap") and tp <= 1) or \
                (name in ("overlap_grad_reduce", "overlap_param_gather") and dense_ranks <= 1):
            vals = vals[:1]
        lists.append(vals)
    if "overlap_param_gather" not in switches or "zero_stage" not in switches:
        return list(product(*lists))
    z, g = switches.index("zero_stage"), switches.index("overlap_param_gather")
    first = lists[g][0]
    return [c for c in product(*lists) if c[z] != 0 or c[g] == first]


def structural_problems(base: TrainingRun, **settings: Any) -> list[str]:
    """Reasons (the simulator's own rules) why a structural combination cannot run."""
    data = base.parallel.model_dump()
    data.update(settings)
    try:
        par = type(base.parallel).model_validate(data)
    except ValidationError as exc:
        return [format_validation_error(exc, "plan")]
    return plan_problems(base.model_copy(update={"parallel": par}))


def enumerate_plans(run: TrainingRun, space: Any | None = None,
                    fixed: dict[str, Any] | None = None) -> Enumeration:
    """Every valid plan of ``space`` (with ``fixed`` pinned) on ``run``'s model and system."""
    base = base_run(run, fixed)
    spec = type(base.parallel)
    space = space or space_model(spec)()
    axes = axis_values(base, space, fixed)
    auto_vpp = getattr(space, "vpp", None) is None and "vpp" not in (fixed or {})
    structural = tuple(k for k in searched_fields(spec, ("structural", "on_request"))
                       if k in axes)
    switches = switch_fields(spec)
    fields = structural + switches
    plans: list[PlanPoint] = []
    rejected: Counter[str] = Counter()
    n = base.num_gpus
    for values in product(*(axes[k] for k in structural)):
        st = dict(zip(structural, values, strict=True))
        tp, pp, cp = st["tp"], st["pp"], st["cp"]
        if auto_vpp and not _auto_vpp_ok(base, pp, st["vpp"]):
            continue
        par = tp * pp * cp
        dp = base.parallel.dp if base.parallel.dp is not None else max(n // par, 1)
        dense_ranks = dp * cp if cp > 1 else dp
        combos = switch_combos(axes, tp, dense_ranks, switches)
        problems = structural_problems(base, **st)
        if problems:
            rejected[reason_class(problems[0])] += len(combos)
            continue
        plans.extend(PlanPoint(fields, values + c) for c in combos)
    return Enumeration(base=base, axes=axes, plans=plans, rejected=rejected)


def plan_run(base: TrainingRun, point: PlanPoint) -> TrainingRun:
    """The validated run of one plan (``base`` supplies every non-searched setting)."""
    data = base.parallel.model_dump()
    data.update(point.settings())
    par = type(base.parallel).parse(data, "plan")
    return base.model_copy(update={"parallel": par})
