"""Serving studies: the serving system a study starts from, its named variants, and sweep axes
as dotted paths into a :class:`~codesign.specs.serving.ServingSpec`.

A study with ``kind: serving`` starts every point from a serving spec::

    kind: serving
    base:
      serving: serving/llama3-70b-8xh100.yaml     # file, catalog-relative file, or mapping
      overrides: {clients.chat.num_requests: 2000}
      variants:                                    # named bundles of overrides
        colocated: {engines.prefill.scheduler.name: continuous}
        2P:6D: {engines.prefill.count: 2, engines.decode.count: 6}
    sweep:
      axes:
        variant: [colocated, 2P:6D]
        clients.chat.arrival.rate_rps: [2, 4, 8]

**Paths** are those of :mod:`codesign.specs.paths` (the language ``evolve`` and training
studies use): fields by name, list elements by position or by their ``name``
(``engines.1`` or ``engines.decode``, ``clients.chat``, ``memory_tiers.remote``),
mapping entries by key (``stages.think.rounds``). A path must end at one value. Setting the
field that selects a kind (``scheduler.name``, ``arrival.process``, a length's ``dist``,
``kv_link.via``, a stage's ``kind``) keeps the settings the new kind shares and drops the
others (``continuous`` → ``static`` keeps ``max_num_seqs``, drops ``max_num_batched_tokens``).

**Whole entries**: the axis ``serving`` swaps the serving system (its values are references
like ``base.serving``) and the axis ``variant`` applies one of ``base.variants`` (its name is
its label in the figures). A point starts from its serving system, then applies
``base.overrides``, its variant, then its field axes (kind-selecting fields first in each).

Every path is checked when the study is loaded against every serving system and variant it can
apply to; a path that does not exist is rejected with the names allowed where it fails. Each
variant (with ``base.overrides``) is validated in full.
"""

from __future__ import annotations

import copy
import functools
import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codesign.catalogs import catalog_root
from codesign.errors import CodesignError, SpecError
from codesign.specs import paths
from codesign.specs.catalog import read_data_file
from codesign.specs.paths import Target
from codesign.specs.serving import ServingSpec

if TYPE_CHECKING:
    from codesign.experiments.spec import ExperimentSpec, SweepBlock

#: whole-entry axis: the serving system (a reference like ``base.serving``)
SERVING_ENTRY = "serving"
#: pseudo-axis: the name of one of ``base.variants``
VARIANT_AXIS = "variant"
#: axis paths that are not field paths
SERVING_WHOLE = (SERVING_ENTRY, VARIANT_AXIS)
#: folder of the catalog's serving systems (inside ``experiments/``)
CATALOG_FOLDER = "serving"

#: latency summaries of a row: ``<what>_<stat>_s``
LATENCY_KEYS = ("ttft", "tpot", "e2e", "queue")
LATENCY_STATS = ("mean", "p50", "p90", "p99", "max")
#: metric columns of a serving row (NaN unless the point is ok), seconds in ``_s`` columns
SERVING_METRIC_COLUMNS: tuple[str, ...] = (
    *(f"{k}_{s}_s" for k in LATENCY_KEYS for s in LATENCY_STATS),
    "requests_per_s", "output_tokens_per_s", "answer_tokens_per_s", "input_tokens_per_s",
    "requests_per_s_per_gpu", "output_tokens_per_s_per_gpu",
    "goodput_rps", "goodput_fraction",
    "gpu_utilization", "kv_occupancy_mean", "kv_occupancy_peak",
    "requests_completed", "requests_rejected", "requests_unfinished", "requests_preempted",
    "kv_hits", "kv_transfer_GB", "kv_transfer_mean_s", "tier_read_GB",
    "cost_usd", "cost_usd_per_mtok", "cost_usd_per_mtok_all", "energy_kWh",
    "window_s", "simulated_s",
)
#: metrics a serving study may list (the first one ranks "best" in the run summary)
SERVING_METRICS: tuple[str, ...] = (*SERVING_METRIC_COLUMNS, "sim_wall_s")
#: serving metrics where larger is better
SERVING_HIGHER_IS_BETTER = frozenset({
    "requests_per_s", "output_tokens_per_s", "answer_tokens_per_s", "input_tokens_per_s",
    "requests_per_s_per_gpu", "output_tokens_per_s_per_gpu", "goodput_rps",
    "goodput_fraction", "gpu_utilization", "requests_completed", "kv_hits"})
#: the metrics of a serving study that names none
DEFAULT_SERVING_METRICS = ("goodput_rps", "ttft_p99_s", "tpot_p99_s", "e2e_p50_s")


# ---- serving systems --------------------------------------------------------------------------

def _catalog_root() -> Any:
    return catalog_root("experiments")


