"""``codesign validate``: simulate published measurements and report the error per case."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from codesign.cli.common import add_format, add_progress, output_file


def register(sub: Any) -> None:
    """Add ``validate`` to the top-level subparsers ``sub``."""
    val = sub.add_parser(
        "validate", help="simulate published measurements and report the error per case",
        description="Read a CSV with the columns of experiments/validation/training_cases.csv "
                    "(with no argument: that file and its inference sibling, the published "
                    "runs shipped with codesign), "
                    "simulate every row whose configuration is complete enough, and compare "
                    "with what it measured (iteration time, tokens/s, TFLOP/s per GPU or MFU, "
                    "converted with the source's own FLOP formula). A CSV with a serving_mode "
                    "column (experiments/validation/inference_cases.csv) holds inference rows: "
                    "static-batch throughput, time to first token, in-flight-batching "
                    "throughput.")
    val.add_argument("csv", metavar="PATH.csv", nargs="?",
                     help="measurements (training or inference rows); default: the shipped "
                          "published runs (experiments/validation/: training, then inference)")
    add_format(val)
    val.add_argument("--plot", metavar="FILE", type=output_file,
                     help="write predicted vs measured (PNG/PDF)")
    val.add_argument("--assumptions", action="store_true",
                     help="list the assumptions made for each case (table format)")
    add_progress(val, default=True)
    val.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from codesign.validation.plot import plot_predicted_vs_measured
    from codesign.validation.runner import format_results, run_csv, summarize

    paths = [Path(args.csv)] if args.csv else shipped_validation_files()
    everything = []
    out: dict[str, Any] = {}
    for path in paths:
        results = run_csv(path, progress=args.progress)
        everything += results
        summary = summarize(results)
        if args.format == "json":
            out[path.name] = {"cases": [r.to_dict() for r in results], "summary": summary}
        else:
            if len(paths) > 1:
                print(f"== {path.name}")
            print(format_results(results, summary, assumptions=args.assumptions))
    if args.format == "json":
        print(json.dumps(out[paths[0].name] if len(paths) == 1 else out, indent=2))
    if args.plot:
        plot_predicted_vs_measured(everything, Path(args.plot))
    return 0


def shipped_validation_files() -> list[Path]:
    """The published runs shipped with codesign (``experiments/validation/``)."""
    from codesign.catalogs import catalog_root

    root = catalog_root("experiments") / "validation"
    return [Path(str(root / name)) for name in ("training_cases.csv", "inference_cases.csv")]
