"""Run files: the one loader of ``codesign simulate --run FILE`` and of a study's ``base:``.

A run names what is simulated, how and where::

    model: gpt3-175b          # catalog name, file path (YAML, HF config.json) or inline mapping
    gpu: h100                 # the same
    topology: dgx-h100        # the same; left out: the GPU's usual system
    num_gpus: 1024            # left out: one pipeline replica (tp·pp·cp·dp when dp is given)
    plan:                     # ParallelismSpec settings (the key ``parallel`` is an alias)
      tp: 8
      pp: 8

The canonical key of the plan is ``plan`` (as in study axes, ``plan.tp``); ``parallel`` (the
name of the :class:`~codesign.specs.run.TrainingRun` field, and what run files used before)
is accepted as an alias, not both at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, StrictInt, ValidationError, field_validator, model_validator

from codesign.errors import SpecError
from codesign.specs.base import Spec, format_validation_error
from codesign.specs.catalog import (
    derive_efficiency,
    load_gpu,
    load_model,
    load_topology,
    parse_topology,
    read_data_file,
)
from codesign.specs.gpu import GpuSpec
from codesign.specs.model import ModelSpec
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.topology import FullFlatTopology, TwoTierTopology

#: the entries of a run: catalog names, file paths or inline mappings
ENTRY_KINDS = ("model", "gpu", "topology")
#: the canonical key of the plan and its accepted alias
PLAN_KEY = "plan"
PLAN_ALIAS = "parallel"
#: the fields of a run file
RUN_FIELDS = (*ENTRY_KINDS, "num_gpus", PLAN_KEY)

EntryRef = str | dict[str, Any]


class RunFile(Spec):
    """A run as written in a file: entries by reference, GPU count, plan settings."""

    model: EntryRef = Field(default="gpt3-175b",
                            description="catalog name, file path or inline mapping")
    gpu: EntryRef = Field(default="h100", description="catalog name, file path or inline mapping")
    topology: EntryRef | None = Field(default=None,
                                      description="None: the GPU's usual system")
    num_gpus: StrictInt | None = Field(default=None, ge=1, description="None: one pipeline "
                                       "replica (tp·pp·cp·dp when dp is given)")
    plan: dict[str, Any] = Field(default_factory=dict,
                                 description="ParallelismSpec settings (alias: parallel)")

    @model_validator(mode="before")
    @classmethod
    def _plan_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and PLAN_ALIAS in data:
            if PLAN_KEY in data:
                raise ValueError(f"give '{PLAN_KEY}' or its alias '{PLAN_ALIAS}', not both")
            data = {(PLAN_KEY if k == PLAN_ALIAS else k): v for k, v in data.items()}
        if isinstance(data, dict) and PLAN_KEY in data and data[PLAN_KEY] is None:
            data = {**data, PLAN_KEY: {}}  # an empty ``plan:`` in YAML
        return data

    @field_validator(*ENTRY_KINDS, mode="before")
    @classmethod
    def _check_ref(cls, ref: Any) -> Any:
        if ref is not None and not isinstance(ref, (str, dict)):
            raise ValueError("must be a catalog name, a file path or an inline mapping, got "
                             f"{type(ref).__name__}")
        return ref

    @field_validator(PLAN_KEY)
    @classmethod
    def _check_plan(cls, plan: dict[str, Any]) -> dict[str, Any]:
        try:
            ParallelismSpec.model_validate({k: v for k, v in plan.items() if v is not None})
        except ValidationError as exc:
            raise ValueError(format_validation_error(exc, PLAN_KEY)) from None
        return plan

    def build_args(self, origin: str = "") -> dict[str, Any]:
        """The entries and GPU count this run sets (inline mappings validated into specs),
        as keyword arguments of :func:`codesign.api.build_run` (the plan is :attr:`plan`)."""
        out: dict[str, Any] = {}
        for key in (*ENTRY_KINDS, "num_gpus"):
            if key not in self.model_fields_set or getattr(self, key) is None:
                continue
            value = getattr(self, key)
            if isinstance(value, dict):
                value = load_entry(key, value, f"{origin}: {key}" if origin else key)
            out[key] = value
        return out


def load_entry(kind: str, ref: EntryRef, origin: str = "") -> ModelSpec | GpuSpec \
        | TwoTierTopology | FullFlatTopology:
    """A model, GPU or topology from a catalog name, file path or inline mapping."""
    if kind == "model":
        return ModelSpec.parse(ref, origin or kind) if isinstance(ref, dict) else load_model(ref)
    if kind == "gpu":
        if isinstance(ref, dict):
            return GpuSpec.parse(derive_efficiency(ref, origin or kind), origin or kind)
        return load_gpu(ref)
    return parse_topology(ref, origin or kind) if isinstance(ref, dict) else load_topology(ref)


def parse_run(data: Any, origin: str = "") -> RunFile:
    """Validate the mapping of a run file; :class:`SpecError` with one line naming the field
    (and, for an unknown one, the fields allowed)."""
    where = f"{origin}: " if origin else ""
    if not isinstance(data, dict):
        raise SpecError(f"{where}a run file is a mapping with {', '.join(RUN_FIELDS)}")
    allowed = (*RUN_FIELDS, PLAN_ALIAS)
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise SpecError(f"{where}unknown field '{unknown[0]}'; allowed: "
                        f"{', '.join(RUN_FIELDS)} (or '{PLAN_ALIAS}' for '{PLAN_KEY}')")
    try:
        return RunFile.model_validate(data)
    except ValidationError as exc:
        msg = format_validation_error(exc, "run", origin)
        raise SpecError(msg.replace("Value error, ", "")) from None


def load_run_file(path: str | Path) -> RunFile:
    """Read and validate a YAML or JSON run file (see the module docstring)."""
    return parse_run(read_data_file(Path(path)), str(path))


__all__ = ["ENTRY_KINDS", "PLAN_ALIAS", "PLAN_KEY", "RUN_FIELDS", "RunFile", "load_entry",
           "load_run_file", "parse_run"]
