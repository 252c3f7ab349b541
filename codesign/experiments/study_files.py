"""Study files: the catalog of studies (the repository's ``experiments/`` folder) and loading a
study by catalog name or file path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from codesign.catalogs import catalog_root
from codesign.errors import SpecError
from codesign.experiments.serving_axes import absolutize as _absolutize_serving
from codesign.specs.catalog import read_data_file
from codesign.specs.run_file import ENTRY_KINDS

if TYPE_CHECKING:
    from codesign.experiments.spec import ExperimentSpec


def _catalog_files() -> Iterator[tuple[str, Any]]:
    root = catalog_root("experiments")
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".yaml", ".yml")):
            yield entry.name, entry


def list_experiments() -> list[tuple[str, str]]:
    """(name, title) of every study in the catalog, by file name (not validated here)."""
    out = []
    for fname, entry in _catalog_files():
        try:
            data = yaml.safe_load(entry.read_text())
        except yaml.YAMLError:
            data = None
        title = str(data.get("title", "")) if isinstance(data, dict) else "(not valid YAML)"
        out.append((Path(fname).stem, title))
    return out


def _absolutize(data: dict[str, Any], base_dir: Path) -> None:
    """Make entry references that are files next to the spec file absolute paths."""

    def fix(ref: Any) -> Any:
        if isinstance(ref, str) and not Path(ref).is_absolute() and (base_dir / ref).is_file():
            return str((base_dir / ref).resolve())
        return ref

    base = data.get("base")
    if isinstance(base, dict):
        for kind in ENTRY_KINDS:
            if kind in base:
                base[kind] = fix(base[kind])
    blocks: list[Any] = []
    for holder in (data, data.get("smoke")):
        if isinstance(holder, dict):
            sweep = holder.get("sweep")
            # anything else is left for the spec's validation to name
            blocks += [sweep] if isinstance(sweep, dict) else (
                sweep if isinstance(sweep, list) else [])
    smoke = data.get("smoke")
    if isinstance(smoke, dict) and isinstance(smoke.get("base"), dict):
        for kind in ENTRY_KINDS:
            if kind in smoke["base"]:
                smoke["base"][kind] = fix(smoke["base"][kind])
    for block in blocks:
        axes = block.get("axes") if isinstance(block, dict) else None
        if isinstance(axes, dict):
            for kind in ENTRY_KINDS:
                if isinstance(axes.get(kind), list):
                    axes[kind] = [fix(v) for v in axes[kind]]
    _absolutize_serving(base, blocks, smoke.get("base") if isinstance(smoke, dict) else None,
                        fix)


def load_experiment(name_or_path: str | Path) -> ExperimentSpec:
    """A study by catalog name (``experiments/<name>.yaml``) or YAML file path.

    Entry references that are files next to the spec file are made absolute, so the spec
    (stored in the results manifest) works from any directory.
    """
    ref = str(name_or_path)
    names = {n: n for n, _ in list_experiments()}
    if ref in names and not Path(ref).is_file():
        entry = catalog_root("experiments").joinpath(f"{ref}.yaml")
        if not entry.is_file():
            entry = catalog_root("experiments").joinpath(f"{ref}.yml")
        origin = f"experiments/{entry.name}"
        try:
            data = yaml.safe_load(entry.read_text())
        except yaml.YAMLError as exc:
            raise SpecError(f"{origin}: not valid YAML: {str(exc).splitlines()[0]}") from None
        base_dir: Path | None = None
    else:
        path = Path(ref)
        if not path.is_file() and not ref.endswith((".yaml", ".yml", ".json")):
            allowed = ", ".join(names) or "(none)"
            raise SpecError(f"unknown experiment '{ref}'; allowed: {allowed} (or a YAML file "
                            "path)")
        origin = str(path)
        data = read_data_file(path)
        base_dir = path.resolve().parent
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: an experiment spec is a mapping with name, base, sweep, "
                        "metrics, plots")
    if base_dir is not None:
        _absolutize(data, base_dir)
    from codesign.experiments.spec import ExperimentSpec

    return ExperimentSpec.parse(data, origin)



__all__ = ["list_experiments", "load_experiment"]
