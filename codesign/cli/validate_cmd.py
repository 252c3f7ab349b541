"""``codesign validate``: simulate published measurements and report the error per case."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from codesign.cli.common import add_format, output_file


def register(sub: Any) -> None:
    """Add ``validate`` to the top-level subparsers ``sub``."""
    val = sub.add_parser(
        "validate", help="simulate published measurements and report the error per case",
        description="Read a CSV with the columns of shared/validation/training_cases.csv, "
                    "simulate every row whose configuration is complete enough, and compare "
                    "with what it measured (iteration time, tokens/s, TFLOP/s per GPU or MFU, "
                    "converted with the source's own FLOP formula). A CSV with a serving_mode "
                    "column (shared/validation/inference_cases.csv) holds inference rows: "
                    "static-batch throughput, time to first token, in-flight-batching "
                    "throughput.")
    val.add_argument("csv", metavar="PATH.csv", help="measurements (training or inference rows)")
    add_format(val)
    val.add_argument("--plot", metavar="FILE", type=output_file,
                     help="write predicted vs measured (PNG/PDF)")
    val.add_argument("--assumptions", action="store_true",
                     help="list the assumptions made for each case (table format)")
    val.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from codesign.validation.plot import plot_predicted_vs_measured
    from codesign.validation.runner import format_results, run_csv, summarize

    results = run_csv(Path(args.csv))
    summary = summarize(results)
    if args.format == "json":
        print(json.dumps({"cases": [r.to_dict() for r in results], "summary": summary},
                         indent=2))
    else:
        print(format_results(results, summary, assumptions=args.assumptions))
    if args.plot:
        plot_predicted_vs_measured(results, Path(args.plot))
    return 0
