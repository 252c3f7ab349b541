"""Catalog lookup: built-in YAML specs by name or alias, or user files by path.

The catalogs live in the repository's ``hardware/``, ``topologies/`` and ``workloads/`` folders
and are installed as package data (``codesign.catalogs.*``), so lookups work from any install.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import TypeAdapter, ValidationError

from codesign.catalogs import catalog_root
from codesign.errors import SpecError
from codesign.specs.base import Spec, format_validation_error
from codesign.specs.gpu import GpuSpec
from codesign.specs.model import ModelSpec
from codesign.specs.names import Resolved, closest, resolve_gpu, resolve_model
from codesign.specs.topology import FullFlatTopology, TopologySpec, TwoTierTopology

CatalogKind = Literal["hardware", "topologies", "workloads"]

#: PyYAML's safe loader, in C (libyaml) where PyYAML was built with it: the catalogs are read
#: on every command, and the pure-Python loader is ten times slower
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
S = TypeVar("S", bound=Spec)

_TOPOLOGY_ADAPTER: TypeAdapter[TwoTierTopology | FullFlatTopology] = TypeAdapter(TopologySpec)


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def read_data_file(path: Path) -> Any:
    """Read a YAML or JSON file, raising :class:`SpecError` on a missing or malformed file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        if path.suffix == ".json":
            return json.loads(text)
        return yaml.load(text, Loader=_YAML_LOADER)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(f"{path}: not valid {path.suffix.lstrip('.').upper()}: {first}") from None


def _catalog_files(kind: CatalogKind) -> Iterator[tuple[str, Any]]:
    root = catalog_root(kind)
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".yaml", ".yml")):
            yield entry.name, yaml.load(entry.read_text(), Loader=_YAML_LOADER)


@cache
def _catalog_index(kind: CatalogKind) -> dict[str, tuple[str, Any]]:
    """Map every normalized name and alias to (file name, raw data)."""
    index: dict[str, tuple[str, Any]] = {}
    for fname, data in _catalog_files(kind):
        if not isinstance(data, dict):
            continue
        names = [Path(fname).stem, str(data.get("name", ""))]
        names += [str(a) for a in data.get("aliases", []) or []]
        for n in names:
            if n:
                index.setdefault(_normalize(n), (fname, data))
    return index


def catalog_names(kind: CatalogKind) -> list[str]:
    """Canonical names of the entries of one catalog."""
    seen: dict[str, None] = {}
    for _, data in _catalog_index(kind).values():
        seen[str(data.get("name"))] = None
    return sorted(seen)


def catalog_entries(kind: CatalogKind) -> list[tuple[str, dict[str, Any]]]:
    """(file name, raw data) of every entry of one catalog, in file order."""
    return [(f, d) for f, d in _catalog_files(kind) if isinstance(d, dict)]


_KIND_NOUN = {"hardware": "gpu", "topologies": "topology", "workloads": "model"}


def _lookup_raw(kind: CatalogKind, ref: str) -> tuple[str, Any]:
    """A catalog entry by name/alias, else a file by path, else (GPUs and models) by the name
    resolver (:mod:`codesign.specs.names`), whose error lists the closest names."""
    hit = _catalog_index(kind).get(_normalize(ref))
    if hit is not None:
        return f"{kind}/{hit[0]}", hit[1]
    if len(ref) < 256 and (ref.endswith((".yaml", ".yml", ".json")) or _is_file(ref)):
        return ref, read_data_file(Path(ref))
    # a Hugging Face repo id ("meta-llama/Llama-4-Scout-17B-16E"): its model name an alias
    hit = _catalog_index(kind).get(_normalize(ref.rsplit("/", 1)[-1])) if (
        kind == "workloads" and "/" in ref) else None
    if hit is not None:
        return f"{kind}/{hit[0]}", hit[1]
    if kind in ("hardware", "workloads"):
        name = resolve_name(kind, ref)[0]
        fname, data = _catalog_index(kind)[_normalize(name)]
        return f"{kind}/{fname}", data
    allowed = ", ".join(catalog_names(kind))
    raise SpecError(f"unknown {_KIND_NOUN[kind]} '{ref}'; allowed: {allowed} (or a file "
                    f"path){closest(ref, catalog_names(kind))}")


def _is_file(ref: str) -> bool:
    try:
        return Path(ref).is_file()
    except OSError:  # a name too long or otherwise not a path
        return False