def catalog_serving_systems() -> list[str]:
    """Catalog-relative paths of the serving systems shipped with the studies
    (``serving/<name>.yaml``)."""
    folder = _catalog_root().joinpath(CATALOG_FOLDER)
    if not folder.is_dir():
        return []
    return sorted(f"{CATALOG_FOLDER}/{e.name}" for e in folder.iterdir()
                  if e.name.endswith((".yaml", ".yml")))


def _find_file(ref: str) -> Path:
    """The file a serving reference names: a path (absolute or from the current directory),
    else a path relative to the catalog's ``experiments/`` folder, else a name in its
    ``serving/`` folder (``.yaml`` optional)."""
    path = Path(ref)
    if path.is_file():
        return path.resolve()
    if not path.is_absolute():
        root = _catalog_root()
        for rel in (ref, f"{ref}.yaml", f"{CATALOG_FOLDER}/{ref}",
                    f"{CATALOG_FOLDER}/{ref}.yaml"):
            entry = root.joinpath(rel)
            if entry.is_file():
                return Path(str(entry))
    allowed = ", ".join(catalog_serving_systems()) or "(none in the catalog)"
    raise SpecError(f"serving system '{ref}' not found: give a serving spec file, or one of "
                    f"the catalog's: {allowed}")


@functools.lru_cache(maxsize=64)
def _load_file(path: str, mtime_ns: int) -> dict[str, Any]:
    data = read_data_file(Path(path))
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a serving spec is a mapping (engines, clients, ...)")
    return ServingSpec.parse(data, path).model_dump()


def load_serving_data(ref: str | dict[str, Any]) -> tuple[dict[str, Any], Path | None]:
    """(the validated serving spec as plain data with every default filled in, the folder its
    relative trace paths resolve against) of a reference: a file, a catalog-relative file or
    an inline mapping. Raises :class:`SpecError`."""
    if isinstance(ref, dict):
        return ServingSpec.parse(ref, "inline serving system").model_dump(), None
    path = _find_file(ref)
    return copy.deepcopy(_load_file(str(path), path.stat().st_mtime_ns)), path.parent


def serving_label(ref: str | dict[str, Any]) -> str:
    """How messages name a serving reference."""
    return f"serving '{ref}'" if isinstance(ref, str) else "inline serving system"


# ---- paths into a serving spec (the language of codesign.specs.paths) -------------------------

def locate(data: dict[str, Any], path: str, label: str = "the serving system") -> Target:
    """Follow ``path`` through ``data`` (a dumped ServingSpec): :func:`codesign.specs.paths.
    locate`. Raises ValueError naming the first component that does not exist and what is
    allowed there."""
    return paths.locate(data, path, ServingSpec, label)


def _check_leaf(data: dict[str, Any], path: str, label: str) -> Target:
    """:func:`locate`, and the path must end at one value (not a group of fields)."""
    target = locate(data, path, label)
    value = target.container.get(target.key) if isinstance(target.container, dict) else None
    if isinstance(value, list) or (isinstance(value, dict) and value
                                   and not _scalar_allowed(data, path)):
        names = ", ".join(str(k) for k in value) if isinstance(value, dict) \
            else f"elements 0-{len(value) - 1}"
        raise ValueError(f"'{path}' of {label} is a group of fields; an axis sets one value: "
                         f"name one of: {names}")
    return target


def _scalar_allowed(data: dict[str, Any], path: str) -> bool:
    """Whether a field holding a mapping also takes a plain value (an engine's ``device`` or
    a model entry's ``model`` may be an inline spec or a catalog name)."""
    return path.rsplit(".", 1)[-1] in ("device", "model")


def set_path(data: dict[str, Any], path: str, value: Any, label: str = "") -> None:
    """Set ``path`` in ``data`` (a dumped ServingSpec) to ``value``. Setting a kind-selecting
    field keeps only the settings the new kind has (see the module docstring)."""
    paths.set_path(data, path, value, ServingSpec, label or "the serving system")


def _is_kind_path(data: dict[str, Any], path: str) -> bool:
    return paths.is_kind_path(data, path, ServingSpec)


def apply_fields(data: dict[str, Any], fields: dict[str, Any], label: str = "") -> None:
    """Set every path of ``fields`` in ``data``: kind-selecting fields first."""
    paths.apply_paths(data, fields, ServingSpec, label or "the serving system")


# ---- points -----------------------------------------------------------------------------------

