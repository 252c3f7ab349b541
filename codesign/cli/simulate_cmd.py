"""``codesign simulate``: one training step, symmetric or per rank (expanded)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from codesign.cli.common import (
    EXIT_INPUT,
    add_format,
    add_progress,
    add_run_flags,
    output_file,
    run_from_args,
)


def register(sub: Any) -> None:
    """Add ``simulate`` to the top-level subparsers ``sub``."""
    sim = sub.add_parser(
        "simulate", help="simulate one training step and report step time, MFU, memory",
        description="Simulate one training step. With no arguments, runs the built-in default "
                    "(GPT-3 175B, 1,024 H100s, DGX-H100 fat-tree, TP8 PP8 VPP3, SP, GBS 1024; "
                    "the same as --run examples/run-gpt3-175b.yaml). "
                    "Names come from the catalogs (codesign list) or are YAML/JSON file paths "
                    "(a Hugging Face config.json works for --model).")
    add_run_flags(sim)
    add_format(sim)
    sim.add_argument("--trace", metavar="FILE.json", type=output_file,
                     help="also write the step's timeline as a Chrome/Perfetto trace")
    _add_expand_flags(sim)
    add_progress(sim, default=True)
    sim.set_defaults(func=cmd_simulate)


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

    run = run_from_args(args, choose=True)
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
        from codesign.runtime import progress_bar
        from codesign.trace.perfetto import simulate_with_trace

        report = simulate_with_trace(
            run, args.trace, lambda total, what: progress_bar(
                total, f"trace: {what}", "k tasks" if what == "tracing" else "chunk",
                args.progress))
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
