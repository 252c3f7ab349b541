"""Plan flags derived from the plan spec: one flag per :class:`ParallelismSpec` field.

A field's flag is ``json_schema_extra={"flag": "--sp"}`` when it sets one, else ``--`` and
its name with dashes (``overlap_p2p`` -> ``--overlap-p2p``). Its type, choices and help text
come from the field: booleans are ``--x/--no-x``, ``Literal`` fields take their values as
choices (a value added to the ``Literal`` shows up as a choice), as do fields with
``json_schema_extra={"enum": values}`` (the live list: a value added later is a choice),
tuples and lists are comma-separated, ``X | None`` takes an ``X``; the help is the field's
``description`` with its default. The flag's ``dest`` is the field name; a flag left out is
``None`` (the spec's default applies).
"""

from __future__ import annotations

import argparse
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union

from pydantic.fields import FieldInfo

from codesign.specs.parallel import ParallelismSpec

_NONE = type(None)


@dataclass(frozen=True)
class PlanFlag:
    """One plan field's flag: its name, the field (= ``dest``), argparse keyword arguments,
    and the value kind (``int``, ``float``, ``str``, ``bool``, ``list``)."""

    flag: str
    field: str
    kwargs: dict[str, Any]
    kind: str


def flag_name(name: str, info: FieldInfo) -> str:
    """The flag of field ``name``: its ``flag`` metadata or ``--name-with-dashes``."""
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("flag"), str):
        return str(extra["flag"])
    return "--" + name.replace("_", "-")


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not _NONE]
        if len(members) == 1:
            return members[0]
    return tp


def _scalar(tp: Any) -> tuple[type, list[Any] | None]:
    """(Python type, choices or None) of a scalar annotation."""
    if typing.get_origin(tp) is Literal:
        choices = list(typing.get_args(tp))
        return type(choices[0]), choices
    if tp in (int, float, str, bool):
        return tp, None
    raise TypeError(f"no command-line form for a plan field of type {tp!r}")


def _enum(info: FieldInfo) -> Any:
    """A ``str`` field's allowed values given as ``json_schema_extra={"enum": [...]}`` (a list
    others may extend, e.g. the collective-algorithm registry's names), or None."""
    extra = info.json_schema_extra
    return extra.get("enum") if isinstance(extra, dict) else None


def _comma_list(elem: type) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        return tuple(elem(x.strip()) for x in text.split(",") if x.strip())

    parse.__name__ = f"comma-separated {elem.__name__} list"
    return parse


def _help(name: str, info: FieldInfo, default: Any, extra: str = "") -> str:
    text = info.description or ""
    if text.startswith("None = "):  # only the default is described: name the setting
        text = f"{name.replace('_', ' ')}; {text}"
    text = text.replace("None = ", "default: ")
    if "default" not in text and default is not None:
        shown = ("on" if default else "off") if isinstance(default, bool) else \
            ",".join(map(str, default)) if isinstance(default, (tuple, list)) else default
        text = f"{text} (default: {shown})" if text else f"default: {shown}"
    return text + extra


def plan_flags(spec: type[ParallelismSpec] = ParallelismSpec) -> list[PlanFlag]:
    """The flag of every field of ``spec`` (a :class:`ParallelismSpec` or a subclass)."""
    out = []
    for name, info in spec.model_fields.items():
        tp = _strip_optional(info.annotation)
        default = info.get_default(call_default_factory=True)
        origin = typing.get_origin(tp)
        if origin in (tuple, list):
            elem, choices = _scalar(typing.get_args(tp)[0])
            note = f"; comma-separated, of {', '.join(map(str, choices))}" if choices else \
                "; comma-separated"
            kw: dict[str, Any] = {"type": _comma_list(elem), "metavar": "A,B,...",
                                  "help": _help(name, info, default, note)}
            kind = "list"
        else:
            py, choices = _scalar(tp)
            choices = _enum(info) if choices is None else choices
            kind = py.__name__
            if py is bool:
                kw = {"action": argparse.BooleanOptionalAction, "help": _help(name, info, default)}
            else:
                kw = {"type": py, "help": _help(name, info, default)}
                if choices is not None:
                    kw["choices"] = choices
                elif py in (int, float):
                    kw["metavar"] = "N" if py is int else "X"
        out.append(PlanFlag(flag_name(name, info), name, kw, kind))
    return out


def add_plan_flags(ap: argparse.ArgumentParser | Any,
                   spec: type[ParallelismSpec] = ParallelismSpec) -> None:
    """Add the flag of every plan field to ``ap`` (a parser or an argument group)."""
    for f in plan_flags(spec):
        ap.add_argument(f.flag, dest=f.field, default=None, **f.kwargs)


def plan_from_args(args: argparse.Namespace,
                   spec: type[ParallelismSpec] = ParallelismSpec) -> dict[str, Any]:
    """The plan settings given as flags (fields whose flag was left out are absent)."""
    return {f.field: getattr(args, f.field) for f in plan_flags(spec)
            if getattr(args, f.field, None) is not None}


def flag_of(field: str, spec: type[ParallelismSpec] = ParallelismSpec) -> PlanFlag:
    """The flag of plan field ``field``."""
    for f in plan_flags(spec):
        if f.field == field:
            return f
    raise KeyError(field)


__all__ = ["PlanFlag", "add_plan_flags", "flag_name", "flag_of", "plan_flags", "plan_from_args"]
