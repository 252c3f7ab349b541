"""``codesign astra``: export a training step, run it through ASTRA-sim, compare step times."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from codesign.cli.common import (
    add_format,
    add_out,
    add_progress,
    add_run_flags,
    print_notes,
    run_from_args,
)


def register(sub: Any) -> None:
    """Add ``astra`` to the top-level subparsers ``sub``."""
    ap = sub.add_parser(
        "astra", help="run a training step through an ASTRA-sim binary and compare",
        description="Simulate a run with codesign, export it as Chakra traces (as 'export "
                    "chakra' does), run the traces through an ASTRA-sim analytical binary "
                    "you built (--bin or $ASTRA_SIM_BIN; codesign builds nothing, see "
                    "docs/astra-sim.md), and print each pipeline stage's finish time from "
                    "both, with the known semantic differences between the two. ASTRA-sim "
                    "reports cycles per rank; one cycle is one nanosecond.",
        epilog="Example:\n  ASTRA_SIM_BIN=/opt/astra-sim/bin/AstraSim_Analytical_Congestion_"
               "Unaware \\\n  codesign astra --model llama3-8b --gpu h100 --gpus 16 --tp 8 "
               "--pp 2 --global-batch 16",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(ap)
    ap.add_argument("--bin", metavar="PATH",
                    help="the ASTRA-sim analytical binary (default: $ASTRA_SIM_BIN)")
    add_out(ap, "PREFIX", "keep the exported files and ASTRA-sim's logs at this path prefix "
                          "(default: a temporary directory, removed afterwards)")
    ap.add_argument("--timeout-s", type=float, default=3600.0, metavar="S",
                    help="stop ASTRA-sim after S seconds (default 3600)")
    ap.add_argument("--force", action="store_true",
                    help="export a plan that does not fit in HBM (flagged in the metadata)")
    ap.add_argument("--match-network", action="store_true",
                    help="simulate and export with the network ASTRA-sim can express: ideal "
                         "links (no message-size efficiency), no in-network reduction, ring "
                         "collectives, and no reduction memory time in ASTRA-sim's system "
                         "file; what remains is the two simulators' semantics")
    add_format(ap, "the comparison")
    add_progress(ap, default=True)
    ap.set_defaults(func=cmd_astra)


def cmd_astra(args: argparse.Namespace) -> int:
    from codesign.trace.astra_run import find_binary

    binary = find_binary(args.bin)  # before any work: a missing binary is a one-line error
    run = run_from_args(args, choose=True)
    if args.match_network:
        from codesign.trace.astra_config import astra_matched

        run = astra_matched(run)
    if args.out:
        return _run(args, run, binary, Path(args.out))
    with tempfile.TemporaryDirectory(prefix="codesign-astra-") as tmp:
        return _run(args, run, binary, Path(tmp) / "step")


def _run(args: argparse.Namespace, run: Any, binary: Path, prefix: Path) -> int:
    from codesign.api import simulate_detailed
    from codesign.errors import InfeasiblePlan
    from codesign.runtime import cumulative_progress
    from codesign.trace.astra_run import compare, run_astra
    from codesign.trace.chakra import export_chakra

    sim = simulate_detailed(run, exact=True)
    if not sim.report.feasible and not args.force:
        raise InfeasiblePlan(sim.report.reason or "infeasible plan")
    progress = cumulative_progress(run.num_gpus, "exporting", "rank", args.progress)
    exported = export_chakra(run, prefix, progress=progress, force=args.force,
                             matched=args.match_network)
    astra = run_astra(binary, prefix, exported.num_ranks, args.timeout_s)
    stage_end = _stage_ends(sim, run.parallel.pp)
    layout = sim.network.layout if sim.network is not None else None
    stride, pp = (layout.stride("pp"), layout.size("pp")) if layout else (1, 1)
    stage_of = [(r // stride) % pp for r in range(exported.num_ranks)]
    rows = compare(stage_end, stage_of, astra)
    step_cs = sim.report.step_time_s or max(stage_end)
    out = {
        "binary": str(binary), "ranks": exported.num_ranks, "astra_wall_s": astra.wall_s,
        "codesign_step_s": step_cs, "astra_step_s": astra.step_time_s,
        "diff_pct": 100.0 * (astra.step_time_s - step_cs) / step_cs if step_cs else 0.0,
        "stages": [{"stage": r.stage, "codesign_s": r.codesign_s, "astra_s": r.astra_s,
                    "diff_pct": r.diff_pct} for r in rows],
        "differences": list(exported.notes),
        "files": exported.files if args.out else {},
    }
    if args.format == "json":
        print(json.dumps(out, indent=2))
        return 0
    print(f"ASTRA-sim: {binary.name}, {exported.num_ranks:,} ranks in {astra.wall_s:.1f} s")
    print(f"{'stage':>6} {'codesign s':>12} {'ASTRA-sim s':>12} {'diff':>8}")
    for r in rows:
        print(f"{r.stage:>6} {r.codesign_s:>12.4f} {r.astra_s:>12.4f} {r.diff_pct:>+7.1f}%")
    print(f"{'step':>6} {step_cs:>12.4f} {astra.step_time_s:>12.4f} {out['diff_pct']:>+7.1f}%")
    print_notes("known differences (ASTRA-sim vs codesign):", exported.notes)
    return 0


def _stage_ends(sim: Any, pp: int) -> list[float]:
    """The last finish time of each pipeline stage's tasks in codesign's step (seconds)."""
    tl = sim.step.timeline
    ends = [0.0] * pp
    for task, end in zip(tl.tasks, tl.end, strict=True):
        s = int(task.stream[1:].split("/", 1)[0])
        if end > ends[s]:
            ends[s] = end
    return ends
