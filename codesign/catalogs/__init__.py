"""Catalog folders: the YAML files of ``hardware/``, ``topologies/``, ``workloads/`` and
``experiments/`` at the repository root.

An installed package (wheel or ``pip install .``) carries them as the subpackages
``codesign.catalogs.<kind>`` (mapped by pyproject's ``package-dir``). A source checkout run
without an install, or an installed copy shadowed by the checkout (Python started in the
repository root imports the checkout's ``codesign/``), has no such subpackages: there the
folders are read from the repository root beside the package. :func:`catalog_root` hides the
difference, so every lookup works the same from an installed package, an editable install and
a source checkout, from any working directory.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Literal

CatalogFolder = Literal["hardware", "topologies", "workloads", "experiments"]

#: the repository root of a source checkout (``codesign/catalogs/`` is two levels below it)
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


@cache
def catalog_root(kind: CatalogFolder) -> Traversable:
    """The folder of catalog ``kind``: the installed package data when present, else the
    source checkout's top-level folder. Raises :class:`FileNotFoundError` when neither
    exists (a broken install)."""
    try:
        root = resources.files(f"{__name__}.{kind}")
        if root.is_dir():
            return root
    except ModuleNotFoundError:
        pass
    source = _SOURCE_ROOT / kind
    if source.is_dir():
        return source
    raise FileNotFoundError(f"catalog folder {kind!r} not found: neither the installed package "
                            f"data codesign.catalogs.{kind} nor {source}")


__all__ = ["CatalogFolder", "catalog_root"]
