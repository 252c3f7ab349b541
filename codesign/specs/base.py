"""Base class for specs: frozen pydantic v2 models that forbid unknown fields."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from codesign.errors import SpecError

T = TypeVar("T", bound="Spec")


class Spec(BaseModel):
    """Frozen, strict spec. Copy with ``spec.model_copy(update={...})`` or :func:`evolve`."""

    #: ``allow_inf_nan=False``: an infinite or NaN number is never a physical value
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True,
                              allow_inf_nan=False)

    @classmethod
    def parse(cls: type[T], data: Any, origin: str = "") -> T:
        """Validate ``data`` into this spec, raising :class:`SpecError` with a one-line message."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(format_validation_error(exc, cls.__name__, origin)) from None


def format_validation_error(exc: ValidationError, what: str, origin: str = "") -> str:
    """One line per problem: ``<origin>: <Spec>.<field.path>: <message>``."""
    where = f"{origin}: " if origin else ""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{where}{what}.{loc}: {msg}")
    return "; ".join(parts)


def evolve(spec: T, updates: dict[str, Any]) -> T:
    """Return a validated copy of ``spec`` with dotted-path ``updates`` applied.

    ``evolve(run, {"gpu.hbm_bandwidth_TBps": 8.0})`` changes a nested field. Paths are those
    of :mod:`codesign.specs.paths` (fields, list elements by position or name, mapping keys);
    an unknown path raises :class:`SpecError` naming it and the names allowed where it fails,
    and the result is re-validated, so an invalid value raises :class:`SpecError` too.
    """
    from codesign.specs.paths import set_path

    cls = type(spec)
    data = spec.model_dump()
    for path, value in updates.items():
        try:
            set_path(data, path, value, cls, cls.__name__)
        except ValueError as exc:
            raise SpecError(f"{cls.__name__}: unknown path '{path}': {exc}") from None
    return cls.parse(data)
