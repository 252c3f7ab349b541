"""Training report: step time and its breakdown, MFU, HFU, throughput, memory per GPU.

FLOP conventions (documented in the README):

* **Model FLOPs** per step = 3 × forward FLOPs of every sequence, where forward FLOPs are the
  GEMM FLOPs (2·m·n·k, including the LM head; embedding lookups count 0) plus attention
  score and value products counted as the full s×s matrix (4·s²·h per layer for MHA),
  i.e. 6·N + 12·l·s·h per token for a dense GPT (Narayanan et al. 2021; PaLM, Chowdhery et al.
  2022, App. B). Recompute is not counted. MFU = model FLOPs / (step time × peak × GPUs),
  with the dense peak of the plan's GEMM dtype.
* **Hardware FLOPs** add what recompute executes again (and work replicated across TP ranks),
  which for full recompute of a GPT equals Megatron's 96·B·s·l·h²·(1 + s/6h + V/16lh). HFU
  uses them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from codesign.units import GiB

BREAKDOWN_KEYS = ("forward", "backward", "recompute", "optimizer", "pipeline_bubble",
                  "host_issue", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "pp_comm")
#: engine categories -> report keys; ``host_issue``: the compute stream idle while the host
#: issues its next kernel (codesign.engine.chunk.op_tasks)
_CATEGORY_KEY = {"bubble": "pipeline_bubble", "host": "host_issue",
                 "comm:tp": "tp_comm", "comm:cp": "cp_comm",
                 "comm:ep": "ep_comm", "comm:dp": "dp_comm", "comm:pp": "pp_comm",
                 # copies to and from the host tier (offload); a key only when a plan offloads
                 "comm:h2d": "offload_comm", "comm:d2h": "offload_comm"}
MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "comm_buffers")


def breakdown_from_categories(parts: dict[str, float]) -> dict[str, float]:
    """Engine categories -> report keys (every key present)."""
    out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
    for cat, dt in parts.items():
        key = _CATEGORY_KEY.get(cat, cat)
        out[key] = out.get(key, 0.0) + dt
    return out


@dataclass(frozen=True)
class TrainingReport:
    """Result of one simulated training step. Immutable; ``to_dict`` gives the JSON shape."""

    model: str
    gpu: str
    topology: str
    num_gpus: int
    plan: dict[str, Any]
    feasible: bool
    reason: str = ""
    step_time_s: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    tokens_per_s: float | None = None
    tflops_per_gpu: float | None = None  # model FLOPs per second per GPU, TFLOP/s
    hardware_tflops_per_gpu: float | None = None
    tokens_per_step: float | None = None
    num_microbatches: int | None = None
    model_flops_per_step: float | None = None
    hardware_flops_per_step: float | None = None
    critical_stage: int | None = None
    memory_gib: dict[str, float] = field(default_factory=dict)
    memory_capacity_gib: float | None = None
    breakdown_s: dict[str, float] = field(default_factory=dict)
    measured_ops: list[str] = field(default_factory=list)  # priced from measured tables
    #: money and energy of the step (:func:`codesign.report.cost.training_cost`)
    cost: dict[str, Any] = field(default_factory=dict)
    #: how the plan was chosen when none was given (:func:`codesign.search.choose.simulate`)
    plan_notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt_s(x: float) -> str:
    return f"{x * 1e3:10.2f} ms" if x < 10 else f"{x:10.3f} s "


def format_table(r: TrainingReport) -> str:
    """Human-readable report."""
    p = r.plan
    rc_n = p.get("recompute_num_layers")
    rc_part = "" if rc_n is None else f" (first {rc_n} layers per chunk)"
    head = (f"{r.model} on {r.num_gpus} × {r.gpu} ({r.topology})\n"
            f"plan: tp={p['tp']} pp={p['pp']} dp={p['dp']} cp={p['cp']} ep={p['ep']} "
            f"vpp={p['vpp']} schedule={p['schedule']} micro_batch={p['micro_batch_size']} "
            f"global_batch={p['global_batch_size']} seq={p['seq_len']} "
            f"sp={'on' if p['sequence_parallel'] else 'off'} recompute={p['recompute']}{rc_part} "
            f"zero={p['zero_stage']} dtype={p['dtype']}")
    if not r.feasible:
        return f"{head}\nINFEASIBLE: {r.reason}"
    assert r.step_time_s is not None and r.mfu is not None and r.hfu is not None
    lines = [head, "",
             f"  step time          {r.step_time_s:12.4f} s",
             f"  MFU                {r.mfu * 100:12.2f} %",
             f"  HFU                {r.hfu * 100:12.2f} %",
             f"  model TFLOP/s/GPU  {r.tflops_per_gpu:12.1f}",
             f"  tokens/s           {r.tokens_per_s:12.4g}",
             f"  micro-batches      {r.num_microbatches:12d}  (per pipeline, per step)",
             "", f"  step-time breakdown (critical stage {r.critical_stage}):"]
    for k in (*BREAKDOWN_KEYS, *(["offload_comm"] if "offload_comm" in r.breakdown_s else [])):
        v = r.breakdown_s.get(k, 0.0)
        share = v / r.step_time_s * 100 if r.step_time_s else 0.0
        lines.append(f"    {k:18s} {_fmt_s(v)}  {share:5.1f} %")
    lines += ["", f"  memory per GPU (GiB, most loaded stage; capacity "
                  f"{r.memory_capacity_gib:.1f}):"]
    for k in (*MEMORY_KEYS, "total"):
        lines.append(f"    {k:18s} {r.memory_gib.get(k, 0.0):10.2f}")
    if "offloaded" in r.memory_gib:
        lines.append(f"    {'offloaded':18s} {r.memory_gib['offloaded']:10.2f}  (in the host "
                     f"tier, not HBM; plan offloads {_offloaded_what(p)})")
        without = r.memory_gib.get("hbm_without_offload", 0.0)
        fits = "fits only with offload" if without > (r.memory_capacity_gib or 0.0) \
            else "fits without offload too"
        lines.append(f"    {'without offload':18s} {without:10.2f}  ({fits})")
    if r.measured_ops:
        lines += ["", f"  from measured tables: {', '.join(r.measured_ops)}"]
    lines += _cost_lines(r.cost)
    return "\n".join(lines)


def _offloaded_what(plan: dict[str, Any]) -> str:
    """What a plan moves to the host tier, in words."""
    what = [w for k, w in (("offload_optimizer", "optimizer states"),
                           ("offload_params", "parameters"),
                           ("offload_activations", "activations")) if plan.get(k)]
    return ", ".join(what)


def _cost_lines(c: dict[str, Any]) -> list[str]:
    """Cost and energy lines of the table (what is known of them)."""
    if not c:
        return []
    out = [""]
    if c.get("usd_per_step") is not None:
        out.append(f"  cost: ${c['usd_per_step']:.4g} per step, "
                   f"${c['usd_per_trillion_tokens']:,.0f} per trillion tokens "
                   f"(rental + energy at ${c['electricity_usd_per_kWh']}/kWh)")
    if c.get("energy_kWh_per_step") is not None:
        out.append(f"  energy: {c['energy_kWh_per_step']:.4g} kWh per step at "
                   f"{c['avg_power_kW']:,.0f} kW (board power x PUE {c['pue']}), "
                   f"{c['MWh_per_trillion_tokens']:,.0f} MWh per trillion tokens")
    if c.get("missing"):
        out.append(f"  cost not known: the GPU has no {' or '.join(c['missing'])}")
    out += _tco_lines(c)
    return out


def _tco_lines(c: dict[str, Any]) -> list[str]:
    """Owned-data-center lines: capital, power, per trillion tokens, the component counts."""
    if "tco_capex_usd" not in c:
        return []
    inv = c.get("inventory", {})
    out = [f"  owned: {inv.get('gpus', 0):,} accelerators, {inv.get('hosts', 0):,} hosts, "
           f"{inv.get('nics', 0):,} NICs, {inv.get('switches', 0):,} switches "
           f"({'/'.join(str(x) for x in inv.get('switches_per_tier', [])) or '-'} per tier), "
           f"{inv.get('transceivers', 0):,} transceivers, {inv.get('cables', 0):,} cables"
           + (f", {inv['ocs_ports']:,} OCS ports" if inv.get("ocs_ports") else "")]
    if c.get("tco_usd_per_step") is not None:
        facility = (c.get("tco_capex_usd_by_part") or {}).get("facility") or 0.0
        out.append(f"  owned cost: ${(c['tco_capex_usd'] - facility) / 1e6:,.1f}M equipment "
                   f"over {c['amortization_years']:g} years, ${facility / 1e6:,.1f}M facility, "
                   f"energy: ${c['tco_usd_per_step']:.4g} per step, "
                   f"${c['tco_usd_per_trillion_tokens']:,.0f} per trillion tokens, "
                   f"{c['tco_tokens_per_usd']:,.0f} tokens/$")
        out.append(f"  owned power: {c['tco_facility_power_kW']:,.0f} kW facility "
                   f"({c['tco_it_power_kW']:,.0f} kW IT, accelerators computing "
                   f"{100 * c['gpu_utilization']:.0f}% of the step), "
                   f"{c['tco_MWh_per_trillion_tokens']:,.0f} MWh per trillion tokens, "
                   f"{c['tco_tokens_per_J']:.3g} tokens/J")
    elif c.get("tco_missing"):
        out.append(f"  owned cost not known: the GPU has no {' or '.join(c['tco_missing'])}")
    return out


def gib(x: float) -> float:
    return x / GiB