def start_ref(spec: ExperimentSpec, overrides: dict[str, Any]) -> str | dict[str, Any]:
    """The serving system a point starts from: its ``serving`` axis value, else its variant's
    ``serving``, else ``base.serving``."""
    variant = spec.base.variants.get(str(overrides.get(VARIANT_AXIS)), {}) \
        if VARIANT_AXIS in overrides else {}
    ref = overrides.get(SERVING_ENTRY, variant.get(SERVING_ENTRY, spec.base.serving))
    if ref is None:
        raise SpecError("base.serving: a serving study needs a serving system")
    return ref


def resolve_serving(spec: ExperimentSpec, overrides: dict[str, Any]
                    ) -> tuple[ServingSpec, Path | None]:
    """The serving system of one point and the folder its trace paths resolve against:
    the start system, then ``base.overrides``, the point's variant, its field axes.

    Raises :class:`~codesign.errors.SpecError` for a value a field does not accept."""
    ref = start_ref(spec, overrides)
    data, base_dir = load_serving_data(ref)
    label = serving_label(ref)
    apply_fields(data, dict(spec.base.overrides), label)
    if VARIANT_AXIS in overrides:
        variant = spec.base.variants[str(overrides[VARIANT_AXIS])]
        apply_fields(data, {p: v for p, v in variant.items() if p != SERVING_ENTRY}, label)
    apply_fields(data, {p: v for p, v in overrides.items() if p not in SERVING_WHOLE}, label)
    return ServingSpec.parse(data, label), base_dir


# ---- validation of a serving study --------------------------------------------------------------

Start = tuple[str, dict[str, Any]]  # (label, data)


def _start(ref: str | dict[str, Any], spec: ExperimentSpec, where: str,
           variant: str | None = None) -> Start:
    """The data a point starts from before its field axes (validated in full)."""
    label = serving_label(ref)
    try:
        data, _ = load_serving_data(ref)
    except CodesignError as exc:
        raise ValueError(f"{where}: {exc}") from None
    try:
        apply_fields(data, dict(spec.base.overrides), label)
    except ValueError as exc:
        raise ValueError(f"base.overrides: unknown path: {exc}") from None
    if variant is not None:
        fields = {p: v for p, v in spec.base.variants[variant].items() if p != SERVING_ENTRY}
        try:
            apply_fields(data, fields, label)
        except ValueError as exc:
            raise ValueError(f"base.variants.{variant}: unknown path: {exc}") from None
        label = f"{label} with variant '{variant}'"
    try:
        ServingSpec.parse(data)
    except SpecError as exc:
        what = f"base.variants.{variant}" if variant is not None else "base.overrides"
        raise ValueError(f"{what}: {exc}") from None
    return label, data


def _check_variants(spec: ExperimentSpec) -> None:
    for name, fields in spec.base.variants.items():
        if not isinstance(fields, dict):
            raise ValueError(f"base.variants.{name}: a variant is a mapping of field paths to "
                             "values")
        for path, value in fields.items():
            if path == VARIANT_AXIS:
                raise ValueError(f"base.variants.{name}: a variant cannot name another variant")
            if path == SERVING_ENTRY:
                if not isinstance(value, (str, dict)):
                    raise ValueError(f"base.variants.{name}.serving: a file path or mapping")
            elif isinstance(value, (list, dict)):
                raise ValueError(f"base.variants.{name}.{path}: values must be numbers, "
                                 "booleans, strings or null")


def _block_starts(spec: ExperimentSpec, axes: dict[str, list[Any]], where: str,
                  cache: dict[tuple[str, str | None], Start]) -> list[Start]:
    """Every (label, data) a block's points start from."""
    variants: list[str | None] = [None]
    if VARIANT_AXIS in axes:
        variants = []
        for v in axes[VARIANT_AXIS]:
            if str(v) not in spec.base.variants:
                allowed = ", ".join(spec.base.variants) or "(none defined in base.variants)"
                raise ValueError(f"{where}.variant: unknown variant '{v}'; allowed: {allowed}")
            variants.append(str(v))
    refs: list[str | dict[str, Any] | None] = list(axes.get(SERVING_ENTRY, [None]))
    out: list[Start] = []
    for ref_axis, variant in itertools.product(refs, variants):
        var = spec.base.variants.get(variant, {}) if variant is not None else {}
        ref = ref_axis if ref_axis is not None else var.get(SERVING_ENTRY, spec.base.serving)
        if ref is None:
            raise ValueError("base.serving: a serving study needs a serving system (a file, "
                             "a catalog name like serving/NAME.yaml, or a mapping)")
        key = (ref if isinstance(ref, str) else repr(sorted(ref.items())), variant)
        if key not in cache:
            where_ref = f"{where}.serving" if ref_axis is not None else "base.serving"
            cache[key] = _start(ref, spec, where_ref, variant)
        out.append(cache[key])
    return out


