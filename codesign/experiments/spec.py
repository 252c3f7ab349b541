"""Experiment specs: a base run, sweep axes (dotted paths into the run), an optional per-point
parallelism search, the metrics a study is about and the plots to draw.

A study is a YAML file in the repository's ``experiments/`` folder (installed as the package
``codesign.catalogs.experiments``) or any file path::

    name: hbm-bandwidth
    title: "MFU vs HBM bandwidth"
    base: {model: gpt3-175b, gpu: h100, num_gpus: 1024, plan: {tp: 8, pp: 8}}
    sweep:
      - mode: product                         # product (default) | zip
        axes: {gpu.hbm_bandwidth_TBps: [2, 4, 8, 16]}
    metrics: [mfu, step_time_s]
    plots: [{kind: line, x: gpu.hbm_bandwidth_TBps, y: mfu, file: mfu-vs-hbm}]

``base`` is a run file (:mod:`codesign.specs.run_file`, the loader of ``simulate --run``
too). Axis paths: ``model``, ``gpu``, ``topology`` (whole entries: catalog names or file
paths), ``num_gpus``, ``plan.<field>`` (a :class:`~codesign.specs.parallel.ParallelismSpec`
field) and ``model.<field...>``, ``gpu.<field...>``, ``topology.<field...>`` (fields of the
entry, in the path language of :mod:`codesign.specs.paths`). Every path is checked when the
spec is validated, against every entry it can apply to (:mod:`codesign.experiments.
training_axes`), and an unknown one is rejected with the fields allowed where it fails.

A study with ``kind: serving`` starts every point from a serving system instead (``base:
{serving: FILE, overrides: {...}, variants: {...}}``); its axes are paths into the
:class:`~codesign.specs.serving.ServingSpec` (``clients.chat.arrival.rate_rps``) and
``variant`` (see :mod:`codesign.experiments.serving_axes`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from codesign.errors import SpecError
from codesign.experiments.serving_axes import (
    DEFAULT_SERVING_METRICS,
    SERVING_HIGHER_IS_BETTER,
    SERVING_METRICS,
    check_serving_experiment,
)
from codesign.experiments.study_files import list_experiments, load_experiment
from codesign.experiments.training_axes import check_training_experiment
from codesign.specs.base import Spec, format_validation_error
from codesign.specs.run_file import ENTRY_KINDS, RunFile, load_entry

#: the metric columns of a result row (``breakdown_s.<key>`` and ``memory_GiB.<key>`` too)
METRICS = ("step_time_s", "mfu", "hfu", "tokens_per_s", "tflops_per_gpu",
           "hardware_tflops_per_gpu", "memory_GiB", "sim_wall_s")
#: owned-data-center cost columns of a training row -> the report's ``cost`` key
#: (:func:`codesign.report.cost.training_tco`)
COST_METRICS: dict[str, str] = {
    "capex_usd": "tco_capex_usd",
    "facility_power_kW": "tco_facility_power_kW",
    "usd_per_trillion_tokens": "tco_usd_per_trillion_tokens",
    "MWh_per_trillion_tokens": "tco_MWh_per_trillion_tokens",
    "tokens_per_usd": "tco_tokens_per_usd",
    "tokens_per_J": "tco_tokens_per_J",
}
#: metrics where larger is better (for "best point"); the others are better when smaller
HIGHER_IS_BETTER = frozenset({"mfu", "hfu", "tokens_per_s", "tflops_per_gpu",
                              "hardware_tflops_per_gpu", "tokens_per_usd", "tokens_per_J"}) \
    | SERVING_HIGHER_IS_BETTER
#: fields of ``base`` that only a training study has
TRAINING_BASE_FIELDS = ("model", "gpu", "topology", "num_gpus", "plan")

AxisValue = bool | int | float | str


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float, str))


class SweepBlock(Spec):
    """One block of sweep axes: path -> list of values, combined as a product or zipped."""

    mode: Literal["product", "zip"] = Field(
        default="product", description="product: every combination; zip: i-th values together")
    axes: dict[str, list[Any]] = Field(
        default_factory=dict, description="axis path -> values (scalars; names for entries)")

    @model_validator(mode="after")
    def _check_axes(self) -> SweepBlock:
        for path, values in self.axes.items():
            if not values:
                raise ValueError(f"axis '{path}' has no values")
            for v in values:
                if not _is_scalar(v):
                    raise ValueError(f"axis '{path}': values must be numbers, booleans or "
                                     f"strings, got {type(v).__name__} {v!r}")
                if path in ENTRY_KINDS and not isinstance(v, str):
                    raise ValueError(f"axis '{path}': values must be catalog names or file "
                                     f"paths, got {v!r}")
        if self.mode == "zip":
            lengths = {p: len(v) for p, v in self.axes.items()}
            if len(set(lengths.values())) > 1:
                sizes = ", ".join(f"{p}: {n}" for p, n in lengths.items())
                raise ValueError(f"mode 'zip' needs axes of the same length, got {sizes}")
        return self

    @property
    def num_points(self) -> int:
        """Points this block expands to (before de-duplication across blocks)."""
        if not self.axes:
            return 1
        if self.mode == "zip":
            return len(next(iter(self.axes.values())))
        n = 1
        for values in self.axes.values():
            n *= len(values)
        return n


class BaseRun(RunFile):
    """The run every point starts from: a run file (:class:`~codesign.specs.run_file.RunFile`:
    ``model``/``gpu``/``topology`` as catalog names, file paths or inline mappings, the
    topology defaulting to the GPU's usual system; ``num_gpus``; ``plan``, alias ``parallel``)
    with the overrides and, for a serving study, the serving system and its variants."""

    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="field paths (model.x, gpu.x, topology.x) set on every point before the axes")
    serving: str | dict[str, Any] | None = Field(
        default=None, description="kind serving: the serving spec (file, catalog-relative "
                                  "file such as serving/NAME.yaml, or mapping)")
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="kind serving: named bundles of field paths, applied by the axis 'variant'")


class SearchSettings(Spec):
    """Per-point parallelism search (:func:`codesign.search.search.search`).

    Every plan field set by ``base.plan`` or an axis pins that field, except the fields listed
    in ``space``, which are searched (with the values listed; ``None``/left out: automatic).
    """

    objective: Literal["mfu", "tokens_per_s"] = "mfu"
    space: dict[str, Any] = Field(default_factory=dict,
                                  description="SearchSpace fields: field -> list of values")
    top_n: int = Field(default=10, ge=1, description="candidates ranked by the estimate")
    confirm: int = Field(default=3, ge=0, description="best candidates confirmed by the engine")
    jobs: int = Field(default=1, ge=1, description="processes inside one point's search")

    @field_validator("space")
    @classmethod
    def _check_space(cls, space: dict[str, Any]) -> dict[str, Any]:
        try:  # the search package may be absent in a partial install: then checked at run time
            from codesign.search.space import SearchSpace
        except ImportError:
            return space
        try:
            SearchSpace.model_validate(space)
        except ValidationError as exc:
            raise ValueError(format_validation_error(exc, "search.space")) from None
        return space


class PlotSpec(Spec):
    """One figure drawn from the rows with status ``ok`` (PDF and PNG, named ``file``)."""

    kind: str = Field(description="plot kind: a name registered in "
                                  "codesign.experiments.plots.PLOT_KINDS (line, bar, "
                                  "breakdown, heatmap)")
    x: str = Field(description="column on the x axis (an axis path or a metric)")
    y: str = Field(description="column on the y axis")
    hue: str | None = Field(default=None, description="one line/bar group per value")
    facet: str | None = Field(default=None, description="one panel per value")
    value: str | None = Field(default=None,
                              description="heatmap: the colored column (default: the first metric)")
    logx: bool = False
    logy: bool = False
    title: str | None = None
    file: str = Field(min_length=1, description="file stem; <file>.pdf and <file>.png written")

    @field_validator("file")
    @classmethod
    def _check_file(cls, file: str) -> str:
        if "/" in file or "\\" in file or file.startswith("."):
            raise ValueError(f"'{file}' must be a plain file stem (no folders, no leading dot)")
        return file

    @field_validator("kind")
    @classmethod
    def _registered_kind(cls, kind: str) -> str:
        # the registry's drawers type their argument with this spec: import it when used
        from codesign.experiments.plots.registry import PLOT_KINDS

        if kind not in PLOT_KINDS:
            raise ValueError(f"unknown plot kind {kind!r}; allowed: {', '.join(PLOT_KINDS)}")
        return kind


class Smoke(Spec):
    """A reduced version of the study for the smoke test and ``--smoke``."""

    base: dict[str, Any] = Field(
        default_factory=dict,
        description="dotted overrides of base: num_gpus, plan.<field>, model, gpu.<field>, ...")
    sweep: list[SweepBlock] | None = Field(
        default=None, description="replacement sweep; None: the first 2 values of every axis")

    @field_validator("sweep", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v


class ExperimentSpec(Spec):
    """A study: base run, sweep blocks (points concatenated), search, metrics, plots."""

    name: str = Field(min_length=1, description="the file stem in experiments/")
    kind: Literal["training", "serving"] = Field(
        default="training", description="what a point simulates: a training run or a serving "
                                        "system (codesign.experiments.serving_axes)")
    title: str = ""
    question: str = Field(default="", description="the question the study answers")
    base: BaseRun = Field(default_factory=BaseRun)
    sweep: list[SweepBlock] = Field(default_factory=list,
                                    description="one block or a list; points are concatenated")
    search: SearchSettings | None = None
    metrics: list[str] = Field(default_factory=lambda: ["mfu", "tokens_per_s", "step_time_s"],
                               min_length=1)
    plots: list[PlotSpec] = Field(default_factory=list)
    smoke: Smoke | None = None

    @field_validator("sweep", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, dict) else v

    @model_validator(mode="before")
    @classmethod
    def _serving_metrics(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "serving" and "metrics" not in data:
            return {**data, "metrics": list(DEFAULT_SERVING_METRICS)}
        return data

    @field_validator("metrics")
    @classmethod
    def _check_metrics(cls, metrics: list[str], info: ValidationInfo) -> list[str]:
        from codesign.report.training import BREAKDOWN_KEYS, MEMORY_KEYS

        allowed = [*METRICS, *COST_METRICS, *(f"breakdown_s.{k}" for k in BREAKDOWN_KEYS),
                   *(f"memory_GiB.{k}" for k in MEMORY_KEYS)]
        if info.data.get("kind") == "serving":
            allowed = list(SERVING_METRICS)
        for m in metrics:
            if m not in allowed:
                raise ValueError(f"unknown metric '{m}'; allowed: {', '.join(allowed)}")
        return metrics

    @model_validator(mode="after")
    def _check_paths(self, info: ValidationInfo) -> ExperimentSpec:
        files = [p.file for p in self.plots]
        dupes = sorted({f for f in files if files.count(f) > 1})
        if dupes:
            raise ValueError(f"plots: file '{dupes[0]}' is used by more than one plot")
        if self.search is not None:
            for i, block in enumerate(self.sweep):
                for path in block.axes:
                    if path.startswith("plan.") and path[5:] in self.search.space:
                        raise ValueError(
                            f"sweep[{i}].axes: '{path}' is also searched (search.space."
                            f"{path[5:]}); sweep it or search it, not both")
        if self.kind == "serving":
            return self._check_serving(info)
        if self.base.serving is not None or self.base.variants:
            field = "serving" if self.base.serving is not None else "variants"
            raise ValueError(f"base.{field}: only a study of kind: serving has a serving "
                             "system (add kind: serving)")
        if isinstance(info.context, dict) and info.context.get("check_entries") is False:
            return self
        check_training_experiment(self)
        return self

    def _check_serving(self, info: ValidationInfo) -> ExperimentSpec:
        """A serving study: a serving base, no training fields, no search; its paths
        (:mod:`codesign.experiments.serving_axes`)."""
        defaults = BaseRun.model_fields
        training = [f for f in TRAINING_BASE_FIELDS if getattr(self.base, f)
                    != defaults[f].get_default(call_default_factory=True)]
        if training:
            raise ValueError(f"base.{training[0]}: a serving study's base has serving, "
                             "overrides and variants (the serving spec names models and "
                             "devices)")
        if self.search is not None:
            raise ValueError("search: a serving study has no parallelism search")
        if self.base.serving is None:
            raise ValueError("base.serving: a serving study needs a serving system (a file, a "
                             "catalog name like serving/NAME.yaml, or a mapping)")
        if isinstance(info.context, dict) and info.context.get("check_entries") is False:
            return self
        check_serving_experiment(self)
        return self

    @classmethod
    def parse(cls, data: Any, origin: str = "", *, check_entries: bool = True) -> ExperimentSpec:
        """Validate ``data``; raises :class:`SpecError` with one line per problem.

        ``check_entries=False`` skips loading the entries the spec names and checking the axis
        paths against them (for stored results whose entry files may have moved).
        """
        try:
            return cls.model_validate(data, context={"check_entries": check_entries})
        except ValidationError as exc:
            msg = format_validation_error(exc, cls.__name__, origin)
            raise SpecError(msg.replace("Value error, ", "").replace(".(root):", ":")) from None

    # ---- derived ----------------------------------------------------------------------------

    @property
    def axis_paths(self) -> list[str]:
        """Every axis path of every block, in first-seen order (the axis columns of a row)."""
        seen: dict[str, None] = {}
        for block in self.sweep:
            for p in block.axes:
                seen[p] = None
        return list(seen)

    @property
    def num_points(self) -> int:
        """Points before de-duplication across blocks (at least 1: the base run)."""
        return sum(b.num_points for b in self.sweep) if self.sweep else 1

    def smoke_spec(self) -> ExperimentSpec:
        """The reduced study: ``smoke.base`` applied to the base, ``smoke.sweep`` or the first
        2 values of every axis (the study itself when nothing is reduced)."""
        smoke = self.smoke or Smoke()
        base = self.base.model_dump()
        for path, value in smoke.base.items():
            if path in ("model", "gpu", "topology", "num_gpus", "serving"):
                base[path] = value
            elif path.startswith("plan."):
                base["plan"][path.removeprefix("plan.")] = value
            else:
                base["overrides"][path] = value
        if smoke.sweep is not None:
            sweep = [b.model_dump() for b in smoke.sweep]
        else:
            sweep = [{"mode": b.mode, "axes": {p: v[:2] for p, v in b.axes.items()}}
                     for b in self.sweep]
        data = self.model_dump()
        data.update(base=base, sweep=sweep, smoke=None)
        return ExperimentSpec.parse(data, f"{self.name} (smoke)")

    def results_hash(self) -> str:
        """Hash of what determines the results (name, base, sweep, search): a changed title,
        metric list or plot keeps stored results valid; anything else does not."""
        if self.kind == "serving":
            data = self.model_dump(mode="json", include={"name", "kind", "base", "sweep"})
        else:  # as before serving studies existed: stored training results stay valid
            data = self.model_dump(mode="json", include={"name", "base", "sweep", "search"},
                                   exclude={"base": {"serving", "variants"}})
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


__all__ = ["COST_METRICS", "ENTRY_KINDS", "HIGHER_IS_BETTER", "METRICS", "AxisValue", "BaseRun",
           "ExperimentSpec", "PlotSpec", "SearchSettings", "Smoke", "SweepBlock",
           "list_experiments", "load_entry", "load_experiment"]
