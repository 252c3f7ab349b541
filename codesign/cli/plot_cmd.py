"""``codesign plot``: redraw the figures of stored study results (no simulation)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from codesign.cli.common import add_out
from codesign.errors import CodesignError


def register(sub: Any) -> None:
    """Add ``plot`` to the top-level subparsers ``sub``."""
    plot = sub.add_parser(
        "plot", help="redraw the figures of stored results (no simulation)",
        description="Draw the plots of the spec stored in RESULTS/manifest.json from the rows "
                    "in RESULTS/results/.")
    plot.add_argument("results", metavar="RESULTS", help="results directory of a run")
    add_out(plot, "DIR", "figure directory (default RESULTS/figures)")
    plot.set_defaults(func=cmd_plot)


def cmd_plot(args: argparse.Namespace) -> int:
    from codesign.experiments.spec import ExperimentSpec
    from codesign.experiments.store import FIGURES, MANIFEST, load_manifest, load_results

    results = Path(args.results)
    manifest = load_manifest(results)
    spec = ExperimentSpec.parse(manifest["spec"], str(results / MANIFEST), check_entries=False)
    if not spec.plots:
        print(f"{spec.name}: the spec has no plots")
        return 0
    try:
        from codesign.experiments.plots import draw_plots
    except ImportError as exc:
        raise CodesignError(f"plotting is not available: {exc}") from None
    df = load_results(results)
    out = Path(args.out) if args.out else results / FIGURES
    files = draw_plots(df, spec, out)
    ok = int((df["status"] == "ok").sum()) if "status" in df.columns else 0
    print(f"{spec.name}: {len(files)} files from {len(df)} rows ({ok} ok) in {out}")
    for f in files:
        print(f"  {f}")
    return 0