def _kind_rows(block_axes: dict[str, list[Any]], mode: str,
               kinds: list[str]) -> list[dict[str, Any]]:
    """The combinations of the block's kind-selecting axes its points take."""
    if not kinds:
        return [{}]
    if mode == "zip":
        return [dict(zip(kinds, row, strict=True))
                for row in zip(*(block_axes[k] for k in kinds), strict=True)]
    return [dict(zip(kinds, row, strict=True))
            for row in itertools.product(*(block_axes[k] for k in kinds))]


def check_paths(paths: dict[str, list[Any]], starts: list[Start], where: str,
                mode: str = "product") -> None:
    """Raise ValueError unless every field path exists in every start (with the kind-selecting
    axes among ``paths`` applied first, as a point applies them)."""
    fields = {p: v for p, v in paths.items() if p not in SERVING_WHOLE}
    for label, data in starts:
        kinds = [p for p in fields if _is_kind_path(data, p)]
        for row in _kind_rows(fields, mode, kinds):
            d = copy.deepcopy(data) if row else data
            suffix = ""
            try:
                for p, v in row.items():
                    set_path(d, p, v, label)
            except ValueError as exc:
                raise ValueError(f"{where}: unknown path: {exc}") from None
            if row:
                suffix = " (" + ", ".join(f"{p}={v}" for p, v in row.items()) + ")"
            for p in fields:
                if p in row:
                    continue
                try:
                    _check_leaf(d, p, label + suffix)
                except ValueError as exc:
                    raise ValueError(f"{where}: unknown path '{p}': {exc}") from None


def check_serving_experiment(spec: ExperimentSpec) -> None:
    """Every reference, variant and path of a serving study (ValueError naming the first
    problem); see the module docstring."""
    _check_variants(spec)
    cache: dict[tuple[str, str | None], Start] = {}
    base_starts = _block_starts(spec, {}, "base", cache)
    if spec.base.variants:  # every variant, used by a block or not
        _block_starts(spec, {VARIANT_AXIS: list(spec.base.variants)}, "base", cache)

    def check_block(block: SweepBlock, where: str) -> None:
        for p in block.axes:
            if p in SERVING_WHOLE:
                for v in block.axes[p]:
                    if not isinstance(v, str):
                        raise ValueError(f"{where}.axes.{p}: values are names or file paths, "
                                         f"got {v!r}")
        starts = _block_starts(spec, block.axes, f"{where}.axes", cache)
        check_paths(block.axes, starts, f"{where}.axes", block.mode)

    for i, block in enumerate(spec.sweep):
        check_block(block, f"sweep[{i}]")
    if spec.smoke is not None:
        smoke_fields = {p: [v] for p, v in spec.smoke.base.items() if p not in SERVING_WHOLE}
        if VARIANT_AXIS in spec.smoke.base:
            raise ValueError("smoke.base: 'variant' is an axis; choose variants in smoke.sweep")
        check_paths(smoke_fields, base_starts, "smoke.base")
        for i, block in enumerate(spec.smoke.sweep or []):
            check_block(block, f"smoke.sweep[{i}]")


def absolutize(base: Any, blocks: list[Any], smoke_base: Any, fix: Any) -> None:
    """Apply ``fix`` (a reference next to the study file -> absolute path) to the serving
    references of a raw study mapping: ``base.serving``, variants' ``serving``, ``serving``
    axes and ``smoke.base.serving``."""
    if isinstance(base, dict):
        if SERVING_ENTRY in base:
            base[SERVING_ENTRY] = fix(base[SERVING_ENTRY])
        variants = base.get("variants")
        if isinstance(variants, dict):
            for fields in variants.values():
                if isinstance(fields, dict) and SERVING_ENTRY in fields:
                    fields[SERVING_ENTRY] = fix(fields[SERVING_ENTRY])
    if isinstance(smoke_base, dict) and SERVING_ENTRY in smoke_base:
        smoke_base[SERVING_ENTRY] = fix(smoke_base[SERVING_ENTRY])
    for block in blocks:
        axes = block.get("axes") if isinstance(block, dict) else None
        if isinstance(axes, dict) and isinstance(axes.get(SERVING_ENTRY), list):
            axes[SERVING_ENTRY] = [fix(v) for v in axes[SERVING_ENTRY]]


__all__ = ["DEFAULT_SERVING_METRICS", "SERVING_ENTRY", "SERVING_HIGHER_IS_BETTER",
           "SERVING_METRICS", "SERVING_METRIC_COLUMNS", "SERVING_WHOLE", "VARIANT_AXIS",
           "Target", "absolutize", "apply_fields", "catalog_serving_systems",
           "check_paths", "check_serving_experiment", "load_serving_data", "locate",
           "resolve_serving", "serving_label", "set_path", "start_ref"]
