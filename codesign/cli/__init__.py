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
        description="Datacenter co-design simulator for LLMs: how fast does model M train "
                    "(or serve) on system S with plan P, and why? Which plan, which system?",
        epilog="Examples:\n  codesign simulate\n  codesign simulate --model gpt3-175b --gpu h100 "
               "--gpus 32768 --tp 8 --pp 8 --vpp 3 --global-batch 4096 --format json\n"
               "  codesign search --model gpt3-175b --gpu h100 --gpus 1024 --global-batch 1024\n"
               "  codesign experiment run fullflat-vs-twotier\n"
               "  codesign serve examples/serving/rag-reasoning.yaml\n"
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
    _add_expand_flags(sim)
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


def _add_expand_flags(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group(
        "per-rank (expanded) simulation",
        "Simulate every rank individually instead of one representative per pipeline stage. "
        "The fault flags imply --expand. Reports add the symmetric step time, the slowest "
        "rank and what stragglers, link faults and contention cost. Link KIND:INDEX: "
        "nic:RANK, scaleup:RANK (alias nvlink), leaf:DOMAIN (the leaf switch of a scale-up "
        "domain), pod:POD (oversubscribed fabrics), port:RANK (FullFlat).")
    g.add_argument("--expand", action="store_true",
                   help="per-rank simulation (a healthy homogeneous cluster gives the "
                        "symmetric step time)")
    g.add_argument("--straggler", action="append", default=[], metavar="RANK:FRACTION",
                   help="RANK runs its kernels at FRACTION (0 < F <= 1) of its speed; "
                        "repeatable")
    g.add_argument("--degraded-link", action="append", default=[],
                   metavar="KIND:INDEX:FACTOR",
                   help="the link keeps FACTOR (0 < F <= 1) of its bandwidth, e.g. nic:12:0.5; "
                        "repeatable")
    g.add_argument("--failed-link", action="append", default=[], metavar="KIND:INDEX",
                   help="the link is down and its traffic is rerouted (nic: through the next "
                        "GPU's NIC in its domain; scaleup: through its NIC; leaf: over the "
                        "leaf's other uplinks); repeatable")
    g.add_argument("--mix", metavar="GPU:FRACTION|GPU:START-END",
                   help="heterogeneous cluster: the last FRACTION of the ranks (whole scale-up "
                        "domains), or ranks START..END-1, are GPUs of type GPU, e.g. a100:0.25")
    g.add_argument("--contention", action="store_true",
                   help="overlapping collectives share links max-min fairly (flow level)")


def _parse_expand(args: argparse.Namespace) -> dict[str, Any] | None:
    """Keyword arguments of :func:`codesign.api.simulate_expanded`, or ``None`` when no
    expanded simulation was asked for."""
    from codesign.errors import SpecError

    wanted = (args.expand or args.straggler or args.degraded_link or args.failed_link
              or args.mix or args.contention)
    if not wanted:
        return None
    stragglers = []
    for text in args.straggler:
        rank, sep, frac = text.partition(":")
        try:
            stragglers.append((int(rank), float(frac)))
        except ValueError:
            raise SpecError(f"--straggler '{text}': expected RANK:FRACTION, e.g. 17:0.5") \
                from None
        if not sep:
            raise SpecError(f"--straggler '{text}': expected RANK:FRACTION, e.g. 17:0.5")
    mix: tuple[str, float | tuple[int, int]] | None = None
    if args.mix:
        gpu, sep, spec = args.mix.rpartition(":")
        try:
            if not sep or not gpu:
                raise ValueError
            if "-" in spec:
                a, b = spec.split("-", 1)
                mix = (gpu, (int(a), int(b)))
            else:
                mix = (gpu, float(spec))
        except ValueError:
            raise SpecError(f"--mix '{args.mix}': expected GPU:FRACTION or GPU:START-END, e.g. "
                            "a100:0.25 or a100:0-511") from None
    if args.trace:
        raise SpecError("--trace writes the symmetric timeline; it cannot be combined with "
                        "--expand or the fault flags")
    return {"stragglers": stragglers, "degraded_links": args.degraded_link,
            "failed_links": args.failed_link, "mix": mix, "contention": args.contention}


def format_expanded(e: dict[str, Any]) -> str:
    """The expanded section of a table report."""
    if not e:
        return ""
    sym = e["symmetric_step_time_s"]

    def rel(dt: float) -> str:
        return f"{dt:+12.4f} s  ({dt / sym * 100:+.1f} %)" if sym else f"{dt:+12.4f} s"

    lines = ["", f"  per-rank simulation: {e['ranks']:,} ranks, {e['clusters']:,} clusters, "
                 f"{e['replica_classes']:,} replica classes simulated, "
                 f"{e['perturbed_clusters']:,} perturbed clusters",
             f"    symmetric step time    {sym:12.4f} s",
             f"    expanded step time     {e['step_time_s']:12.4f} s",
             f"    stragglers / mix cost  {rel(e['straggler_cost_s'])}",
             f"    link fault cost        {rel(e['link_fault_cost_s'])}"]
    if e["contention"]:
        lines.append(f"    contention cost        {rel(e['contention_cost_s'])}")
    lines.append(f"    slowest rank           {e['slowest_rank']:12d}    (stage "
                 f"{e['slowest_rank_stage']}, kernels {e['slowest_rank_busy_s']:.4f} s vs "
                 f"median {e['median_rank_busy_s']:.4f} s, done at "
                 f"{e['slowest_rank_finish_s']:.4f} s)")
    for c in e["slowed_collectives"]:
        what = (f"pp sends between stages {c['stage']} and {c['stage'] + 1}"
                if c["group"] == "pp" else f"{c['group']} collectives of stage {c['stage']}")
        lines.append(f"    slowed: {what} keep {c['bandwidth_factor'] * 100:.1f} % of their "
                     f"{c['tier']} bandwidth")
    return "\n" + "\n".join(lines)


def cmd_simulate(args: argparse.Namespace) -> int:
    from codesign.api import simulate_run
    from codesign.report import format_table

    run = run_from_args(args)
    expand = _parse_expand(args)
    if expand is not None:
        from codesign.api import simulate_expanded

        sim = simulate_expanded(run, **expand)
        report = sim.report
        if args.format == "json":
            print(json.dumps({**report.to_dict(), "expanded": sim.expanded}, indent=2))
        elif report.feasible:
            print(format_table(report) + format_expanded(sim.expanded))
        if not report.feasible:
            print(f"codesign: infeasible plan: {report.reason}", file=sys.stderr)
            return EXIT_INPUT
        return 0
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
        mem = "DDR" if d.get("kind") == "cpu" else "HBM"
        return (f"{d.get('kind', 'gpu')}: bf16 {peaks.get('bf16', '?')} TFLOP/s, "
                f"{d.get('hbm_capacity_GB')} GB {mem} at "
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

