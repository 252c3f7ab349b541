"""``codesign list``: the catalog entries (GPUs, topologies, models)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add ``list`` to the top-level subparsers ``sub``."""
    ls = sub.add_parser("list", help="list catalog entries (GPUs, topologies, models)")
    ls.add_argument("kind", nargs="?", choices=["gpus", "topologies", "models"],
                    help="one catalog (default: all)")
    ls.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from codesign.specs.catalog import catalog_entries

    kinds = {"gpus": "hardware", "topologies": "topologies", "models": "workloads"}
    chosen = [args.kind] if args.kind else list(kinds)
    for title in chosen:
        print(f"{title}:")
        for _, data in catalog_entries(kinds[title]):  # type: ignore[arg-type]
            print(f"  {data.get('name', '?'):22s} {_describe(title, data)}")
    return 0


def _own_fractions(d: dict[str, Any]) -> str:
    """How many efficiency fractions a part with an ``efficiency_from`` sibling states itself
    (GB200 measures its own and takes B200's sustained fraction), as a suffix."""
    own = d.get("efficiency") or {}
    n = len(own) if isinstance(own, dict) else 0
    return f" ({n} fraction{'s' if n != 1 else ''} its own)" if n else ""


def _describe(kind: str, d: dict[str, Any]) -> str:
    if kind == "gpus":
        peaks = d.get("peak_tflops", {})
        mem = "DDR" if d.get("kind") == "cpu" else "HBM"
        half = "fp16" if "bf16" not in peaks and "fp16" in peaks else "bf16"  # V100: no BF16
        return (f"{d.get('kind', 'gpu')}: {half} {peaks.get(half, '?')} TFLOP/s, "
                f"{d.get('hbm_capacity_GB')} GB {mem} at "
                f"{d.get('hbm_bandwidth_TBps')} TB/s, system {d.get('default_topology')}"
                + (f"; efficiency assumed from {d['efficiency_from']}{_own_fractions(d)}"
                   if d.get("efficiency_from") else ""))
    if kind == "topologies":
        if d.get("kind") == "fullflat":
            return f"FullFlat, {d.get('bandwidth_GBps')} GB/s per GPU"
        up, out = d.get("scale_up", {}), d.get("scale_out", {})
        torus = up.get("torus") or {}
        domain = (f"{'x'.join(str(n) for n in torus['dims'])} torus domain"
                  if torus.get("dims") else f"{up.get('domain_size')}-GPU domain")
        rails = ", rail-optimized" if out.get("rail_optimized") else ""
        return (f"two-tier: {domain} at {up.get('bandwidth_GBps')} GB/s, "
                f"{out.get('nic_bandwidth_Gbps')} Gb/s NIC per GPU{rails}")
    moe = d.get("moe")
    kind_s = f"MoE {moe['num_experts']}x top-{moe['top_k']}" if moe else "dense"
    pattern = d.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        blocks = ", ".join(f"{pattern.count(c)} {n}" for c, n in (
            ("M", "Mamba-2"), ("*", "attention"), ("-", "MLP"), ("E", "MoE")) if c in pattern)
        kind_s = f"hybrid: {blocks}"
    params = d.get("published_params_B")
    size = f"{params:.4g}B params" if isinstance(params, (int, float)) else "? params"
    return f"{size}, {d.get('num_layers')} layers, {kind_s}"
