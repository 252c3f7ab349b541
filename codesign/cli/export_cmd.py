"""``codesign export chakra``: a training step as Chakra execution traces for ASTRA-sim."""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

from codesign.cli.common import (
    add_format,
    add_out,
    add_progress,
    add_run_flags,
    print_notes,
    run_from_args,
)
from codesign.errors import SpecError


def register(sub: Any) -> None:
    """Add ``export`` (with its ``chakra`` format) to the top-level subparsers ``sub``."""
    exp = sub.add_parser(
        "export", help="export a training step as execution traces for other simulators",
        description="Export one training step of a run as execution traces.")
    formats = exp.add_subparsers(dest="export_format", metavar="FORMAT", required=True)
    ch = formats.add_parser(
        "chakra", help="Chakra execution traces for ASTRA-sim, one file per rank",
        description="Write PREFIX.<rank>.et for every rank (Chakra ET: a GlobalMetadata record, "
                    "then the nodes of one training step with codesign's durations), "
                    "PREFIX.groups.json (--comm-group-configuration), and ASTRA-sim's "
                    "network, system and remote-memory files for the run's topology "
                    "(PREFIX.network.yml, PREFIX.system.json, PREFIX.memory.json). Takes the "
                    "run options of 'simulate'. The plan is checked as 'simulate' checks it: an "
                    "out-of-memory plan is refused with simulate's reason unless --force is "
                    "given (then every trace's metadata carries codesign_infeasible). The "
                    "known differences between ASTRA-sim's reading of the files and "
                    "codesign's model are printed after the summary.",
        epilog="Example:\n  codesign export chakra --model gpt3-175b --gpu h100 --gpus 64 "
               "--tp 8 --pp 8 --micro-batch 1 --global-batch 64 --out out/gpt3",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(ch)
    add_out(ch, "PREFIX", "path prefix of the files written (directories are created; "
                          "required)")
    ch.add_argument("--force", action="store_true",
                    help="export a plan that does not fit in HBM (flagged in the metadata)")
    add_inference_flags(ch)
    add_format(ch, "the summary of what was written")
    add_progress(ch, default=True)
    ch.set_defaults(func=cmd_export_chakra)


def add_inference_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of an inference-step export (``--phase`` and what goes with it)."""
    from codesign.specs.inference import InferenceDtype

    g = ap.add_argument_group(
        "inference step (with --phase: one step of one serving-engine replica instead of a "
        "training step; the engine is --model/--gpu/--topology with --tp/--pp/--ep, or "
        "--serving with --engine)")
    g.add_argument("--phase", choices=["prefill", "decode"],
                   help="prefill: --batch prompts of --input-len tokens, nothing cached; "
                        "decode: --batch sequences decoding one token each after "
                        "--context-len cached tokens")
    g.add_argument("--batch", type=int, metavar="B", help="requests in the step (default 1)")
    g.add_argument("--input-len", type=int, metavar="S", help="prompt tokens (prefill)")
    g.add_argument("--context-len", type=int, metavar="L",
                   help="cached tokens per sequence (decode)")
    dtypes = list(typing.get_args(InferenceDtype))
    g.add_argument("--weight-dtype", choices=dtypes, help="weight format (default bf16)")
    g.add_argument("--kv-dtype", choices=dtypes, help="KV-cache format (default bf16)")
    g.add_argument("--max-num-tokens", type=int, metavar="N",
                   help="tokens per step the engine's activation workspace is sized for "
                        "(default 8192, TensorRT-LLM's)")
    g.add_argument("--serving", metavar="SPEC.yaml",
                   help="take the engine from a serving spec (plan, device, topology, "
                        "max_num_tokens); --model picks its model entry")
    g.add_argument("--engine", metavar="NAME",
                   help="engine of --serving (default: its first)")


def cmd_export_chakra(args: argparse.Namespace) -> int:
    from codesign.trace.chakra import export_chakra

    if not args.out:
        raise SpecError("export chakra: --out PREFIX is required (the path prefix of the "
                        "files written)")
    if args.phase is not None:
        return _export_inference(args)
    given = [f for f, v in _inference_values(args).items() if v is not None]
    if given:
        raise SpecError(f"{given[0]}: an inference-step flag; give --phase prefill|decode")
    run = run_from_args(args, choose=True)

    from codesign.runtime import cumulative_progress

    progress = cumulative_progress(run.num_gpus, "exporting", "rank", args.progress)
    result = export_chakra(run, args.out, progress=progress, force=args.force)
    return _report(result, args.format)


def _report(result: Any, fmt: str, step_line: str = "") -> int:
    """Print what an export wrote (``fmt`` json: its ``to_dict``); ``step_line``: a line
    about the exported step after the first."""
    if fmt == "json":
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    nodes = result.nodes_per_stage
    print(f"wrote {result.num_ranks:,} traces {result.files['traces']} "
          f"({result.bytes_written / 1e6:,.1f} MB, {min(nodes):,}-{max(nodes):,} nodes per "
          f"rank) in {result.elapsed_s:.2f} s ({result.ranks_per_s:,.0f} ranks/s)")
    if step_line:
        print(step_line)
    print(f"groups:  {result.files['groups']} ({result.num_groups:,} communicator groups)")
    print(f"network: {result.files['network']}")
    print(f"system:  {result.files['system']}")
    print(f"memory:  {result.files['memory']}")
    print_notes("ASTRA-sim differences:", result.notes)
    return 0


_INFERENCE_FLAGS = ("--batch", "--input-len", "--context-len", "--weight-dtype", "--kv-dtype",
                    "--max-num-tokens", "--serving", "--engine")
#: inference flags --serving takes from the spec instead
_ENGINE_FLAGS = ("--gpu", "--topology", "--tp", "--pp", "--ep", "--weight-dtype",
                 "--kv-dtype", "--max-num-tokens")


def _inference_values(args: argparse.Namespace) -> dict[str, Any]:
    return {f: getattr(args, f[2:].replace("-", "_")) for f in _INFERENCE_FLAGS}


def _export_inference(args: argparse.Namespace) -> int:
    """``export chakra --phase``: one inference step of one engine replica."""
    from codesign.cli.plan_flags import flag_of, plan_from_args
    from codesign.runtime import cumulative_progress
    from codesign.trace.chakra_inference import InferenceStep, export_inference_chakra

    plan = plan_from_args(args)
    training = [flag_of(k).flag for k in plan if k not in ("tp", "pp", "ep")]
    training += ["--run"] * bool(args.run) + ["--force"] * args.force
    if training:
        raise SpecError(f"{training[0]}: a training flag; an inference export (--phase) "
                        "takes --model, --gpu, --topology, --tp, --pp, --ep and the "
                        "inference-step flags")
    length = args.input_len if args.phase == "prefill" else args.context_len
    other = "--context-len" if args.phase == "prefill" else "--input-len"
    if getattr(args, other[2:].replace("-", "_")) is not None:
        raise SpecError(f"{other}: not a {args.phase} setting (prefill takes --input-len, "
                        "decode --context-len)")
    if length is None:
        raise SpecError(f"{'--input-len' if args.phase == 'prefill' else '--context-len'}: "
                        f"required for a {args.phase} step")
    step = InferenceStep(args.phase, 1 if args.batch is None else args.batch, length)
    step.check()
    cost, spec = _engine_of(args, plan)
    progress = cumulative_progress(cost.plan.num_gpus, "exporting", "rank", args.progress)
    result = export_inference_chakra(cost, step, args.out, progress, spec=spec)
    lengths = ", ".join(f"{k} {v}" for k, v in step.to_dict().items() if k != "phase")
    comp = " + ".join(f"{t * 1e3:.4f}" for t in result.stage_compute_s)
    return _report(result, args.format,
                   f"step:    {step.phase}, {lengths}: {sum(result.stage_time_s) * 1e3:.4f} ms "
                   f"(compute {comp} ms per stage)")


def _engine_of(args: argparse.Namespace, plan: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(the engine's step cost, what to record of it) from --serving or the flags."""
    from codesign.cli.plan_flags import flag_of
    from codesign.specs.inference import InferencePlan
    from codesign.trace.chakra_inference import engine_cost, serving_engine_cost

    values = {**_inference_values(args), "--gpu": args.gpu, "--topology": args.topology,
              **{flag_of(k).flag: v for k, v in plan.items()}}
    if args.serving:
        clash = [f for f in _ENGINE_FLAGS if values.get(f) is not None]
        if clash:
            raise SpecError(f"{clash[0]}: the engine comes from --serving {args.serving}")
        cost, spec = serving_engine_cost(args.serving, args.engine, args.model)
    else:
        if args.engine is not None:
            raise SpecError("--engine: names an engine of --serving SPEC.yaml; give --serving")
        if args.model is None:
            raise SpecError("--model: required for an inference export (or give --serving)")
        inf = InferencePlan.parse({**plan, "weight_dtype": args.weight_dtype or "bf16",
                                   "kv_dtype": args.kv_dtype or "bf16"}, "export chakra")
        if args.max_num_tokens is not None and args.max_num_tokens < 1:
            raise SpecError(f"--max-num-tokens must be >= 1, got {args.max_num_tokens}")
        extra = {} if args.max_num_tokens is None else {"max_num_tokens": args.max_num_tokens}
        cost, spec = engine_cost(args.model, args.gpu or "h100", args.topology, inf,
                                 **extra), {}
    if args.num_gpus is not None and args.num_gpus != cost.plan.num_gpus:
        raise SpecError(f"--gpus: an inference export writes one engine replica of "
                        f"tp × pp × ep = {cost.plan.num_gpus} GPUs, got {args.num_gpus}")
    return cost, spec