@lru_cache(maxsize=1024)
def resolve_name(kind: CatalogKind, ref: str) -> tuple[str, tuple[str, ...]]:
    """The catalog name a written GPU or model name means, with the reading's notes."""
    if kind == "hardware":
        r = resolve_gpu(ref, catalog_entries("hardware"), _raw_hit("hardware"))
        return r.gpu, r.notes
    return resolve_model(ref, catalog_entries("workloads"))


def _raw_hit(kind: CatalogKind) -> Callable[[str], Any | None]:
    index = _catalog_index(kind)
    return lambda name: (index.get(_normalize(name)) or (None, None))[1]


def resolve_system(text: str) -> Resolved:
    """The GPU (and, when the text names a system or cloud instance, the topology) a hardware
    description means: "H100-SXM5-80GB (DGX-H100)", "GB200 NVL72", "p4d.24xlarge"."""
    return resolve_gpu(text, catalog_entries("hardware"), _raw_hit("hardware"))


def derive_efficiency(data: Any, origin: str, seen: tuple[str, ...] = ()) -> Any:
    """Raw GPU data with its ``efficiency`` block completed from ``efficiency_from``.

    **The sibling rule.** A part nobody has measured takes the efficiency fractions of its
    closest measured sibling: the same vendor and architecture (same SM/CU and tensor-core
    design, same kernel libraries), else the nearest generation of that vendor, else the
    nearest part of another vendor at a similar peak (stated as such in the entry). The
    fractions are dimensionless (of the part's own datasheet peaks and bandwidth), so the
    sibling's achieved throughput is rescaled by the part's own peaks, HBM bandwidth and
    memory; fields the entry gives itself (cited measurements) override the sibling's. The
    end-to-end ``sustained_fraction`` comes along: it is a property of the architecture's
    clocks under the power limit and of the software, fitted on the sibling's published runs.
    Raises :class:`SpecError` for an unknown sibling or a cycle.
    """
    if not isinstance(data, dict) or not data.get("efficiency_from"):
        return data
    ref = str(data["efficiency_from"])
    if ref in seen:
        raise SpecError(f"{origin}: GpuSpec.efficiency_from: cycle {' -> '.join((*seen, ref))}")
    sib_origin, sibling = _lookup_raw("hardware", ref)
    sibling = _with_sibling_fraction(derive_efficiency(sibling, sib_origin, (*seen, ref)))
    own = data.get("efficiency") or {}
    if not isinstance(own, dict) or not isinstance(sibling.get("efficiency"), dict):
        return data
    return {**data, "efficiency": {**sibling["efficiency"], **own}}


def dense_peak(data: Any) -> float | None:
    """Dense BF16 (else FP16) peak of raw GPU data, TFLOP/s; None when it states neither."""
    peaks = data.get("peak_tflops") if isinstance(data, dict) else None
    if not isinstance(peaks, dict):
        return None
    value = peaks.get("bf16") or peaks.get("fp16")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def nearest_part(vendor: str, peak: float,
                 parts: Iterable[tuple[str, str, float]]) -> str | None:
    """The sibling rule's last steps: of ``parts`` (name, vendor, dense peak TFLOP/s), the one
    of ``vendor`` nearest to ``peak`` in log distance (the nearest generation), else the
    nearest of any vendor; ties go to the first name. None when ``parts`` is empty."""
    pool = sorted(parts)
    same = [p for p in pool if p[1] == vendor] or pool
    if not same:
        return None
    return min(same, key=lambda p: abs(math.log(p[2] / peak)))[0]


@cache
def fitted_fractions() -> dict[str, tuple[str, float, float]]:
    """name -> (vendor, dense peak TFLOP/s, sustained_fraction) of every catalog GPU whose own
    entry states its fitted ``efficiency.sustained_fraction``."""
    out: dict[str, tuple[str, float, float]] = {}
    for _, data in catalog_entries("hardware"):
        eff, peak = data.get("efficiency"), dense_peak(data)
        if (data.get("kind", "gpu") != "cpu" and isinstance(eff, dict) and peak
                and isinstance(eff.get("sustained_fraction"), (int, float))):
            out[str(data["name"])] = (str(data.get("vendor", "")), peak,
                                      float(eff["sustained_fraction"]))
    return out


