"""Study benchmark: run study (2), ``fullflat-vs-twotier``, at full size and print its points,
wall time and points per second.

Run: ``python benchmarks/bench_study_fullflat.py [--jobs N] [--no-plots]``. The study (a
per-point parallelism search of the 1.8T MoE on 8,192 GPUs over 12 two-tier and 3 FullFlat
networks) runs from scratch into a temporary directory, exactly as
``codesign experiment run fullflat-vs-twotier`` does (``--jobs``: local processes, default 1
so that the time is that of one core; the figures are drawn unless ``--no-plots``). The
search columns of the results give the plans evaluated per point.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1, help="local processes (default 1)")
    ap.add_argument("--no-plots", action="store_true", help="do not draw the figures")
    args = ap.parse_args(argv)

    from codesign.experiments.runner import run_experiment
    from codesign.experiments.spec import load_experiment
    from codesign.experiments.store import load_results

    spec = load_experiment("fullflat-vs-twotier")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fullflat-vs-twotier"
        t0 = time.perf_counter()
        summary = run_experiment(spec, out, jobs=args.jobs, progress=False,
                                 plots=not args.no_plots)
        wall_s = time.perf_counter() - t0
        df = load_results(out)
    plans = int(df["search.evaluated"].sum()) if "search.evaluated" in df else 0
    point_s = df["sim_wall_s"].astype(float)
    print(f"study fullflat-vs-twotier: {summary.points_total} points "
          f"({summary.ok} ok, {summary.infeasible} infeasible, {summary.failed} failed), "
          f"jobs {args.jobs}")
    print(f"wall time {wall_s:.1f} s, {summary.points_total / wall_s:.2f} points/s "
          f"(per point: median {point_s.median():.2f} s, max {point_s.max():.2f} s)")
    if plans:
        print(f"plans searched: {plans} ({plans / wall_s:.0f} plans/s)")
    if summary.best is not None:
        print(summary.to_text().splitlines()[-1])


if __name__ == "__main__":
    main()
