"""CLI command ``codesign search``: the best parallelism plans for a model on a system."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from codesign.cli.common import (
    EXIT_INPUT,
    add_format,
    add_jobs,
    add_progress,
    add_run_flags,
    jobs_of,
    output_file,
    run_file_of,
    run_from_args,
)
from codesign.cli.plan_flags import flag_of, plan_from_args
from codesign.errors import SpecError
from codesign.specs.parallel import ParallelismSpec


def value_flags(spec: type[ParallelismSpec] = ParallelismSpec) -> list[tuple[str, str, str]]:
    """``--<flag>-values`` of every searched plan field of ``spec``: (flag stem, SearchSpace
    field, value kind), derived from the field's plan flag (``--micro-batch`` ->
    ``--micro-batch-values``); the searched fields are declared on the spec
    (:mod:`codesign.search.fields`)."""
    from codesign.search.fields import searched_fields

    out = []
    for field in searched_fields(spec):
        f = flag_of(field, spec)
        out.append((f.flag.removeprefix("--"), field, "str" if f.kind == "list" else f.kind))
    return out


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def register(sub: Any, spec: type[ParallelismSpec] = ParallelismSpec) -> None:
    """Add ``search`` to the top-level subparsers ``sub`` (plan fields of ``spec``)."""
    ap = sub.add_parser(
        "search", help="search parallelism plans (TP, PP, CP, EP, VPP, micro-batch, recompute, "
                       "ZeRO, overlap) and confirm the best with the engine",
        description="Enumerate every valid plan of a space, drop those that do not fit in "
                    "memory, rank the rest by an analytical estimate built from the engine's "
                    "cost models, and simulate the best with the engine. Plan flags (--tp, "
                    "--recompute, --sp ...) pin a field; --<field>-values lists the values to "
                    "search; other fields take automatic values from the model and system. "
                    "--schedule-values searches the pipeline schedule (only when given). "
                    "Settings that are never searched (--global-batch, --seq-len, --dtype, "
                    "--etp, --placement ...) apply to every plan.",
        epilog="Example:\n  codesign search --model gpt3-175b --gpu h100 --gpus 1024 "
               "--global-batch 1024 --tp-values 4,8 --top 5",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(ap)
    ap.add_argument("--objective", choices=["mfu", "tokens_per_s"], default="mfu",
                    help="what to maximize (default mfu)")
    ap.add_argument("--top", type=int, default=10, metavar="N",
                    help="plans to list (default 10)")
    ap.add_argument("--confirm", type=int, default=3, metavar="K",
                    help="best plans to simulate with the engine (default 3)")
    add_jobs(ap, "for the estimates (small spaces run in this process)")
    for stem, field, kind in value_flags(spec):
        example = {"int": "1,2,4,8", "str": "none,selective,full", "bool": "true,false",
                   "float": "0.5,1"}.get(kind, "a,b")
        ap.add_argument(f"--{stem}-values", dest=f"values_{field}", metavar="LIST",
                        help=f"{field} values to search, comma-separated (e.g. {example})")
    add_format(ap)
    ap.add_argument("--csv", metavar="FILE", type=output_file,
                    help="also write every evaluated plan with its estimate or reason as CSV")
    add_progress(ap, default=False)
    ap.set_defaults(func=cmd_search)


def _parse_list(flag: str, text: str, kind: str) -> list[Any]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise SpecError(f"{flag}: empty list")
    out: list[Any] = []
    for t in items:
        if kind == "int":
            if not t.lstrip("-").isdigit():
                raise SpecError(f"{flag}: '{t}' is not a whole number (give e.g. 1,2,4,8)")
            out.append(int(t))
        elif kind == "float":
            try:
                out.append(float(t))
            except ValueError:
                raise SpecError(f"{flag}: '{t}' is not a number") from None
        elif kind == "bool":
            if t.lower() not in _TRUE | _FALSE:
                raise SpecError(f"{flag}: '{t}' is not true or false")
            out.append(t.lower() in _TRUE)
        else:
            out.append(t)
    return out


def space_and_fixed(args: argparse.Namespace, spec: type[ParallelismSpec] = ParallelismSpec
                    ) -> tuple[Any, dict[str, Any]]:
    """The SearchSpace from the ``--*-values`` flags and the fields pinned by plan flags
    (or by the plan of a ``--run`` file)."""
    from codesign.search.fields import searched_fields, space_model

    flags = value_flags(spec)
    values: dict[str, Any] = {}
    for stem, field, kind in flags:
        text = getattr(args, f"values_{field}")
        if text is not None:
            values[field] = _parse_list(f"--{stem}-values", text, kind)
    pinned: dict[str, Any] = {}
    _, plan = run_file_of(args)
    plan.update(plan_from_args(args, spec))
    searched = searched_fields(spec)
    pinned.update({k: v for k, v in plan.items() if k in searched and v is not None})
    stem_of = {field: stem for stem, field, _ in flags}
    for field in values:
        if field in pinned:
            raise SpecError(f"--{stem_of[field]}-values searches {field}, which a plan flag "
                            f"(or the run file) pins to {pinned[field]!r}: give one of them")
    space = space_model(spec).parse(values, "search space")
    return space, pinned


def cmd_search(args: argparse.Namespace) -> int:
    from codesign.search.search import search

    for name in ("top", "confirm"):
        low = 0 if name == "confirm" else 1
        if getattr(args, name) < low:
            raise SpecError(f"--{name} must be >= {low}, got {getattr(args, name)}")
    jobs = jobs_of(args)
    space, fixed = space_and_fixed(args)
    run = run_from_args(args)
    result = search(run, space, fixed=fixed, objective=args.objective, top_n=args.top,
                    confirm=args.confirm, jobs=jobs, progress=args.progress)
    if args.csv:
        write_csv(result.rows(), Path(args.csv))
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(format_result(run, result))
    if result.best is None:
        reasons = ", ".join(f"{k} ({v})" for k, v in list(result.infeasible.items())[:3])
        print(f"codesign: no feasible plan among {result.evaluated + result.rejected}: "
              f"{reasons or 'empty space'}", file=sys.stderr)
        return EXIT_INPUT
    return 0


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Write ``rows`` (same keys) to ``path``; empty values for None."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        if not rows:
            fh.write("")
            return
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})


#: short column labels of the step breakdown keys (a key without one prints as itself)
_SHORT = {"forward": "fwd", "backward": "bwd", "recompute": "rc", "optimizer": "opt",
          "pipeline_bubble": "bubble", "host_issue": "host", "tp_comm": "tp", "cp_comm": "cp",
          "ep_comm": "ep", "dp_comm": "dp", "pp_comm": "pp"}


def format_result(run: Any, result: Any) -> str:
    """Human-readable search summary: counts, the top plans, the confirmed winner."""
    from codesign.report import format_table
    from codesign.report.training import BREAKDOWN_KEYS

    lines = [f"{run.model.name} on {run.num_gpus} × {run.gpu.name} ({run.topology.name}), "
             f"global batch {run.parallel.global_batch_size}, seq {run.seq_len}, "
             f"{run.parallel.dtype}; objective {result.objective}",
             f"plans: {result.evaluated} evaluated ({result.feasible} fit in memory), "
             f"{result.rejected} rejected by plan rules; {result.elapsed_s:.2f} s, "
             f"{result.plans_per_s:.0f} plans/s"]
    if result.infeasible:
        lines.append("infeasible: " + "; ".join(f"{v} × {k}"
                                                for k, v in result.infeasible.items()))
    if not result.candidates:
        return "\n".join(lines)
    head = (f"{'#':>3} {'tp':>3} {'pp':>3} {'dp':>5} {'cp':>3} {'ep':>3} {'vpp':>3} {'mbs':>3} "
            f"{'recompute':>9} {'zero':>4} {'sp':>3} {'tpo':>3}  {'est step s':>10} "
            f"{'est MFU%':>8} {'eng step s':>10} {'eng MFU%':>8} {'mem GiB':>7}  "
            "breakdown (estimate, % of step)")
    lines += ["", head]
    for i, c in enumerate(result.candidates, 1):
        p = c.plan
        eng_t = f"{c.report.step_time_s:10.4f}" if c.report and c.report.feasible else \
            f"{'-':>10}"
        eng_m = f"{c.report.mfu * 100:8.2f}" if c.report and c.report.feasible else f"{'-':>8}"
        parts = sorted(((c.breakdown_s.get(k, 0.0), k) for k in BREAKDOWN_KEYS), reverse=True)
        shares = " ".join(f"{_SHORT.get(k, k)} {v / c.estimate_step_time_s * 100:.0f}"
                          for v, k in parts if v / c.estimate_step_time_s >= 0.005)
        lines.append(
            f"{i:>3} {p['tp']:>3} {p['pp']:>3} {p['dp']:>5} {p['cp']:>3} {p['ep']:>3} "
            f"{p['vpp']:>3} {p['micro_batch_size']:>3} {p['recompute']:>9} "
            f"{p['zero_stage']:>4} {_yn(p['sequence_parallel']):>3} "
            f"{_yn(p['tp_comm_overlap']):>3}  {c.estimate_step_time_s:10.4f} "
            f"{c.estimate_mfu * 100:8.2f} {eng_t} {eng_m} {c.memory_GiB['total']:7.1f}  "
            f"{shares}")
    if result.best is not None:
        lines += ["", "best plan, confirmed by the engine:", format_table(result.best)]
    return "\n".join(lines)


def _yn(flag: bool) -> str:
    return "on" if flag else "off"
