"""Command-line interface (thin: parse, call the library, print).

Exit codes: 0 success; 2 invalid input or infeasible plan (one-line message, no traceback);
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codesign import __version__
from codesign.cli import experiment_cmd, search_cmd, serve_cmd, trace_cmd
from codesign.cli.common import EXIT_INPUT, add_run_flags, run_from_args
from codesign.errors import CodesignError


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="codesign",
        description="Datacenter co-design simulator for LLM training: how fast does model M "
                    "train on system S with plan P, and why?",
        epilog="Examples:\n  codesign simulate\n  codesign simulate --model gpt3-175b --gpu h100 "
               "--gpus 32768 --tp 8 --pp 8 --vpp 3 --global-batch 4096 --format json\n"
               "  codesign list",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"codesign {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")

    sim = sub.add_parser(
        "simulate", help="simulate one training step and report step time, MFU, memory",
        description="Simulate one training step. With no arguments, runs the built-in default "
                    "(GPT-3 175B, 1,024 H100s, DGX-H100 fat-tree, TP8 PP8 VPP3, SP, GBS 1024). "
                    "Names come from the catalogs (codesign list) or are YAML/JSON file paths "
                    "(a Hugging Face config.json works for --model).")
    add_run_flags(sim)
    sim.add_argument("--format", choices=["table", "json"], default="table")
    sim.add_argument("--trace", metavar="FILE.json",
                     help="also write the step's timeline as a Chrome/Perfetto trace")
    sim.set_defaults(func=cmd_simulate)

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
    val.add_argument("--format", choices=["table", "json"], default="table")
    val.add_argument("--plot", metavar="FILE", help="write predicted vs measured (PNG/PDF)")
    val.add_argument("--assumptions", action="store_true",
                     help="list the assumptions made for each case (table format)")
    val.set_defaults(func=cmd_validate)

    cal = sub.add_parser(
        "calibrate", help="fit each GPU's sustained compute fraction to measured runs",
        description="Fit one sustained_fraction per GPU type (the share of microbenchmark "
                    "GEMM/attention efficiency sustained in end-to-end training) to the rows of "
                    "a measurement CSV, and cross-validate by fitting on half of the sources and "
                    "scoring the other half, both ways. Prints the values to put in the "
                    "hardware catalog; changes no file.")
    cal.add_argument("csv", metavar="PATH.csv")
    cal.add_argument("--jobs", type=int, default=0, help="processes (default: all cores)")
    cal.set_defaults(func=cmd_calibrate)

    ls = sub.add_parser("list", help="list catalog entries (GPUs, topologies, models)")
    ls.add_argument("kind", nargs="?", choices=["gpus", "topologies", "models"],
                    help="one catalog (default: all)")
    ls.set_defaults(func=cmd_list)
    experiment_cmd.register(sub)
    search_cmd.register(sub)
    serve_cmd.register(sub)
    trace_cmd.register(sub)
    return ap


def cmd_simulate(args: argparse.Namespace) -> int:
    from codesign.api import simulate_run
    from codesign.report import format_table

    run = run_from_args(args)
    if args.trace:
        from codesign.trace.perfetto import simulate_with_trace

        report = simulate_with_trace(run, args.trace)
    else:
        report = simulate_run(run)
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=2))
    elif report.feasible:
        print(format_table(report))
    if not report.feasible:
        print(f"codesign: infeasible plan: {report.reason}", file=sys.stderr)
        return EXIT_INPUT
    return 0


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


def cmd_calibrate(args: argparse.Namespace) -> int:
    import os

    from codesign.validation.calibrate import calibrate
    from codesign.validation.runner import summarize
    from codesign.validation.training_cases import iter_cases

    cases = [c for _, c in iter_cases(Path(args.csv)) if not isinstance(c, str)]
    rep = calibrate(cases, jobs=args.jobs or os.cpu_count() or 1)

    def line(results: list[Any]) -> str:
        s = summarize(results)
        if not s["n"]:
            return "no case"
        return (f"n={s['n']} median {s['median_abs_error_pct']:.1f}% mean "
                f"{s['mean_abs_error_pct']:.1f}% p90 {s['p90_abs_error_pct']:.1f}% max "
                f"{s['max_abs_error_pct']:.1f}% ({s['worst_case']})")

    print("sustained_fraction per GPU (hardware/<gpu>.yaml, efficiency.sustained_fraction):")
    for gpu, f in rep.fractions.items():
        print(f"  {gpu:12s} {f:.3f}")
    print(f"in-sample: {line(rep.in_sample)}")
    for train, fitted, held in rep.folds:
        fits = ", ".join(f"{g} {f:.3f}" for g, f in fitted.items())
        print(f"fit on {'; '.join(train)} ({fits})\n  held-out: {line(held)}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from codesign.specs.catalog import catalog_entries

    kinds = {"gpus": "hardware", "topologies": "topologies", "models": "workloads"}
    chosen = [args.kind] if args.kind else list(kinds)
    for title in chosen:
        print(f"{title}:")
        for _, data in catalog_entries(kinds[title]):  # type: ignore[arg-type]
            print(f"  {data.get('name', '?'):22s} {_describe(title, data)}")
    return 0


def _describe(kind: str, d: dict[str, Any]) -> str:
    if kind == "gpus":
        peaks = d.get("peak_tflops", {})
        return (f"bf16 {peaks.get('bf16', '?')} TFLOP/s, {d.get('hbm_capacity_GB')} GB HBM at "
                f"{d.get('hbm_bandwidth_TBps')} TB/s, system {d.get('default_topology')}")
    if kind == "topologies":
        if d.get("kind") == "fullflat":
            return f"FullFlat, {d.get('bandwidth_GBps')} GB/s per GPU"
        up, out = d.get("scale_up", {}), d.get("scale_out", {})
        return (f"two-tier: {up.get('domain_size')}-GPU domain at {up.get('bandwidth_GBps')} "
                f"GB/s, {out.get('nic_bandwidth_Gbps')} Gb/s NIC per GPU")
    moe = d.get("moe")
    kind_s = f"MoE {moe['num_experts']}x top-{moe['top_k']}" if moe else "dense"
    params = d.get("published_params_B")
    size = f"{params:.4g}B params" if isinstance(params, (int, float)) else "? params"
    return f"{size}, {d.get('num_layers')} layers, {kind_s}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except CodesignError as exc:
        print(f"codesign: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("codesign: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

