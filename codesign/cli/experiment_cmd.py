"""``codesign experiment list | show | run``: co-design studies; ``codesign sweep`` is
``experiment run`` under its older name (one parser builder, one code path)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from codesign.cli.common import add_jobs, add_out, add_progress, jobs_of
from codesign.errors import CodesignError, SpecError


def register(sub: Any) -> None:
    """Add ``experiment`` and its alias ``sweep`` to the top-level subparsers ``sub``."""
    exp = sub.add_parser(
        "experiment", help="co-design studies from the catalog (list, show, run)",
        description="Studies are YAML specs in the repository's experiments/ folder: a base "
                    "run, sweep axes, metrics and plots. Results go to results/<name>/ "
                    "(manifest.json, results/*.parquet, figures/).")
    esub = exp.add_subparsers(dest="experiment_command", metavar="ACTION")
    exp.set_defaults(func=lambda args: _help(exp))

    ls = esub.add_parser("list", help="the studies in the catalog")
    ls.set_defaults(func=cmd_list)

    show = esub.add_parser("show", help="what a study asks, its base run, axes, points, plots")
    show.add_argument("name", metavar="NAME", help="catalog study name or YAML file")
    show.set_defaults(func=cmd_show)

    _add_run_parser(esub, "run", help="run a study (resumes where a previous run stopped)")
    # ``sweep`` is ``experiment run`` under its older name: the same parser and code path
    _add_run_parser(sub, "sweep", help="run a study (alias of 'experiment run')")


def _add_run_parser(sub: Any, name: str, help: str) -> None:
    run = sub.add_parser(
        name, help=help,
        description="Run every point of a study not yet stored in the output directory, then "
                    "draw its figures. Re-running resumes; a point that is infeasible or fails "
                    "is stored as a row with its reason. A study is a YAML file: a base run "
                    "(a run file: model, gpu, topology, num_gpus, plan), sweep axes (dotted "
                    "paths such as gpu.hbm_bandwidth_TBps or plan.tp), search, metrics, plots.")
    run.add_argument("name", metavar="NAME", help="catalog study name or YAML file")
    _add_run_options(run)
    run.set_defaults(func=cmd_run)


def _add_run_options(ap: argparse.ArgumentParser) -> None:
    add_out(ap, "DIR", "results directory (default results/<name>, results/<name>-smoke "
                       "with --smoke)")
    add_jobs(ap, "running the points")
    ap.add_argument("--scheduler", metavar="ADDR",
                    help="run on a Dask cluster (e.g. tcp://host:8786; needs codesign[dask])")
    ap.add_argument("--smoke", action="store_true",
                    help="the reduced study (the spec's smoke section)")
    add_progress(ap, default=True)
    ap.add_argument("--overwrite", action="store_true",
                    help="replace results of a different spec in the output directory")
    ap.add_argument("--retry-failed", action="store_true",
                    help="evaluate stored failed points again")
    ap.add_argument("--no-plots", dest="plots", action="store_false",
                    help="do not draw the figures")
    ap.add_argument("--max-points", type=int, metavar="N",
                    help="refuse a study of more than N points (default one million, "
                         "codesign.experiments.axes.MAX_POINTS)")


def _help(ap: argparse.ArgumentParser) -> int:
    ap.print_help()
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from codesign.experiments.spec import list_experiments

    studies = list_experiments()
    if not studies:
        print("no studies in the catalog")
    for name, title in studies:
        print(f"  {name:28s} {title}")
    return 0


def _fmt_values(values: list[Any], limit: int = 8) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}] ({len(values)})"


def _entry(ref: Any) -> str:
    return "inline" if isinstance(ref, dict) else str(ref)


def cmd_show(args: argparse.Namespace) -> int:
    from codesign.experiments.axes import expand_points
    from codesign.experiments.spec import load_experiment

    spec = load_experiment(args.name)
    b = spec.base
    lines = [f"{spec.name}: {spec.title}" if spec.title else spec.name]
    if spec.question:
        lines.append(f"question: {' '.join(spec.question.split())}")
    if spec.kind == "serving":
        lines.append(f"base: serving system {_entry(b.serving)}")
        lines += [f"  variant {name}: " + " ".join(f"{k}={v}" for k, v in fields.items())
                  for name, fields in b.variants.items()]
    else:
        topo = _entry(b.topology) if b.topology is not None else "the GPU's system"
        lines.append(f"base: {_entry(b.model)} on {b.num_gpus or '?'} x {_entry(b.gpu)} "
                     f"({topo})")
    if b.plan:
        lines.append("  plan: " + " ".join(f"{k}={v}" for k, v in b.plan.items()))
    if b.overrides:
        lines.append("  overrides: " + " ".join(f"{k}={v}" for k, v in b.overrides.items()))
    for i, block in enumerate(spec.sweep):
        lines.append(f"sweep block {i} ({block.mode}, {block.num_points} points):")
        lines += [f"  {path}: {_fmt_values(values)}" for path, values in block.axes.items()]
    if spec.search is not None:
        s = spec.search
        space = " ".join(f"{k}={v}" for k, v in s.space.items()) or "automatic"
        lines.append(f"search per point: objective {s.objective}, space {space}, top "
                     f"{s.top_n}, confirm {s.confirm}")
    smoke_spec = spec.smoke_spec()
    lines.append(f"points: {_count(spec, expand_points)} (smoke: "
                 f"{_count(smoke_spec, expand_points)})")
    lines.append(f"metrics: {', '.join(spec.metrics)}")
    if spec.plots:
        lines.append("plots:")
        for p in spec.plots:
            extra = "".join(f", {k} {getattr(p, k)}" for k in ("hue", "facet")
                            if getattr(p, k) is not None)
            lines.append(f"  {p.file}: {p.kind} of {p.y} vs {p.x}{extra}")
    print("\n".join(lines))
    return 0


def _count(spec: Any, expand: Any) -> str:
    """Points of a study: distinct points when few enough to enumerate, else the product's
    count (``experiment show`` counts, it never enumerates millions of points)."""
    from codesign.experiments.axes import MAX_POINTS

    if spec.num_points > MAX_POINTS:
        return f"{spec.num_points:,} (over the run cap of {MAX_POINTS:,})"
    return f"{len(expand(spec)):,}"


#: a Dask scheduler address: tcp://host:port (or tls, ucx, inproc) or host:port
_DASK_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|inproc|ws|wss)://)?[\w.\-\[\]:]+:\d+/?$")


def _scheduler(address: str | None) -> Any:
    if address is None:
        return None
    if not _DASK_ADDRESS.match(address):
        raise SpecError(f"--scheduler: {address!r} is not a Dask scheduler address "
                        "(e.g. tcp://host:8786)")
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        from codesign.experiments.runner import DASK_MISSING

        raise CodesignError(DASK_MISSING) from None
    return address


def cmd_run(args: argparse.Namespace) -> int:
    from codesign.experiments.runner import run_experiment
    from codesign.experiments.spec import load_experiment

    jobs = jobs_of(args)
    spec = load_experiment(args.name)
    out = Path(args.out) if args.out else Path("results") / (
        f"{spec.name}-smoke" if args.smoke else spec.name)
    try:
        summary = run_experiment(spec, out, jobs=jobs, scheduler=_scheduler(args.scheduler),
                                 smoke=args.smoke, progress=args.progress,
                                 overwrite=args.overwrite, retry_failed=args.retry_failed,
                                 plots=args.plots, **({"max_points": args.max_points}
                                                      if args.max_points else {}))
    except KeyboardInterrupt:
        print(f"codesign: finished points are stored in {out}; run the same command again "
              "to resume", file=sys.stderr)
        raise
    print(summary.to_text())
    return 0
