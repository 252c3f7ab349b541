"""Training studies: the axis paths of a study whose points are training runs, checked against
every entry they can apply to.

Axis paths: ``model``, ``gpu``, ``topology`` (whole entries: catalog names or file paths),
``num_gpus``, ``plan.<field>`` (a :class:`~codesign.specs.parallel.ParallelismSpec` field) and
``model.<field...>``, ``gpu.<field...>``, ``topology.<field...>`` (fields of the entry, in the
path language of :mod:`codesign.specs.paths`, applied with :func:`codesign.specs.base.evolve`).
An unknown path is rejected with the names allowed where it fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codesign.errors import CodesignError
from codesign.specs import paths
from codesign.specs.gpu import GpuSpec
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run_file import ENTRY_KINDS, load_entry

if TYPE_CHECKING:
    from codesign.experiments.spec import BaseRun, ExperimentSpec, SweepBlock

#: first components an axis path may start with
PATH_ROOTS = (*ENTRY_KINDS, "num_gpus", "plan")

#: kind -> [(label, data of the entry, its spec class)]
Entries = dict[str, list[tuple[str, dict[str, Any], type]]]


def _label(kind: str, ref: str | dict[str, Any]) -> str:
    return f"{kind} '{ref}'" if isinstance(ref, str) else f"inline {kind}"


def _entry(kind: str, ref: str | dict[str, Any]) -> tuple[str, dict[str, Any], type]:
    spec = load_entry(kind, ref)
    return _label(kind, ref), spec.model_dump(), type(spec)


def base_entries(base: BaseRun) -> Entries:
    """The entries of the base run (the topology defaults to the GPU's usual system)."""
    gpu = load_entry("gpu", base.gpu)
    assert isinstance(gpu, GpuSpec)
    topo_ref = base.topology if base.topology is not None else gpu.default_topology
    refs = {"model": base.model, "gpu": base.gpu, "topology": topo_ref}
    return {kind: [_entry(kind, ref)] for kind, ref in refs.items()}


def check_block(block: SweepBlock, entries_of_base: Entries, base: BaseRun, where: str) -> None:
    """Raise ValueError unless every path of ``block`` (and of ``base.overrides``) exists in
    every entry the block's points use."""
    entries = dict(entries_of_base)
    for kind in ENTRY_KINDS:
        refs = block.axes.get(kind)
        if refs is None:
            continue
        try:
            entries[kind] = [_entry(kind, r) for r in refs]
        except CodesignError as exc:
            raise ValueError(f"{where}.axes.{kind}: {exc}") from None
    if "gpu" in block.axes and "topology" not in block.axes and base.topology is None:
        # the topology follows each GPU's usual system
        try:
            entries["topology"] = [
                _entry("topology", t)
                for t in dict.fromkeys(str(g["default_topology"]) for _, g, _c in entries["gpu"])]
        except CodesignError as exc:
            raise ValueError(f"{where}.axes.gpu: {exc}") from None
    for path in block.axes:
        check_path(path, entries, f"{where}.axes")
    for path in base.overrides:  # applied to this block's entries too
        check_path(path, entries, f"base.overrides (with {where})", field_only=True)


def check_path(path: str, entries: Entries, where: str, field_only: bool = False) -> None:
    """Raise ValueError unless ``path`` names a field of every entry it applies to."""
    keys = path.split(".")
    root = keys[0]
    if root not in PATH_ROOTS or (field_only and (len(keys) == 1 or root not in ENTRY_KINDS)):
        roots = ", ".join(f"{k}.<field>" for k in ENTRY_KINDS) if field_only else \
            "model, gpu, topology, num_gpus, plan.<field>, model.<field>, gpu.<field>, " \
            "topology.<field>"
        raise ValueError(f"{where}: unknown path '{path}'; a path is one of {roots}")
    if root == "num_gpus":
        if len(keys) > 1:
            raise ValueError(f"{where}: unknown path '{path}'; num_gpus has no fields")
        return
    if root == "plan":
        fields = list(ParallelismSpec.model_fields)
        if len(keys) != 2 or keys[1] not in fields:
            raise ValueError(f"{where}: unknown path '{path}': ParallelismSpec has no field "
                             f"'{'.'.join(keys[1:])}'; allowed: {', '.join(fields)}")
        return
    if len(keys) == 1:
        return  # a whole entry
    for label, data, cls in entries[root]:
        try:
            paths.locate(data, ".".join(keys[1:]), cls, label, prefix=root)
        except ValueError as exc:
            raise ValueError(f"{where}: unknown path '{path}': {exc}") from None


def check_training_experiment(spec: ExperimentSpec) -> None:
    """Every entry and path of a training study (ValueError naming the first problem)."""
    try:
        entries = base_entries(spec.base)
    except CodesignError as exc:
        raise ValueError(str(exc)) from None
    for path in spec.base.overrides:
        check_path(path, entries, "base.overrides", field_only=True)
    for i, block in enumerate(spec.sweep):
        check_block(block, entries, spec.base, f"sweep[{i}]")
    if spec.smoke is not None:
        for path in spec.smoke.base:
            check_path(path, entries, "smoke.base")
        for i, block in enumerate(spec.smoke.sweep or []):
            check_block(block, entries, spec.base, f"smoke.sweep[{i}]")


__all__ = ["PATH_ROOTS", "base_entries", "check_block", "check_path",
           "check_training_experiment"]
