"""Pieces the CLI commands share: run flags, building a run from them, exit codes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from codesign.errors import SpecError
from codesign.specs.run import TrainingRun

EXIT_INPUT = 2

PLAN_FLAGS: list[tuple[str, str, dict[str, Any]]] = [
    ("--tp", "tp", {"type": int, "help": "tensor-parallel size"}),
    ("--pp", "pp", {"type": int, "help": "pipeline-parallel size"}),
    ("--dp", "dp", {"type": int, "help": "data-parallel size (default: GPUs / (tp·pp·cp))"}),
    ("--cp", "cp", {"type": int, "help": "context-parallel size"}),
    ("--ep", "ep", {"type": int, "help": "expert-parallel size (MoE; divides dp)"}),
    ("--etp", "etp", {"type": int, "help": "expert tensor-parallel size (1 or tp)"}),
    ("--vpp", "vpp", {"type": int, "help": "virtual pipeline chunks per rank (interleaving)"}),
    ("--schedule", "schedule", {"choices": ["gpipe", "1f1b", "interleaved"],
                                "help": "pipeline schedule (default: interleaved if vpp>1)"}),
    ("--micro-batch", "micro_batch_size", {"type": int, "help": "sequences per micro-batch"}),
    ("--global-batch", "global_batch_size", {"type": int, "help": "sequences per step"}),
    ("--seq-len", "seq_len", {"type": int, "help": "sequence length (default: model's)"}),
    ("--recompute", "recompute", {"choices": ["none", "selective", "full"],
                                  "help": "activation recompute"}),
    ("--zero", "zero_stage", {"type": int, "choices": [0, 1, 2, 3],
                              "help": "ZeRO stage (1 = distributed optimizer, 3 = FSDP)"}),
    ("--dtype", "dtype", {"choices": ["bf16", "fp16", "fp8"], "help": "GEMM precision"}),
    ("--placement", "placement_order", {
        "help": "rank placement, innermost first, comma-separated (default tp,cp,ep,dp,pp)"}),
    ("--collective-algorithm", "collective_algorithm", {
        "choices": ["auto", "ring", "tree", "hierarchical", "in_network"],
        "help": "collective algorithm (default auto: fastest available)"}),
]
BOOL_FLAGS = [
    ("sp", "sequence_parallel", "sequence parallelism (with tp)"),
    ("fsdp", "fsdp", "FSDP full sharding (= ZeRO-3)"),
    ("flash-attention", "flash_attention", "fused (flash) attention"),
    ("overlap-grad-reduce", "overlap_grad_reduce", "overlap DP gradient reduction with backward"),
    ("overlap-param-gather", "overlap_param_gather", "overlap parameter all-gathers with compute"),
    ("tp-comm-overlap", "tp_comm_overlap", "overlap TP communication with GEMMs"),
    ("pipeline-scatter-gather", "pipeline_scatter_gather",
     "without SP: split pipeline sends over the TP ranks' links, all-gather at the receiver"),
    ("overlap-p2p", "overlap_p2p",
     "pipeline sends run beside compute (--no-overlap-p2p: the sender waits, as in "
     "Megatron-LM 2021-22)"),
]


def run_from_args(args: argparse.Namespace) -> TrainingRun:
    from codesign.api import DEFAULT_RUN, build_run

    plan: dict[str, Any] = {}
    base: dict[str, Any] = {}
    if getattr(args, "run", None):
        base, plan = _read_run_file(Path(args.run))
    for _, dest, _kw in PLAN_FLAGS:
        v = getattr(args, dest)
        if v is not None:
            plan[dest] = tuple(x.strip() for x in v.split(",")) if dest == "placement_order" \
                else v
    for _, dest, _t in BOOL_FLAGS:
        v = getattr(args, dest)
        if v is not None:
            plan[dest] = v
    for key in ("model", "gpu", "topology", "num_gpus"):
        v = getattr(args, key)
        if v is not None:
            base[key] = v
    if not getattr(args, "run", None) and not plan and not base:
        return build_run(**DEFAULT_RUN)
    if "num_gpus" not in base and not getattr(args, "run", None) and plan.get("dp") is None:
        base["num_gpus"] = DEFAULT_RUN["num_gpus"]  # the default cluster size
    return build_run(**base, **plan)


def _read_run_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from codesign.specs.catalog import read_data_file

    data = read_data_file(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a run file is a mapping with model, gpu, topology, "
                        "num_gpus, parallel")
    allowed = {"model", "gpu", "topology", "num_gpus", "parallel"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        names = ", ".join(sorted(allowed))
        raise SpecError(f"{path}: unknown field '{unknown[0]}'; allowed: {names}")
    base = {k: data[k] for k in ("model", "gpu", "topology", "num_gpus") if k in data}
    for key, parse in (("model", "ModelSpec"), ("gpu", "GpuSpec"), ("topology", "Topology")):
        value = base.get(key)
        if isinstance(value, dict):
            base[key] = _inline_spec(parse, value, f"{path}: {key}")
        elif key in base and not isinstance(value, str):
            raise SpecError(f"{path}: {key}: must be a catalog name, a file path or an inline "
                            f"mapping, got {type(value).__name__}")
    if "num_gpus" in base and (isinstance(base["num_gpus"], bool)
                               or not isinstance(base["num_gpus"], int)):
        raise SpecError(f"{path}: num_gpus: must be a whole number >= 1, "
                        f"got {base['num_gpus']!r}")
    plan = data.get("parallel") or {}
    if not isinstance(plan, dict):
        raise SpecError(f"{path}: parallel must be a mapping of plan settings")
    return base, dict(plan)


def _inline_spec(kind: str, data: dict[str, Any], origin: str) -> Any:
    from codesign.specs.catalog import parse_topology
    from codesign.specs.gpu import GpuSpec
    from codesign.specs.model import ModelSpec

    if kind == "ModelSpec":
        return ModelSpec.parse(data, origin)
    if kind == "GpuSpec":
        return GpuSpec.parse(data, origin)
    return parse_topology(data, origin)




def add_run_flags(ap: argparse.ArgumentParser, with_run_file: bool = True) -> None:
    """Add --run, --model, --gpu, --topology, --gpus and every plan flag to ``ap``."""
    if with_run_file:
        ap.add_argument("--run", metavar="FILE", help="YAML run file: model, gpu, topology, "
                        "num_gpus, parallel (flags below override it)")
    ap.add_argument("--model", help="model name or file (default gpt3-175b)")
    ap.add_argument("--gpu", help="GPU name or file (default h100)")
    ap.add_argument("--topology", help="topology name or file (default: the GPU's system)")
    ap.add_argument("--gpus", type=int, dest="num_gpus", help="number of GPUs")
    for flag, dest, kw in PLAN_FLAGS:
        ap.add_argument(flag, dest=dest, **kw)
    for flag, dest, text in BOOL_FLAGS:
        ap.add_argument(f"--{flag}", dest=dest, action=argparse.BooleanOptionalAction,
                        default=None, help=text)
