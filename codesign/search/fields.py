"""The searched plan fields, declared once on :class:`~codesign.specs.parallel.ParallelismSpec`.

A plan field is searched when its ``json_schema_extra`` has ``"search"``:

* ``"structural"``: decides which plans are valid (the spec validator and
  :func:`~codesign.workload.dims.plan_problems` are checked once per combination);
* ``"switch"``: expanded for every valid structural combination (no rule involves it);
* ``"on_request"``: structural, but searched only when the space lists values for it (or a
  ``--<field>-values`` flag does); otherwise the run's value applies to every plan
  (``schedule``).

``"order"`` (optional) places a field in the enumeration order; fields without it follow in
the spec's order. Everything the search derives per field comes from here: the searched fields
(:func:`searched_fields`), the :class:`SearchSpace <codesign.search.space.SearchSpace>` model
(:func:`space_model`), the ``--<flag>-values`` options, and :class:`PlanPoint`, which converts
to and from a spec. A subclass of ``ParallelismSpec`` with a new searched field gets all of
them with no other change.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any, Literal

from pydantic import Field, StrictInt, create_model, model_validator

from codesign.specs.base import Spec
from codesign.specs.parallel import ParallelismSpec

SearchKind = Literal["structural", "switch", "on_request"]

#: plan fields that cannot change one layer's operators or their timing (the estimator binds
#: layers once per combination of every other field)
LAYER_SHAPE_EXCLUDED = frozenset({
    "pp", "dp", "vpp", "schedule", "global_batch_size", "zero_stage", "fsdp",
    "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p"})


def _meta(spec: type[ParallelismSpec], name: str) -> dict[str, Any]:
    extra = spec.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


@cache
def searched_fields(spec: type[ParallelismSpec] = ParallelismSpec,
                    kinds: tuple[SearchKind, ...] = ("structural", "switch", "on_request")
                    ) -> tuple[str, ...]:
    """Fields of ``spec`` searched as one of ``kinds``, in enumeration order."""
    names = [k for k in spec.model_fields if _meta(spec, k).get("search") in kinds]
    pos = {k: i for i, k in enumerate(spec.model_fields)}
    big = len(pos)
    return tuple(sorted(names, key=lambda k: (int(_meta(spec, k).get("order", big)),
                                              pos[k])))


def structural_fields(spec: type[ParallelismSpec] = ParallelismSpec) -> tuple[str, ...]:
    """Fields that decide validity, always searched."""
    return searched_fields(spec, ("structural",))


def switch_fields(spec: type[ParallelismSpec] = ParallelismSpec) -> tuple[str, ...]:
    """Fields expanded for every valid structural combination."""
    return searched_fields(spec, ("switch",))


def on_request_fields(spec: type[ParallelismSpec] = ParallelismSpec) -> tuple[str, ...]:
    """Structural fields searched only when values are listed for them."""
    return searched_fields(spec, ("on_request",))


def _element_type(spec: type[ParallelismSpec], name: str) -> Any:
    ann = spec.model_fields[name].annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) is not Literal and len(args) == 1 and type(None) in \
            typing.get_args(ann):
        ann = args[0]  # X | None -> X
    return StrictInt if ann is int else ann


class SearchSpaceBase(Spec):
    """Allowed values per searched plan field; ``None`` = automatic (see
    :func:`codesign.search.space.axis_values`). Whole-number fields take values >= 1."""

    @model_validator(mode="after")
    def _check(self) -> SearchSpaceBase:
        for name, info in type(self).model_fields.items():
            values = getattr(self, name)
            if values and info.json_schema_extra == {"positive": True} and \
                    any(v < 1 for v in values):
                raise ValueError(f"{name}: values must be whole numbers >= 1, got {values}")
        return self


@cache
def space_model(spec: type[ParallelismSpec] = ParallelismSpec) -> type[SearchSpaceBase]:
    """The search-space model of ``spec``: one optional list of values per searched field."""
    fields: dict[str, Any] = {}
    for name in searched_fields(spec):
        elem = _element_type(spec, name)
        extra: dict[str, Any] | None = {"positive": True} if elem is StrictInt else None
        fields[name] = (typing.Optional[list.__class_getitem__(elem)],  # noqa: UP045
                        Field(default=None, min_length=1, json_schema_extra=extra))
    return create_model("SearchSpace", __base__=SearchSpaceBase,
                        __module__="codesign.search.space", **fields)


class PlanPoint:
    """One searched plan: the values of the searched fields (``fields``, shared by every plan
    of an enumeration). Read a value as an attribute (``point.tp``); :meth:`spec` gives the
    full plan, :meth:`of` the point of a spec. Hashable and compared by value."""

    __slots__ = ("fields", "values")

    fields: tuple[str, ...]
    values: tuple[Any, ...]

    def __init__(self, fields: tuple[str, ...] | None = None, values: tuple[Any, ...] = (),
                 **settings: Any) -> None:
        if fields is None:
            fields = tuple(settings)
            values = tuple(settings.values())
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "values", tuple(values))

    @classmethod
    def of(cls, spec: ParallelismSpec, fields: tuple[str, ...] | None = None) -> PlanPoint:
        """The point of ``spec`` over ``fields`` (default: every always-searched field)."""
        names = fields if fields is not None else \
            searched_fields(type(spec), ("structural", "switch"))
        return cls(names, tuple(getattr(spec, k) for k in names))

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[self.fields.index(name)]
        except ValueError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("PlanPoint is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlanPoint) and self.fields == other.fields and \
            self.values == other.values

    def __hash__(self) -> int:
        return hash((self.fields, self.values))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in zip(self.fields, self.values, strict=True))
        return f"PlanPoint({inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PlanPoint, (self.fields, self.values))

    def settings(self) -> dict[str, Any]:
        """The searched fields as plan settings."""
        return dict(zip(self.fields, self.values, strict=True))

    def spec(self, base: ParallelismSpec) -> ParallelismSpec:
        """``base`` with this point's values (not re-validated: enumerated points already
        passed the spec's rules; :func:`codesign.search.space.plan_run` validates)."""
        return base.model_copy(update=self.settings())


__all__ = ["LAYER_SHAPE_EXCLUDED", "PlanPoint", "SearchSpaceBase", "on_request_fields",
           "searched_fields", "space_model", "structural_fields", "switch_fields"]
