"""Running a study: expand its points, evaluate those not stored yet, stream rows to disk.

Points run in a local process pool (all cores by default; ``jobs=1`` runs them in this
process) or, given ``scheduler`` (an address such as ``tcp://host:8786``, a
``dask.distributed.Client`` or a cluster object such as ``LocalCluster``), on a Dask cluster.
Either way every row is stored the moment it arrives (:mod:`codesign.experiments.store`), a
progress bar on stderr shows points done, infeasible, failed and the time left, and the
figures of the study are drawn at the end.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from codesign.errors import CodesignError
from codesign.experiments.axes import MAX_POINTS, Point, expand_points
from codesign.experiments.point import evaluate_point, failed_row
from codesign.experiments.spec import HIGHER_IS_BETTER, ExperimentSpec
from codesign.experiments.store import FIGURES, RESULTS, ResultStore, is_missing, load_results
from codesign.runtime import pool_init

DASK_MISSING = ('running on a Dask cluster needs dask.distributed: '
                'pip install "codesign[dask]"')


@dataclass
class RunSummary:
    """What a run did and where its outputs are (counts over every stored row)."""

    name: str
    out_dir: Path
    points_total: int
    skipped: int  # stored before this run: not evaluated again
    evaluated: int  # evaluated by this run
    ok: int
    infeasible: int
    failed: int
    elapsed_s: float
    metric: str  # the study's first metric, which ``best`` maximizes or minimizes
    best: dict[str, Any] | None = None  # the best ok row by ``metric``
    figures: list[Path] = field(default_factory=list)
    axes: list[str] = field(default_factory=list)  # the study's axis paths

    @property
    def results_dir(self) -> Path:
        return self.out_dir / RESULTS

    @property
    def figures_dir(self) -> Path:
        return self.out_dir / FIGURES

    def to_text(self) -> str:
        """A few lines for the end of a CLI run."""
        lines = [f"{self.name}: {self.points_total} points: {self.ok} ok, {self.infeasible} "
                 f"infeasible, {self.failed} failed ({self.evaluated} evaluated in "
                 f"{self.elapsed_s:.1f} s, {self.skipped} already stored)",
                 f"results: {self.results_dir}  (codesign plot {self.out_dir})"]
        if self.figures:
            lines.append(f"figures: {self.figures_dir} ({len(self.figures)} files)")
        if self.best is not None:
            where = ", ".join(f"{p}={_fmt(self.best[p])}" for p in self.axes
                              if not is_missing(self.best.get(p))) \
                or f"point {self.best.get('point_id')}"
            value = self.best.get(self.metric)
            lines.append(f"best {self.metric}: {_fmt(value)} at {where}")
        return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    return str(value)


def best_row(df: pd.DataFrame, metric: str) -> dict[str, Any] | None:
    """The ok row that is best by ``metric`` (largest for throughput-like metrics, smallest
    for times and memory); ``None`` when no ok row has it."""
    if df.empty or metric not in df.columns or "status" not in df.columns:
        return None
    ok = df[(df["status"] == "ok") & df[metric].notna()]
    if ok.empty:
        return None
    idx = ok[metric].idxmax() if metric in HIGHER_IS_BETTER else ok[metric].idxmin()
    return {str(k): v for k, v in ok.loc[idx].to_dict().items()}


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# ---- executors ------------------------------------------------------------------------------

Rows = Iterator[tuple[Point, dict[str, Any]]]


def _in_process(spec: ExperimentSpec, points: list[Point]) -> tuple[Rows, Callable[[], None]]:
    return ((p, evaluate_point(spec, p)) for p in points), lambda: None


def _pool(spec: ExperimentSpec, points: list[Point],
          jobs: int) -> tuple[Rows, Callable[[], None]]:
    """Rows as the workers finish them (the workers start here, before any other thread)."""
    pool = ProcessPoolExecutor(max_workers=jobs, **pool_init())
    futures: dict[Any, Point] = {pool.submit(evaluate_point, spec, p): p for p in points}
    return (_results(spec, as_completed(futures), futures),
            lambda: pool.shutdown(wait=False, cancel_futures=True))


def _results(spec: ExperimentSpec, done: Any, futures: dict[Any, Point]) -> Rows:
    for fut in done:
        p = futures[fut]
        try:
            row = fut.result()
        except Exception as exc:  # the worker died or the cluster lost the task
            row = failed_row(spec, p, exc)
        yield p, row


def _dask_client(scheduler: Any) -> tuple[Any, bool]:
    """(client, whether we created it) for an address, a Client or a cluster object."""
    try:
        from dask.distributed import Client
    except ImportError:
        raise CodesignError(DASK_MISSING) from None
    if isinstance(scheduler, Client):
        return scheduler, False
    try:
        return Client(scheduler, set_as_default=False), True
    except OSError as exc:
        raise CodesignError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None


def _dask(spec: ExperimentSpec, points: list[Point], client: Any,
          own: bool) -> tuple[Rows, Callable[[], None]]:
    from dask.distributed import as_completed as dask_as_completed

    futures: dict[Any, Point] = {}
    shared: list[Any] = []
    if points:
        shared.append(client.scatter(spec, broadcast=True))
        futures = {client.submit(evaluate_point, shared[0], p, pure=False): p for p in points}

    def close() -> None:
        client.cancel([*futures, *shared])
        if own:
            client.close()

    return _results(spec, dask_as_completed(list(futures), loop=client.loop), futures), close


# ---- running ----------------------------------------------------------------------------------

def run_experiment(spec: ExperimentSpec, out_dir: str | Path, jobs: int | None = None,
                   scheduler: Any = None, smoke: bool = False, progress: bool = True,
                   overwrite: bool = False, *, retry_failed: bool = False,
                   plots: bool = True, flush_interval_s: float = 2.0,
                   max_points: int = MAX_POINTS) -> RunSummary:
    """Run every point of ``spec`` not yet stored in ``out_dir`` and draw the figures.

    ``jobs``: local processes (default: all cores; 1 = in this process). ``scheduler``: run on
    a Dask cluster instead. ``smoke``: the reduced study (:meth:`ExperimentSpec.smoke_spec`).
    ``overwrite``: delete results of another spec in ``out_dir`` instead of refusing.
    ``retry_failed``: evaluate stored ``failed`` points again. ``flush_interval_s``: seconds
    between Parquet parts (rows are journaled immediately either way).

    On ``KeyboardInterrupt`` the finished rows are stored and the interrupt re-raised; running
    again resumes.
    """
    t0 = time.perf_counter()
    if smoke:
        spec = spec.smoke_spec()
    out_dir = Path(out_dir)
    points = expand_points(spec, max_points)
    client: Any = None
    own = False
    if scheduler is not None:
        client, own = _dask_client(scheduler)
    shutdown: Callable[[], None] = client.close if own else (lambda: None)
    ids = {p.point_id for p in points}
    try:
        with ResultStore(out_dir, spec, len(points), overwrite=overwrite,
                         flush_interval_s=flush_interval_s) as store:
            done = store.finished()
            keep = {pid for pid, status in done.items()
                    if pid in ids and not (retry_failed and status == "failed")}
            todo = [p for p in points if p.point_id not in keep]
            counts = dict.fromkeys(("ok", "infeasible", "failed"), 0)
            for pid in keep:
                counts[done[pid]] = counts.get(done[pid], 0) + 1

            njobs = jobs if jobs is not None else default_jobs()
            if client is not None:
                rows, shutdown = _dask(spec, todo, client, own)
            elif njobs <= 1 or len(todo) <= 1:
                rows, shutdown = _in_process(spec, todo)
            else:  # the workers start here, before the progress bar's thread
                rows, shutdown = _pool(spec, todo, min(njobs, len(todo)))

            from tqdm import tqdm

            evaluated = 0
            bar = tqdm(total=len(points), initial=len(keep), desc=spec.name, unit="pt",
                       file=sys.stderr, disable=not progress, dynamic_ncols=True)
            try:
                bar.set_postfix(counts, refresh=False)
                for _, row in rows:
                    store.add(row)
                    evaluated += 1
                    status = str(row.get("status"))
                    counts[status] = counts.get(status, 0) + 1
                    bar.set_postfix(counts, refresh=False)
                    bar.update(1)
            finally:
                bar.close()
    finally:
        shutdown()

    df = load_results(out_dir)
    df = df[df["point_id"].isin(ids)] if not df.empty else df
    figures = draw_figures(df, spec, out_dir / FIGURES) if plots and spec.plots else []
    status = df["status"].value_counts().to_dict() if not df.empty else {}
    return RunSummary(
        name=spec.name, out_dir=out_dir, points_total=len(points),
        skipped=len(keep), evaluated=evaluated,
        ok=int(status.get("ok", 0)), infeasible=int(status.get("infeasible", 0)),
        failed=int(status.get("failed", 0)), elapsed_s=time.perf_counter() - t0,
        metric=spec.metrics[0], best=best_row(df, spec.metrics[0]), figures=figures,
        axes=spec.axis_paths)


def draw_figures(df: pd.DataFrame, spec: ExperimentSpec, figures_dir: Path) -> list[Path]:
    """Draw the study's plots with :func:`codesign.experiments.plots.draw_plots`; a missing
    plotting module or a failing plot is a warning (the results are stored either way)."""
    try:
        from codesign.experiments.plots import draw_plots
    except ImportError as exc:
        warnings.warn(f"plots skipped: {exc}", RuntimeWarning, stacklevel=2)
        return []
    try:
        return list(draw_plots(df, spec, figures_dir))
    except CodesignError:
        raise
    except Exception as exc:
        warnings.warn(f"plots failed ({type(exc).__name__}: {exc}); the results are stored, "
                      f"redraw with: codesign plot {figures_dir.parent}", RuntimeWarning,
                      stacklevel=2)
        return []


__all__ = ["DASK_MISSING", "RunSummary", "best_row", "default_jobs", "draw_figures",
           "run_experiment"]
