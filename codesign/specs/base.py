"""Base class for specs: frozen pydantic v2 models that forbid unknown fields."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from codesign.errors import SpecError

T = TypeVar("T", bound="Spec")


class Spec(BaseModel):
    """Frozen, strict spec. Copy with ``spec.model_copy(update={...})`` or :func:`evolve`."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

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

    ``evolve(run, {"gpu.hbm_bandwidth_TBps": 8.0})`` changes a nested field; the result is
    re-validated, so an invalid value raises :class:`SpecError` naming the path.
    """
    data = spec.model_dump()
    for path, value in updates.items():
        node: Any = data
        keys = path.split(".")
        for key in keys[:-1]:
            if not isinstance(node, dict) or key not in node:
                raise SpecError(f"{type(spec).__name__}: no field '{path}' (at '{key}')")
            node = node[key]
        if not isinstance(node, dict) or keys[-1] not in node:
            raise SpecError(f"{type(spec).__name__}: no field '{path}'")
        node[keys[-1]] = value
    return type(spec).parse(data)