@lru_cache(maxsize=256)
def fraction_owner(name: str) -> str:
    """The catalog GPU whose own entry states the ``sustained_fraction`` that ``name`` runs
    with: ``name`` itself, else the first part up its ``efficiency_from`` chain that states
    one (parts of one die share one fitted fraction: their rows calibrate it together);
    ``name`` when no part of the chain states one (it then takes its nearest fitted sibling's,
    :func:`load_gpu`, but its own rows fit a value of its own)."""
    seen: set[str] = set()
    part: str | None = name
    while part is not None and part not in seen:
        seen.add(part)
        try:
            _, data = _lookup_raw("hardware", part)
        except SpecError:
            return name
        own = str(data.get("name", part))
        if own in fitted_fractions():
            return own
        part = str(data["efficiency_from"]) if data.get("efficiency_from") else None
    return name


def _with_sibling_fraction(data: Any) -> Any:
    """Raw catalog GPU data whose efficiency block (after :func:`derive_efficiency`) states no
    ``sustained_fraction``, completed with its nearest fitted sibling's (same vendor nearest in
    dense peak, else any vendor: :func:`nearest_part`) — the sibling rule for the one
    end-to-end figure, which is fitted on published runs and not measured per part."""
    eff, peak = data.get("efficiency"), dense_peak(data)
    if (data.get("kind", "gpu") == "cpu" or not isinstance(eff, dict) or not peak
            or "sustained_fraction" in eff):
        return data
    fitted = fitted_fractions()
    sibling = nearest_part(str(data.get("vendor", "")), peak,
                           ((n, v, p) for n, (v, p, _) in fitted.items()))
    if sibling is None:
        return data
    return {**data, "efficiency": {**eff, "sustained_fraction": fitted[sibling][2]}}


@lru_cache(maxsize=256)
def load_gpu(ref: str) -> GpuSpec:
    """A GPU by catalog name/alias (``h100``) or YAML path (an ``efficiency_from`` sibling
    completes its efficiency block, :func:`derive_efficiency`; a catalog part with no
    ``sustained_fraction`` of its own or up its chain takes its nearest fitted sibling's,
    :func:`_with_sibling_fraction`; a user file keeps the uncalibrated default)."""
    origin, data = _lookup_raw("hardware", ref)
    data = derive_efficiency(data, origin)
    if origin.startswith("hardware/"):
        data = _with_sibling_fraction(data)
    gpu = GpuSpec.parse(data, origin)
    if gpu.measured is not None:  # make table paths absolute: the spec is self-contained
        base = gpu_base_dir(ref)
        files = {k: (str((base / v).resolve()) if base is not None and v
                     and not Path(v).is_absolute() else v)
                 for k, v in gpu.measured.files().items()}
        gpu = gpu.model_copy(update={"measured": gpu.measured.model_copy(update=files)})
    return gpu


def gpu_base_dir(ref: str) -> Path | None:
    """Directory that relative paths inside GPU ``ref`` (e.g. measured tables) resolve against.

    A catalog name/alias: the installed ``hardware/`` catalog folder (``None`` if the package is
    not on a file system); a file path: the file's directory; anything else: ``None``.
    """
    hit = _catalog_index("hardware").get(_normalize(ref))
    if hit is not None:
        root = catalog_root("hardware")
        return Path(str(root)) if isinstance(root, Path) else None
    path = Path(ref)
    if path.is_file():
        return path.resolve().parent
    return None


@lru_cache(maxsize=256)
def load_topology(ref: str) -> TwoTierTopology | FullFlatTopology:
    """A topology by catalog name/alias (``dgx-h100``) or YAML path."""
    origin, data = _lookup_raw("topologies", ref)
    return parse_topology(data, origin)


def parse_topology(data: Any, origin: str = "") -> TwoTierTopology | FullFlatTopology:
    """Validate raw topology data (discriminated by ``kind``)."""
    if isinstance(data, dict) and data.get("kind") not in ("two_tier", "fullflat"):
        where = f"{origin}: " if origin else ""
        raise SpecError(f"{where}TopologySpec.kind: must be 'two_tier' or 'fullflat', "
                        f"got {data.get('kind')!r}")
    try:
        return _TOPOLOGY_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, "TopologySpec", origin)) from None


@lru_cache(maxsize=256)
def load_model(ref: str) -> ModelSpec:
    """A model by catalog name/alias (``gpt3-175b``), YAML path, or Hugging Face config.json."""
    origin, data = _lookup_raw("workloads", ref)
    if origin.endswith(".json"):
        from codesign.specs.hf import model_from_hf_config

        path = Path(origin)
        # ".../Llama-3-8B/config.json" is named by its folder, "llama-3-8b.json" by its stem
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        return model_from_hf_config(data, name=name, origin=origin)
    return ModelSpec.parse(data, origin)
