"""Map a row of a training-measurement CSV (the columns of ``shared/validation/
training_cases.csv``) to a :class:`TrainingRun`, with every assumption made listed.

Settings a row leaves out take the documented defaults of the framework that produced it:

* **Megatron-LM 2019-22** (Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et al.
  2022; the 2019 code had no pipeline but the same defaults otherwise): unfused softmax
  attention (FlashAttention postdates these runs), no distributed optimizer (ZeRO 0),
  gradient all-reduce after the backward pass (no overlap), fp32 gradient reduction,
  vocabulary 51,200 (GPT-2 BPE padded), plain GELU MLP of 4h; pipeline sends scatter/gathered
  over the TP ranks (``--scatter-gather-tensors-in-pipeline``, on by default; Narayanan et
  al. 2021 Sec. 4.1) and blocking (``p2p_communication._communicate`` synchronizes after
  ``batch_isend_irecv``; p2p overlap arrived with Megatron-Core).
* **Megatron-Core / NeMo** (2023+): flash attention, distributed optimizer (ZeRO-1),
  overlapped gradient reduce and parameter gather, sequence parallelism when tp > 1,
  TP communication overlap with tp > 1 on GPUs with FP8 tensor cores (Hopper and later;
  not on Ampere or Volta parts).
* **Llama 3 (Meta)**: FSDP that shards optimizer states and gradients but keeps parameters
  after forward (ZeRO-2 semantics), sequence parallelism, flash attention.
* **MosaicML llm-foundry** (MPT): PyTorch FSDP FULL_SHARD (ZeRO-3); its benchmark tables ran
  the Triton FlashAttention (``attn_impl: triton``), FP8 runs FlashAttention v1.

Micro-batch size, interleaving depth and recompute, when not given, follow rules stated in
:func:`map_row` and are recorded as assumptions.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from codesign.errors import InfeasiblePlan, SpecError
from codesign.specs.base import format_validation_error
from codesign.specs.catalog import load_gpu, load_model, load_topology, resolve_system
from codesign.specs.gpu import GpuSpec
from codesign.specs.model import ModelSpec, MoESpec
from codesign.specs.names import system_named
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.units import GiB
from codesign.validation.csvrows import device_count, int_cell, row_text
from codesign.validation.csvrows import read_rows as _read_rows
from codesign.validation.plan_rules import (
    choose_with_batch,
    expert_tp_choices,
    lora_rank_of,
    pipeline_allowed,
    plan_default,
    stated_cells,
)
from codesign.validation.prose import (
    read_attention_kernel,
    read_block_layout,
    read_capacity_factor,
    read_degree,
    read_dispatcher,
    read_ep_overlap,
    read_expert_tp,
    read_fp4_high_precision_layers,
    read_fp8_recipe,
    read_global_batch,
    read_gpu_hours_rate,
    read_grad_reduce_in_fp32,
    read_head_dim,
    read_hierarchical_zero3,
    read_interleave,
    read_lora,
    read_loss_stage,
    read_mlp_kind,
    read_mtp,
    read_network_prose,
    read_nic_gbps,
    read_number,
    read_other_metric,
    read_overlap_comm,
    read_packing,
    read_pipeline_schedule,
    read_pointwise_kernels,
    read_precision,
    read_recompute_layers,
    read_recompute_modules,
    read_remat_policy,
    read_seconds,
    read_seq_len,
    read_sliding_window,
    read_switch,
    read_tp_overlap,
    read_zero,
    states_capacity_factor,
)
from codesign.validation.recompute import apply_choice, recompute_choices, stated_recompute
from codesign.workload.dims import plan_problems
from codesign.workload.params import param_counts

T = TypeVar("T")

REQUIRED_COLUMNS = ("case_id", "source", "model", "num_layers", "hidden_size", "num_heads",
                    "gpu_type", "num_gpus", "tp", "pp", "global_batch_size")


@dataclass(frozen=True)
class Measurement:
    """What a row measured, in the unit of ``metric``."""

    metric: str  # iteration_time_s | tokens_per_s | tflops_per_gpu | mfu_pct | hfu_pct
    value: float
    flop_formula: str = "model"  # model | hardware | megatron-recompute: FLOPs counted


@dataclass(frozen=True)
class MappedCase:
    """A row turned into runs (alternatives tried in order until one fits) and its metric."""

    case_id: str
    source: str
    framework: str
    candidates: tuple[tuple[TrainingRun, ...], ...]  # by preference; within a group, the
    # fastest feasible run is taken (settings a user would tune, e.g. interleaving depth)
    candidate_notes: tuple[tuple[str, ...], ...]  # per run, flattened in group order
    measurement: Measurement
    assumptions: tuple[str, ...] = field(default=())
    stated: tuple[str, ...] = field(default=())  # the plan cells as the row states them
    #: False when no plan fits codesign's memory estimate and the runs are the fastest that fit
    #: a larger memory (:data:`MEMORY_DOUBT_FACTORS`): they are timed without the HBM check
    memory_checked: bool = True


#: how much larger than the part's HBM a searched row's memory may be taken to be, tried in
#: order, when no plan fits codesign's estimate: the run was measured, so it fitted, and the
#: estimate is the part in doubt (optimizer-state and master-weight precision, allocator
#: behaviour and offloading, which rows rarely state: a 915B-parameter model on 256 32-GB
#: chips, as MaxText's Trillium example, cannot hold FP32 Adam states at all)
MEMORY_DOUBT_FACTORS = (1.25, 1.5, 2.0, 3.0, 4.0)


class Unsupported(Exception):
    """The row lacks something the simulator needs (message says what)."""


def read_rows(path: Path) -> list[dict[str, str]]:
    """Rows of the CSV; raises :class:`SpecError` if required columns are missing."""
    return _read_rows(path, REQUIRED_COLUMNS, "a training")


#: (pattern on the row's source, notes and model text, lower-cased; framework), first match
#: wins; each framework's defaults are stated in the module docstring and
#: :func:`_framework_settings` / :func:`_zero_stage`
FRAMEWORK_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"narayanan|korthikanti|shoeybi|megatron-lm 20(?:19|21)|2104\.04473|2205\.05198|"
     r"1909\.08053", "megatron-2021"),
    (r"torchtitan|fsdp2|metaseq|fairscale|pytorch fsdp", "torchtitan"),
    (r"mosaic|llm-foundry|\bmpt\b", "mosaicml"),
    (r"maxtext|\bpaxml\b|\bpax\b|\bjax\b|\bpalm\b|\btpu\b|2204\.02311", "maxtext"),
    (r"deepspeed|bloom|megatron-deepspeed|\bzero\b", "deepspeed"),
    (r"nemo|megatron|mcore|bridge|transformer engine|mlperf", "megatron-core"),
    # a Llama 3 model named in a row of another framework (torchtitan, NeMo) is that
    # framework's run: Meta's own training stack only when no framework is named
    (r"llama 3|llama3|2407\.21783|\bmeta\b", "llama3"),
    (r"nvidia", "megatron-core"),
)


def framework_of(row: dict[str, str]) -> str:
    """Which framework produced the row (decides defaults): the first of
    :data:`FRAMEWORK_PATTERNS` matching the source, notes, model or accelerator (the 2019-22
    Megatron-LM papers: the source alone; a TPU runs a JAX/XLA stack, MaxText's defaults);
    else Megatron-Core."""
    text = row_text(row, ("source", "notes", "model", "source_location", "gpu_type"))
    source = row_text(row, ("source", "source_location"))
    for pattern, fw in FRAMEWORK_PATTERNS:
        # the 2019-22 Megatron-LM papers are the source, not a technique the notes cite
        # ("sequence parallelism (Korthikanti et al.)" in another stack's run)
        if re.search(pattern, source if fw == "megatron-2021" else text):
            return fw
    return "megatron-core"


#: metric columns in the order they are preferred: (column, metric, reader)
_METRICS = ("iteration_time_s", "tokens_per_s_total", "tokens_per_s_per_gpu", "tflops_per_gpu",
            "mfu_pct", "hfu_pct")
#: a TFLOP/s or utilization cell counting the FLOPs the hardware ran (recompute included)
_HARDWARE_FLOPS = re.compile(r"hardware|\bhfu\b|incl(?:uding|\.)? recomput")


def measurement_of(row: dict[str, str], framework: str,
                   notes: list[str] | None = None) -> Measurement:
    """The metric to compare: step time, then tokens/s, then TFLOP/s, then MFU. Cells are
    read as written (":func:`~codesign.validation.prose.read_number`: "~", "up to", ranges,
    "850 ms"); what reading took goes to ``notes``."""
    notes = notes if notes is not None else []
    read: dict[str, float] = {}
    text = {col: row.get(col, "") for col in _METRICS}
    for col, cell in text.items():
        n = read_seconds(cell) if col == "iteration_time_s" else read_number(cell)
        if n is not None and n.value > 0:
            read[col] = n.value
            notes.extend(f"{col}: {note}" for note in n.notes)
    if not read:
        read, text = _other_measured(row, notes)
    if "iteration_time_s" in read:
        return Measurement("iteration_time_s", read["iteration_time_s"])
    if "tokens_per_s_total" in read:
        return Measurement("tokens_per_s", read["tokens_per_s_total"])
    gpus = device_count(row)
    if "tokens_per_s_per_gpu" in read and gpus:
        return Measurement("tokens_per_s", read["tokens_per_s_per_gpu"] * gpus)
    for col in ("tflops_per_gpu", "mfu_pct", "hfu_pct"):
        if col not in read:
            continue
        formula = ("megatron-recompute" if framework == "megatron-2021" or (
            framework == "deepspeed"
            and "megatron" in row_text(row, ("source", "source_location", "notes")))
            else "model")
        if formula == "model" and (col == "hfu_pct" or _HARDWARE_FLOPS.search(
                text[col].lower())):
            formula = "hardware"
            notes.append(f"{col} '{text[col]}' counts hardware FLOPs (recompute included)")
        value = read[col]
        if col != "tflops_per_gpu" and value <= 1.0:  # written as a fraction ("0.52")
            notes.append(f"{col} {value:g} read as a fraction: {100 * value:g}%")
            value *= 100
        return Measurement(col, value, formula)
    raise Unsupported("no measured metric: iteration_time_s, tokens_per_s_total, "
                      "tokens_per_s_per_gpu, tflops_per_gpu, mfu_pct and hfu_pct hold no "
                      "number, and other_measured states none of them")


def _other_measured(row: dict[str, str],
                    notes: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    """The metric the free-text ``other_measured`` cell states when every metric column is
    empty (:func:`~codesign.validation.prose.read_other_metric`), as ``{column: value}`` and
    the cell's text per column: aggregate TFLOP/s become per device, samples/s tokens/s
    (times the row's sequence length); ``({}, {})`` when it states none it can convert."""
    cell = row.get("other_measured", "")
    reading = read_other_metric(cell)
    if reading is None:
        return {}, {}
    kind, value = reading
    col = kind
    if kind == "tflops_total":
        gpus = device_count(row)
        if not gpus:
            return {}, {}
        col, value = "tflops_per_gpu", value / gpus
    elif kind == "samples_per_s":
        seq = _seq_len(row, notes)
        if not seq:
            return {}, {}
        col, value = "tokens_per_s_total", value * seq
    if value <= 0:
        return {}, {}
    how = (" (tokens over device hours x 3600: the whole run's average, its restarts and "
           "evaluations included)" if read_gpu_hours_rate(cell) is not None else "")
    notes.append(f"metric from other_measured '{cell.strip()}': {col} {value:g}{how}")
    return {col: value}, {col: cell}


#: model families whose MLP is a gated linear unit (SwiGLU / GeGLU): Llama, Qwen, Mistral /
#: Mixtral, gpt-oss, DeepSeek and Kimi, PaLM (Chowdhery et al. 2022, Sec. 2: SwiGLU), Gemma
#: (GeGLU), OLMo, InternLM, Baichuan, Yi, StableLM 2, DBRX, Grok-1, Granite, Phi-3/4 and GLM
#: (their Hugging Face configurations: a ``gate_proj`` or fused ``gate_up_proj``)
GATED_FAMILIES = ("llama", "qwen", "mixtral", "mistral", "oss", "deepseek", "kimi", "palm",
                  "gemma", "olmo", "internlm", "baichuan", "yi-", "stablelm", "dbrx", "grok",
                  "granite", "phi-3", "phi3", "phi-4", "phi4", "glm")
#: frameworks whose unnamed (synthetic) models have a gated MLP by default: MaxText's
#: ``base.yml`` (``mlp_activations: ["silu", "linear"]``, SwiGLU)
GATED_BY_DEFAULT = ("maxtext",)


def model_of(row: dict[str, str], framework: str, notes: list[str]) -> ModelSpec:
    """The catalog model when one matches the row's name and shape, else one built from the
    row's architecture columns; a block layout, MTP depth or sliding window the row's prose states
    (:func:`_stated_architecture`) overrides either."""
    return _stated_architecture(_model_of(row, framework, notes), _prose(row), notes)


def _stated_architecture(model: ModelSpec, text: str, notes: list[str]) -> ModelSpec:
    """``model`` with the block layout (:func:`~codesign.validation.prose.read_block_layout`),
    multi-token-prediction depths (:func:`~codesign.validation.prose.read_mtp`) and sliding
    window (:func:`~codesign.validation.prose.read_sliding_window`) the prose states, each
    noted where it changes the model."""
    update: dict[str, object] = {}
    layout = read_block_layout(text)
    if layout is not None and (layout == "parallel") != model.parallel_block:
        update["parallel_block"] = layout == "parallel"
        notes.append(f"block layout stated: {layout} attention and MLP")
    mtp = read_mtp(text)
    if mtp is not None and mtp != model.mtp_num_layers:
        update["mtp_num_layers"] = mtp
        if not mtp:
            update["mtp_block_pattern"] = None
        notes.append(f"multi-token prediction stated: {mtp} depth(s)" if mtp else
                     "multi-token prediction stated off")
    window = read_sliding_window(text)
    if window is not None and window != model.sliding_window:
        update["sliding_window"] = window
        notes.append(f"sliding-window attention stated: {window} tokens"
                     + ("" if model.full_attention_interval is None else
                        f", every {model.full_attention_interval}th layer full"))
    return model.model_copy(update=update) if update else model


def _model_of(row: dict[str, str], framework: str, notes: list[str]) -> ModelSpec:
    """The catalog model when one matches the row's name and shape, else one built from the
    row's architecture columns."""
    layers, hidden = int_cell(row, "num_layers"), int_cell(row, "hidden_size")
    heads = int_cell(row, "num_heads")
    seq = _seq_len(row, notes)
    try:  # the catalog model of that name, looked up once
        known: ModelSpec | None = load_model(row["model"])
        unknown = ""
    except SpecError as exc:
        known, unknown = None, str(exc)
    if layers and hidden and not heads and known is None and hidden % DEFAULT_HEAD_DIM == 0:
        heads = hidden // DEFAULT_HEAD_DIM
        notes.append(f"num_heads not given: {heads} (head dimension {DEFAULT_HEAD_DIM}, the "
                     "common choice since GPT-3's larger models and Llama)")
    if not (layers and hidden and heads):  # the architecture columns are empty
        if known is None:
            raise Unsupported(f"model {row['model']!r}: architecture columns (num_layers, "
                              f"hidden_size, num_heads) empty and not a catalog model "
                              f"({unknown})")
        notes.append(f"model: architecture not given, catalog entry {known.name}"
                     + ("" if seq else f" at its sequence length {known.seq_len}"))
        return known.model_copy(update={"seq_len": seq or known.seq_len})
    if seq is None:
        seq = 2048
        notes.append("seq_len not given: 2048")
    if known is not None and known.num_layers == layers and known.hidden_size == hidden:
        notes.append(f"model: catalog entry {known.name}")
        return _with_stated_columns(known.model_copy(update={"seq_len": seq}), row, notes)
    name = row["model"].lower()
    text = _prose(row)
    stated_mlp = read_mlp_kind(text)
    family = next((f for f in GATED_FAMILIES if f in name), None)
    if stated_mlp is not None:
        gated = stated_mlp == "gated"
        notes.append(f"MLP stated: {stated_mlp}")
    elif family is not None:
        gated = True
    else:
        gated = framework in GATED_BY_DEFAULT
        if gated:
            notes.append(f"MLP not stated: gated (SwiGLU), the {framework} default")
    moe = None
    experts, top_k, eff = (int_cell(row, "moe_experts"), int_cell(row, "moe_top_k"),
                           int_cell(row, "moe_expert_ffn"))
    if experts and top_k and eff:
        moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn_hidden_size=eff)
    stated_ffn = int_cell(row, "ffn_size")
    ffn = 4 * hidden if stated_ffn is None else stated_ffn
    if stated_ffn is None and moe is not None:
        notes.append("ffn_size not given: 4h (standard GPT block)")
    vocab = int_cell(row, "vocab_size")
    if vocab is None:
        vocab = 51200
        notes.append("vocab_size not given: 51200 (GPT-2 BPE padded, Megatron default)")
    head_dim = read_head_dim(text)
    if head_dim is not None and head_dim * heads != hidden:
        notes.append(f"head dimension stated: {head_dim} ({heads} heads x {head_dim} = "
                     f"{heads * head_dim} query width, hidden {hidden})")
    else:
        head_dim = None
    spec = ModelSpec(
        name=row["model"], num_layers=layers, hidden_size=hidden, num_heads=heads,
        head_dim=head_dim,
        num_kv_heads=int_cell(row, "num_kv_heads") or heads, ffn_hidden_size=ffn,
        vocab_size=vocab, seq_len=seq, mlp="gated" if gated else "plain",
        norm="rmsnorm" if gated else "layernorm",
        position_embedding="learned" if framework == "megatron-2021" else "rope", moe=moe)
    if stated_ffn is None and moe is None:
        return _ffn_from_params(spec, row, notes)
    return spec


#: the architecture columns a row may state differently from the catalog model of its name
#: (a benchmark's own configuration: llm-foundry's MPT-30B benchmark YAML has 56 heads where
#: the released model has 64), and the field each sets
_STATED_COLUMNS = (("num_heads", "num_heads"), ("num_kv_heads", "num_kv_heads"),
                   ("ffn_size", "ffn_hidden_size"), ("vocab_size", "vocab_size"))
#: how far a stated vocabulary may sit from the catalog's and still be the same one written
#: round ("128K" = 128,000 for Llama 3's 128,256; a padded 50,368 for MPT's 50,432): the
#: catalog's exact size is kept
VOCAB_ROUNDING = 0.01


def _with_stated_columns(model: ModelSpec, row: dict[str, str],
                         notes: list[str]) -> ModelSpec:
    """The catalog ``model`` with the heads, KV heads, MLP width and vocabulary the row states
    where they differ (the row describes the run; the catalog only fills what it leaves out),
    each noted; a vocabulary within :data:`VOCAB_ROUNDING` is the catalog's written round. A
    MoE model keeps its widths (a row's ``ffn_size`` may be the dense or the expert one)."""
    update: dict[str, Any] = {}
    for col, fld in _STATED_COLUMNS:
        value = int_cell(row, col)
        current = getattr(model, fld)
        if fld == "num_kv_heads" and current is None:
            current = update.get("num_heads", model.num_heads)
        if value is None or value == current or (fld == "ffn_hidden_size" and model.moe):
            continue
        if fld == "vocab_size" and abs(value - current) <= VOCAB_ROUNDING * current:
            continue
        update[fld] = value
    if not update:
        return model
    if "num_heads" in update and model.head_dim is not None \
            and model.head_dim * model.num_heads == model.hidden_size:
        update["head_dim"] = None  # the query width stays the hidden size
    notes.append("row's columns over the catalog entry: " + ", ".join(
        f"{k} {v}" for k, v in update.items() if v is not None))
    return ModelSpec.model_validate({**model.model_dump(), **update})


#: the head dimension a model built from columns without a head count gets
DEFAULT_HEAD_DIM = 128
#: the granularity an FFN width solved from a parameter count is rounded to
FFN_ROUNDING = 64


def conventional_ffn(hidden: int, gated: bool) -> int:
    """The MLP width a transformer of width ``hidden`` conventionally has: 4h for a plain MLP
    (GPT-2/3), 2/3 of 4h rounded up to a multiple of 256 for a gated one (LLaMA, Touvron et
    al. 2023, Sec. 2.2: "a dimension of 2/3 4d instead of 4d"; its ``multiple_of`` 256)."""
    return 4 * hidden if not gated else -(-8 * hidden // (3 * 256)) * 256


#: how far a stated parameter count may sit from the conventional width's before the width is
#: solved from it instead: counts are written to two or three significant figures ("1.7B",
#: "70B") and exclude or include embeddings by the authors' habit
PARAMS_TOLERANCE = 0.10


def _ffn_from_params(spec: ModelSpec, row: dict[str, str], notes: list[str]) -> ModelSpec:
    """A dense model built from columns without an FFN width: the conventional width
    (:func:`conventional_ffn`) when the row's ``params_B`` is within
    :data:`PARAMS_TOLERANCE` of its parameter count (or the row states none), else the width
    whose parameter count (:func:`~codesign.workload.params.param_counts`, linear in it)
    matches ``params_B``, rounded to :data:`FFN_ROUNDING`, when that lies between h and 8h."""
    h, gated = spec.hidden_size, spec.mlp == "gated"
    conv = spec.model_copy(update={"ffn_hidden_size": conventional_ffn(h, gated)})
    rule = "2/3 of 4h, LLaMA's gated width" if gated else "4h, standard GPT block"
    stated = read_number(row.get("params_B", ""))
    total = param_counts(conv).total
    if stated is None or stated.value <= 0 or \
            abs(total / (stated.value * 1e9) - 1) <= PARAMS_TOLERANCE:
        notes.append(f"ffn_size not given: {conv.ffn_hidden_size} ({rule})")
        return conv
    base = param_counts(spec.model_copy(update={"ffn_hidden_size": h})).total
    slope = (param_counts(spec.model_copy(update={"ffn_hidden_size": 2 * h})).total - base) / h
    ffn = round((h + (stated.value * 1e9 - base) / slope) / FFN_ROUNDING) * FFN_ROUNDING
    if not h <= ffn <= 8 * h:
        notes.append(f"ffn_size not given: {conv.ffn_hidden_size} ({rule}; params_B "
                     f"{stated.value:g}B fits no MLP width between h and 8h)")
        return conv
    notes.append(f"ffn_size not given: {ffn}, the width whose parameter count matches the "
                 f"row's params_B {stated.value:g}B ({spec.mlp} MLP; {rule} would give "
                 f"{total / 1e9:.3g}B)")
    return spec.model_copy(update={"ffn_hidden_size": ffn})


def _seq_len(row: dict[str, str], notes: list[str]) -> int | None:
    """The row's sequence length (:func:`~codesign.validation.prose.read_seq_len`: "4K" is
    4,096), or ``None`` when not given."""
    reading = read_seq_len(row.get("seq_len", ""))
    if reading is None:
        return None
    if reading[1]:
        notes.append(reading[1])
    return reading[0]


def topology_of(row: dict[str, str], gpu_default: str, notes: list[str]) -> str:
    """Catalog topology matching the row's network description."""
    net = row.get("inter_node_network", "").lower()
    if "roce" in net and ("clos" in net or "oversubscribed" in net):
        notes.append("network: meta-h100-roce (RoCE 400 Gb/s per GPU, 3-layer Clos)")
        return "meta-h100-roce"
    if not net or "not stated" in net:
        notes.append(f"network column not stated: {gpu_default}'s scale-out network")
    return gpu_default


#: frameworks whose pipeline schedule has no interleaving (DeepSpeed's pipeline engine)
NON_INTERLEAVED = ("deepspeed",)


def _interleaving_allowed(framework: str, num_layers: int, pp: int, vpp: int) -> bool:
    """Whether ``framework`` can run ``vpp`` model chunks per pipeline rank.

    Megatron sets interleaving by ``--num-layers-per-virtual-pipeline-stage`` and asserts that
    it divides the layers of a pipeline stage (``num_layers / pp``), so every chunk holds the
    same number of layers; Megatron-LM 2021-22 also asserted ``pp > 2`` for the interleaved
    schedule (``megatron/arguments.py``). DeepSpeed's pipeline engine has no interleaved
    schedule (its ``deepspeed/runtime/pipe/schedule.py`` trains by ``TrainSchedule``, 1F1B
    over one stage per rank). Other frameworks split layers unevenly.
    """
    if framework in NON_INTERLEAVED:
        return vpp == 1
    if framework not in ("megatron-2021", "megatron-core"):
        return True
    if num_layers % pp or (num_layers // pp) % vpp:
        return False
    return framework != "megatron-2021" or pp > 2


#: ZeRO stage a framework uses when a row does not say (Megatron-LM 2021-22 had no
#: distributed optimizer; Megatron-Core/NeMo recipes turn it on; Llama 3 keeps parameters after
#: forward (ZeRO-2 semantics, Llama 3 report Sec. 3.3.2); llm-foundry, torchtitan and MaxText
#: shard fully by default (FSDP FULL_SHARD / FSDP2 / MaxText's fsdp axis); Megatron-DeepSpeed
#: recipes (e.g. BLOOM-176B) run ZeRO-1)
DEFAULT_ZERO = {"megatron-2021": 0, "megatron-core": 1, "llama3": 2, "mosaicml": 3,
                "torchtitan": 3, "maxtext": 3, "deepspeed": 1}


#: a qualifier in parentheses or brackets after a model's name: Megatron-Bridge's tables write
#: "Qwen3_30B_a3B (tokendrop)", "DeepSeekV3 (w/o MTP)", "DeepSeekV3 (dropless)"
_NAME_QUALIFIER = re.compile(r"[(\[]([^()\[\]]+)[)\]]")


def _prose(row: dict[str, str]) -> str:
    """The row's free-text cells (notes, other measurements) and the qualifiers its model
    name carries in parentheses (:data:`_NAME_QUALIFIER`), joined."""
    qualifiers = " ".join(_NAME_QUALIFIER.findall(row.get("model", "")))
    return " ".join(t for t in (row_text(row, ("notes", "other_measured"), lower=False),
                                qualifiers) if t)


def _stated(row: dict[str, str], col: str) -> int | None:
    """A whole-number plan cell ("8", "8 (inferred)"), or ``None`` when empty / not stated."""
    cell = row.get(col, "")
    if re.search(r"not stated|unknown|\?|n/a", cell.lower()):
        return None
    return int_cell(row, col)


def _degree(row: dict[str, str], col: str, notes: list[str]) -> int | None:
    """A parallel degree (``tp``, ``pp``, ``cp``, ``ep``): the row's cell, else the one its
    notes state (:func:`~codesign.validation.prose.read_degree`, noted), else ``None``."""
    stated = _stated(row, col)
    if stated is not None:
        return stated
    read = read_degree(_prose(row), col)
    if read is not None:
        notes.append(f"{col} {read} as the notes state ({col} cell empty)")
    return read


def gpu_of(row: dict[str, str], notes: list[str]) -> tuple[GpuSpec, str]:
    """The GPU a row's ``gpu_type`` names and the system it implies (a named system or cloud
    instance, else the GPU's usual one), through the one name resolver; training and inference
    rows read their hardware here."""
    gpu, named = _hardware(row, notes)
    return gpu, named or gpu.default_topology


def _hardware(row: dict[str, str], notes: list[str]) -> tuple[GpuSpec, str | None]:
    """The catalog GPU ``gpu_type`` names and the system it names (``None`` for a bare
    part), through the one name resolver."""
    try:
        found = resolve_system(row["gpu_type"])
        gpu = load_gpu(found.gpu)
    except SpecError as exc:
        raise Unsupported(f"gpu_type {row['gpu_type']!r}: {exc}") from None
    notes.extend(found.notes)
    return gpu, found.topology


def _fp4_plan(gpu: GpuSpec, prose: str, notes: list[str]) -> dict[str, Any]:
    """Plan settings of a row trained in FP4 (NVFP4 / MXFP4): its GEMM dtype, FP8 on a part
    without an FP4 peak (the finest it has), and how many first and last layers stay in
    BF16: as the prose states, else none (Megatron-Core's and Transformer Engine's
    default, ``first_last_layers_bf16`` off; Megatron-Bridge's ``bf16_with_nvfp4_mixed``
    performance recipe keeps it off)."""
    if "fp4" not in gpu.peak_tflops:
        notes.append(f"FP4 GEMMs run as FP8 ({gpu.name} has no FP4 peak)")
        return {"dtype": "fp8"}
    stated = read_fp4_high_precision_layers(prose)
    first, last = stated if stated is not None else (0, 0)
    notes.append(f"NVFP4 GEMMs; first {first} and last {last} layers in BF16 "
                 + ("(as the row states)" if stated is not None else
                    "(framework default: first_last_layers_bf16 off)"))
    return {"dtype": "fp4", "fp4_high_precision_first": first,
            "fp4_high_precision_last": last}


def gpu_and_topology_of(row: dict[str, str], notes: list[str]) -> tuple[GpuSpec, Any]:
    """The row's GPU and its system, with the network the row describes: a system or cloud
    instance its notes name (:func:`~codesign.specs.names.system_named`) when ``gpu_type``
    names a bare part, and the scale-out rate its notes state when ``inter_node_network``
    is empty."""
    gpu, system = _hardware(row, notes)
    if system is None:
        system = gpu.default_topology
        named = system_named(_prose(row), gpu.name)
        if named is not None and named != system:
            notes.append(f"system named in the notes: {named} ({gpu.name}'s usual system is "
                         f"{system})")
            system = named
    topo = load_topology(topology_of(row, system, notes))
    return gpu, with_stated_nic(topo, row, notes)


def with_stated_nic(topo: Any, row: dict[str, str], notes: list[str]) -> Any:
    """``topo`` with the scale-out NIC rate per GPU the row's ``inter_node_network`` states
    (:func:`~codesign.validation.prose.read_nic_gbps`), or its notes when that cell is empty
    (:func:`~codesign.validation.prose.read_network_prose`), when it differs from the
    system's."""
    # GPUs behind one server's NICs: the row's gpus_per_node up to 16 (a DGX-2 shares 8 NICs
    # among 16 GPUs), else 8 (a rack-scale NVLink domain such as NVL72 still has its NICs per
    # 4- or 8-GPU tray)
    stated_per_node = int_cell(row, "gpus_per_node") or 8
    per_node: int = stated_per_node if stated_per_node <= 16 else 8
    cell = row.get("inter_node_network", "")
    stated = (read_nic_gbps(cell, per_node) if cell.strip() else
              read_network_prose(_prose(row), per_node))
    out = getattr(topo, "scale_out", None)
    if stated is None or out is None or abs(stated[0] - out.nic_bandwidth_Gbps) \
            <= 0.01 * out.nic_bandwidth_Gbps:
        return topo
    notes.append(f"{stated[1]} (the {topo.name} system has {out.nic_bandwidth_Gbps:g})")
    return topo.model_copy(update={"scale_out": out.model_copy(
        update={"nic_bandwidth_Gbps": stated[0]})})


def map_row(row: dict[str, str]) -> MappedCase:
    """Turn one CSV row into candidate runs; raises :class:`Unsupported` naming the column
    that stops it.

    Settings a practitioner tunes, when the row leaves them out, become candidates:
    recompute is the least of none / selective / full on the fewest layers per pipeline chunk
    / full on every layer that fits in HBM (one candidate group each, tried in that order;
    :mod:`codesign.validation.recompute`); within a group, every micro-batch size of 1, 2, 4,
    8 dividing the per-replica batch and every interleaving depth of 2-8 the framework can run
    (:func:`_interleaving_allowed`) is a run, and the fastest feasible run is reported. When
    the row does not state TP or PP, the whole plan is the fastest feasible one the search
    finds with every stated setting pinned (:func:`codesign.search.choose.choose_plan`).
    """
    fw = framework_of(row)
    notes: list[str] = [f"framework defaults: {fw}"]
    n = device_count(row)
    if not n:
        raise Unsupported(f"num_gpus {row.get('num_gpus', '')!r}: no GPU count")
    measurement = measurement_of(row, fw, notes)
    model = model_of(row, fw, notes)
    prose = _prose(row)
    if model.moe is not None:
        cf = read_capacity_factor(prose)
        if cf is not None:
            model = model.model_copy(update={"moe": model.moe.model_copy(
                update={"capacity_factor": cf})})
            stated = states_capacity_factor(prose)
            notes.append(f"MoE capacity factor {cf:g} as the row states (buffers padded to "
                         "capacity)" if stated else
                         f"MoE token dropping without a factor: capacity factor {cf:g}, "
                         "buffers padded to it (Megatron-Core's token-drop recipes)")
    gpu, topo = gpu_and_topology_of(row, notes)
    tp, pp = plan_default(fw, "tp", _degree(row, "tp", notes), notes), \
        plan_default(fw, "pp", _degree(row, "pp", notes), notes)
    cp, ep = _degree(row, "cp", notes), _degree(row, "ep", notes)
    gbs = _global_batch(row, model.seq_len or 2048, n, tp, pp, cp, notes)
    dtype = read_precision(row.get("precision", ""))
    plan: dict[str, Any] = dict(global_batch_size=gbs, dtype=dtype, seq_len=model.seq_len)
    if dtype == "fp4":
        plan.update(_fp4_plan(gpu, prose, notes))
    recipe = read_fp8_recipe(row.get("precision", ""))  # None unless an FP8 cell names one
    if recipe is not None:
        plan["fp8_recipe"] = recipe
        notes.append(f"FP8 scaling recipe: {recipe} (as the precision cell states)")
    elif dtype == "fp8" and fw in DYNAMIC_FP8_FRAMEWORKS:
        plan["fp8_recipe"] = "current"
        notes.append(f"FP8 scaling recipe: current ({fw} trains FP8 with torchao's Float8Linear,"
                     " whose recipes scale each tensor from its own amax when it is cast)")
    dispatcher = read_dispatcher(prose) if model.moe is not None else None
    if dispatcher == "deepep":
        plan["moe_dispatcher"] = dispatcher
        notes.append("MoE dispatcher: tokens sent once per destination node and forwarded "
                     "over NVLink (DeepEP / HybridEP, as the row states)")
    if model.moe is not None and read_ep_overlap(prose):
        plan["ep_comm_overlap"] = True
        notes.append("MoE all-to-alls overlapped with other micro-batches' computation (as "
                     "the row states: EP A2A overlap / DualPipe)")
    sp = read_switch(row.get("sp", ""))
    zero = _zero_stage(row.get("zero_fsdp", ""), fw, notes)
    lora_text = row_text(row, ("notes", "model", "source_location"), lower=False)
    if (tp is None or pp is None) and read_lora(lora_text)[0]:
        return _unstated_lora_case(row, model, n, tp, pp)
    lora = lora_rank_of(lora_text, notes)
    if lora is not None:
        plan["lora_rank"] = lora
    docs = _packed_documents(row, notes)
    if docs is not None:
        plan["document_tokens"] = docs
    schedule = row_schedule(row, fw)
    if schedule[0] in ("gpipe", "zb-h1"):
        plan["schedule"] = schedule[0]
    if tp is None or pp is None:
        return _searched_case(row, fw, notes, measurement, model, gpu, topo, n, plan,
                              dict(tp=tp, pp=pp, cp=cp, ep=ep, sp=sp, zero=zero,
                                   schedule=schedule[0]))
    cp, ep = cp or 1, ep or 1
    plan.update(tp=tp, pp=pp, cp=cp, ep=ep)
    if sp is None:
        early = _before_sequence_parallel(row)
        sp = tp > 1 and fw != "megatron-2021" and not early
        notes.append(f"sequence parallel not stated: {'on' if sp else 'off'} "
                     + (SP_ERA_NOTE if early else f"({fw} default)"))
    plan["sequence_parallel"] = sp
    plan["zero_stage"] = zero
    plan.update(_row_settings(row, fw, tp, sp, gpu, zero, plan["dtype"], notes))
    if "placement_order" in plan:
        notes.append(f"rank placement {', '.join(plan['placement_order'])} "
                     f"(innermost first; {fw} default)")
    dp = n // (tp * pp * cp) if tp * pp * cp else 0
    etp_list = expert_tp_choices(fw, tp, cp, dp, ep, era_year(row), read_expert_tp(prose),
                                 notes)
    mbs_list = _micro_batch_sizes(row, fw, gbs, dp, pp, notes, n)
    n_mb = gbs // (mbs_list[0] * dp) if dp and mbs_list[0] else 0
    vpp_list = _interleaving_depths(row, fw, model.num_layers, pp, n_mb, schedule, notes)
    choices = recompute_choices(row.get("activation_recompute", ""), row.get("notes", ""),
                                notes, (row.get("mfu_pct", ""), row.get("hfu_pct", "")))
    candidates, cand_notes = [], []
    first_problems: list[str] = []
    for choice in choices:
        group = []
        for mb, vpp, etp in itertools.product(mbs_list, vpp_list, etp_list):
            par = ParallelismSpec.parse({**plan, "recompute": choice.kind, "vpp": vpp,
                                         "micro_batch_size": mb, "etp": etp},
                                        f"case {row['case_id']}")
            run = TrainingRun(model=model, gpu=gpu, topology=topo, parallel=par, num_gpus=n)
            problems = plan_problems(run)
            if problems:
                first_problems = first_problems or problems
                continue
            bound = apply_choice(run, choice)
            if bound is None:
                continue
            run, assumed = bound
            group.append(run)
            cand_notes.append(tuple(
                label for label, many in ((assumed or f"recompute {choice.kind}",
                                           bool(assumed) or len(choices) > 1),
                                          (f"micro-batch {mb}", len(mbs_list) > 1),
                                          (f"vpp {vpp}", len(vpp_list) > 1),
                                          (f"etp {etp or tp}", len(etp_list) > 1)) if many))
        candidates.append(tuple(group))
    if not any(candidates):  # no candidate setting gives a valid plan: say why the first fails
        raise Unsupported("tp/pp/cp/ep/global_batch_size: " + "; ".join(first_problems))
    return MappedCase(case_id=row["case_id"], source=row.get("source", ""), framework=fw,
                      candidates=tuple(candidates), candidate_notes=tuple(cand_notes),
                      measurement=measurement, assumptions=tuple(notes),
                      stated=stated_cells(row))


def _global_batch(row: dict[str, str], seq_len: int, n: int, tp: int | None, pp: int | None,
                  cp: int | None, notes: list[str]) -> int:
    """Sequences per step: the row's (in sequences or tokens); one sequence per GPU when the
    row gives no batch at all; rounded to the nearest multiple of the data-parallel size when
    the row's plan fixes it and the stated batch does not divide (frameworks split a batch
    evenly over the replicas, so the published figure is itself a rounded one)."""
    cell = row.get("global_batch_size", "")
    batch = read_global_batch(cell, seq_len)
    if batch is None:
        if cell.strip() and not re.fullmatch(r"(?i)not stated|n/?a|\?|-|unknown", cell.strip()):
            raise Unsupported(f"global_batch_size {cell!r}: no batch size (sequences or "
                              "tokens)")
        return _default_batch(row, n, tp, pp, cp, notes)
    gbs = batch[0]
    notes.extend(batch[1])
    dp = _stated(row, "dp")
    if dp is None and tp and pp:
        dp = n // (tp * pp * (cp or 1)) or None
    if dp and gbs % dp:
        rounded = max(dp, round(gbs / dp) * dp)
        notes.append(f"global batch {gbs} is not a multiple of dp {dp}: {rounded}")
        gbs = rounded
    return gbs


#: mean tokens per sample of a packed fine-tuning row that states none. ASSUMPTION: the long
#: end of instruction and QA samples (a SQuAD v1.1 sample is a Wikipedia paragraph of at least
#: 500 characters plus a question, Rajpurkar et al. 2016 Sec. 2). Once samples are short
#: against the pack the attention left is a few per cent of the step, so the value matters
#: little: NeMo 24.07's packed SFT and LoRA rows move < 1% between 128 and 512 tokens
#: (docs/validation.md)
PACKED_DOCUMENT_TOKENS = 512


def _packed_documents(row: dict[str, str], notes: list[str]) -> int | None:
    """Mean tokens per document of a row that says its sequences are packed from samples
    that attend only to themselves (:func:`~codesign.validation.prose.read_packing`), else
    ``None`` (one document per sequence): the length the row states, else
    :data:`PACKED_DOCUMENT_TOKENS`. A fine-tuning row that does not mention packing is not
    packed: Megatron Bridge's SFT and PEFT recipes pack SQuAD ("uses SQuAD with packed
    sequences by default", megatron/bridge/recipes/common.py), but its performance recipes
    pad every sample to the pack length (``dataset_kwargs = {"pad_to_max_length": True}``,
    megatron/bridge/perf_recipes/llama/*/llama3.py), one sample per sequence."""
    text = row_text(row, ("notes", "other_measured", "model", "source", "source_location"),
                    lower=False)
    packed, size = read_packing(text)
    if not packed:
        return None
    if size is None:
        notes.append(f"sequences packed from fine-tuning samples, each attending only to "
                     f"itself (as the row states); sample length not stated: "
                     f"{PACKED_DOCUMENT_TOKENS} tokens (ASSUMPTION)")
        return PACKED_DOCUMENT_TOKENS
    notes.append(f"sequences packed from fine-tuning samples of {size} tokens, each "
                 f"attending only to itself (as the row states)")
    return size


#: tensor-parallel sizes a LoRA row that states none is tried at (powers of two within a node)
LORA_TP_CHOICES = (1, 2, 4, 8)


def _unstated_lora_case(row: dict[str, str], model: ModelSpec, n: int, tp: int | None,
                        pp: int | None) -> MappedCase:
    """A LoRA fine-tuning row that does not state TP or PP. The plan search's estimator does
    not price LoRA (frozen base weights, no base gradients or optimizer states), so the row
    is mapped with each TP it allows (the stated one, else every power of two up to the node
    size that divides the heads and the GPU count) and PP as stated, else 1 (a LoRA
    fine-tune keeps its frozen weights sharded by TP or ZeRO rather than pipelined), each as
    a stated plan; the candidate groups are merged (by recompute preference, the fastest
    feasible run of a group is taken)."""
    node = int_cell(row, "gpus_per_node") or 8
    tps = [tp] if tp else [t for t in LORA_TP_CHOICES
                           if t <= node and n % t == 0 and model.num_heads % t == 0]
    cases, problems = [], []
    for t in tps:
        try:
            cases.append((t, map_row({**row, "tp": str(t), "pp": str(pp or 1)})))
        except Unsupported as exc:
            problems.append(f"tp {t}: {exc}")
    if not cases:
        raise Unsupported("tp/pp not stated (LoRA): no plan maps: " + "; ".join(problems))
    groups: list[list[TrainingRun]] = []
    labels: list[list[tuple[str, ...]]] = []
    for t, case in cases:
        flat = iter(case.candidate_notes)
        for i, group in enumerate(case.candidates):
            while len(groups) <= i:
                groups.append([])
                labels.append([])
            groups[i].extend(group)
            labels[i].extend((f"tp {t}", *next(flat, ())) for _ in group)
    first = cases[0][1]
    tp_note = f"{tp} as stated" if tp else "the fastest of " + ", ".join(map(str, tps))
    pp_note = f"{pp} as stated" if pp else "1 (no pipeline)"
    note = (f"plan not stated (LoRA fine-tuning, which the plan search does not price): "
            f"tp {tp_note}, pp {pp_note}")
    return MappedCase(case_id=first.case_id, source=first.source, framework=first.framework,
                      candidates=tuple(tuple(g) for g in groups),
                      candidate_notes=tuple(lab for grp in labels for lab in grp),
                      measurement=first.measurement, assumptions=(*first.assumptions, note),
                      stated=stated_cells(row))


def _default_batch(row: dict[str, str], n: int, tp: int | None, pp: int | None,
                   cp: int | None, notes: list[str]) -> int:
    """Sequences per step of a row that gives no batch: one sequence per GPU, raised to the
    fewest whole micro-batches per data-parallel replica when the row states its micro-batch
    size (a batch the framework can split: ``micro_batch_size × dp`` divides it), in groups
    of ``pp`` when the row states an interleaved schedule (Megatron-Core's interleaved
    schedule runs micro-batches in groups of ``pp``)."""
    dp = _stated(row, "dp")
    if dp is None and tp and pp:
        dp = n // (tp * pp * (cp or 1)) or None
    mbs = int_cell(row, "micro_batch_size")
    gbs = n
    if dp and mbs:
        count = max(1, -(-n // (mbs * dp)))
        depth, _ = read_interleave(row.get("vpp", "").lower())
        grouped = bool(pp and pp > 1 and depth and depth > 1)
        if grouped and pp and count % pp:
            count += pp - count % pp
        gbs = count * mbs * dp
    if gbs == n:
        notes.append(f"global batch not given: one sequence per GPU ({n})")
    else:
        notes.append(f"global batch not given: {gbs} sequences, the fewest whole micro-batches "
                     f"of {mbs} per data-parallel replica ({count}) holding one sequence per "
                     "GPU" + (f", in groups of pp {pp} (interleaved schedule)" if grouped
                              else ""))
    return gbs


def _searched_case(row: dict[str, str], fw: str, notes: list[str], measurement: Measurement,
                   model: ModelSpec, gpu: GpuSpec, topo: Any, n: int, plan: dict[str, Any],
                   stated: dict[str, Any]) -> MappedCase:
    """A row that does not state TP or PP: the fastest feasible plan the search finds with
    every stated setting (and the framework's fixed settings) pinned."""
    fixed: dict[str, Any] = {k: v for k, v in (("tp", stated["tp"]), ("pp", stated["pp"]),
                                                ("cp", stated["cp"]), ("ep", stated["ep"]))
                             if v is not None}
    dp = _stated(row, "dp")
    if dp:
        fixed["dp"] = dp
    if stated["sp"] is not None:
        fixed["sequence_parallel"] = stated["sp"]
    elif _before_sequence_parallel(row):
        fixed["sequence_parallel"] = False
        notes.append(f"sequence parallel not stated: off {SP_ERA_NOTE}")
    fixed["zero_stage"] = stated["zero"]
    if "pp" not in fixed and not pipeline_allowed(fw, stated["zero"], notes):
        fixed["pp"] = 1
    depth, _ = read_interleave(row.get("vpp", ""))
    if depth is not None:
        fixed["vpp"] = depth
    elif fw in NON_INTERLEAVED or stated["schedule"] not in (None, "interleaved"):
        fixed["vpp"] = 1
    elif fw == "torchtitan":
        fixed["vpp"] = TORCHTITAN_LOOPED_STAGES
    mbs = _stated(row, "micro_batch_size")
    if mbs:
        fixed["micro_batch_size"] = mbs
    rc = stated_recompute(row.get("activation_recompute", ""), row.get("notes", ""))
    if rc is not None:
        fixed["recompute"] = rc
    if read_recompute_layers(row.get("activation_recompute", "")) is not None:
        notes.append("recompute layer count stated but TP/PP searched: the search recomputes "
                      "every layer (its estimator does not mix recomputed and kept layers)")
    # the framework's fixed switches as the stated-plan path sets them (spec defaults where
    # the framework sets none); TP-communication overlap is left to the search where the
    # framework has it (Megatron-Core userbuffers, Hopper and later), as it depends on the TP
    defaults = ParallelismSpec()
    fixed.update(overlap_grad_reduce=defaults.overlap_grad_reduce,
                 overlap_param_gather=defaults.overlap_param_gather,
                 tp_comm_overlap=False)
    fixed.update(_row_settings(row, fw, 2, True, gpu, stated["zero"], plan["dtype"], notes))
    if fixed["tp_comm_overlap"]:
        del fixed["tp_comm_overlap"]
    base = TrainingRun(model=model, gpu=gpu, topology=topo, num_gpus=n,
                       parallel=ParallelismSpec.parse({**plan, "zero_stage": stated["zero"]},
                                                      f"case {row['case_id']}"))
    checked = True
    try:
        run, chosen = choose_with_batch(base, fixed, n, notes)
    except (InfeasiblePlan, SpecError) as exc:
        found = _fit_in_doubt(base, fixed, n, notes) if "out of memory" in str(exc) else None
        if found is None:
            raise Unsupported(f"tp/pp not stated and no plan fits: {exc}") from None
        run, chosen = found
        checked = False
    return MappedCase(case_id=row["case_id"], source=row.get("source", ""), framework=fw,
                      candidates=((run,),), candidate_notes=((),), measurement=measurement,
                      assumptions=(*notes, *chosen), stated=stated_cells(row),
                      memory_checked=checked)


def _fit_in_doubt(base: TrainingRun, fixed: dict[str, Any], n: int,
                  notes: list[str]) -> tuple[TrainingRun, tuple[str, ...]] | None:
    """The fastest plan that fits the smallest of :data:`MEMORY_DOUBT_FACTORS` times the
    part's memory, as a run on the real part (to be timed without the HBM check), noted;
    ``None`` when none fits even the largest."""
    gpu = base.gpu
    for factor in MEMORY_DOUBT_FACTORS:
        bigger = gpu.model_copy(update={
            "hbm_capacity_GB": gpu.hbm_capacity_GB * factor,
            "hbm_total_MiB": None if gpu.hbm_total_MiB is None else gpu.hbm_total_MiB * factor})
        tried: list[str] = []
        try:
            run, chosen = choose_with_batch(base.model_copy(update={"gpu": bigger}), fixed, n,
                                            tried)
        except (InfeasiblePlan, SpecError):
            continue
        notes.extend(tried)
        notes.append(f"no plan fits codesign's memory estimate in {gpu.memory_bytes / GiB:.0f} "
                     f"GiB; the measured run fitted: the fastest plan that fits {factor:g}x "
                     "that, timed without the HBM check (the estimate is in doubt: optimizer "
                     "and master-weight precision, offloading)")
        return run.model_copy(update={"gpu": gpu}), chosen
    return None


def _zero_stage(cell: str, fw: str, notes: list[str]) -> int:
    """The ZeRO stage a row's ``zero_fsdp`` cell means for framework ``fw``
    (:func:`~codesign.validation.prose.read_zero`; :data:`DEFAULT_ZERO` when not stated)."""
    reading = read_zero(cell)
    if reading is None:
        default = DEFAULT_ZERO.get(fw, 1)
        notes.append(f"ZeRO not stated: stage {default} ({fw} default)")
        return default
    stage, note = reading
    if stage is None:
        # 'FSDP: 0' in NeMo/Megatron-Bridge tables means FSDP off; those recipes keep the
        # distributed optimizer (ZeRO-1). Megatron-LM 2021-22 had no distributed optimizer.
        if fw == "megatron-core":
            notes.append(f"{note}; distributed optimizer (ZeRO-1, framework default)")
            return 1
        notes.append(note)
        return 0
    if fw == "llama3" and stage == 3:
        notes.append("FSDP keeping parameters after forward (Llama 3): ZeRO-2 semantics")
        return 2
    notes.append(note)
    return stage


#: FlashAttention (Dao et al., arXiv 2205.14135, May 2022) reached the training frameworks in
#: 2023 (Megatron-Core, NeMo, llm-foundry, DeepSpeed via Megatron-DeepSpeed); runs published
#: up to 2022 (OPT, BLOOM, GPT-NeoX, MT-NLG) used unfused softmax attention
FLASH_FROM_YEAR = 2023
#: first year of sources whose runs had sequence parallelism: Korthikanti et al. introduced it
#: in May 2022 (arXiv 2205.05198, Megatron-LM 3.0); runs published in 2022 or before trained
#: without it unless they say so (MT-NLG, OPT, BLOOM)
SP_FROM_YEAR = 2023
SP_ERA_NOTE = (f"(source dated before sequence parallelism reached the frameworks, "
               f"{SP_FROM_YEAR})")


def _before_sequence_parallel(row: dict[str, str]) -> bool:
    """Whether the row's source is dated before :data:`SP_FROM_YEAR`."""
    year = era_year(row)
    return year is not None and year < SP_FROM_YEAR


def source_year(row: dict[str, str]) -> int | None:
    """The first year (2015-2039) the row's source names (alone or as a yyyymm stamp, as in
    a file name ``..._202412_...``), or ``None``."""
    m = re.search(r"(?<![\d.])(20[1-3]\d)(?:0[1-9]|1[0-2])?(?![\d.])", row.get("source", ""))
    return int(m.group(1)) if m else None


def era_year(row: dict[str, str]) -> int | None:
    """The year the row's software dates from: the year its source names
    (:func:`source_year`), else a NeMo container's ``yy.mm`` release ("NeMo 24.07" -> 2024),
    else 2025 for a Megatron-Bridge source (NVIDIA-NeMo/Megatron-Bridge, first released in
    2025); ``None`` when nothing dates it."""
    year = source_year(row)
    if year is not None:
        return year
    release = nemo_release(row)
    if release is not None:
        return 2000 + release[0]
    text = row_text(row, ("source", "source_location", "notes"))
    return 2025 if "megatron-bridge" in text else None


def nemo_release(row: dict[str, str]) -> tuple[int, int] | None:
    """The ``(yy, mm)`` of the NeMo container a row names, either way round ("NeMo 24.07",
    "'25.11 NeMo Container'"); ``None`` when it names none."""
    text = row_text(row, ("source", "source_location", "notes"))
    m = (re.search(r"nemo(?:\s+framework)?\s*(?:container\s*)?v?(\d\d)\.(0[1-9]|1[0-2])\b",
                   text)
         or re.search(r"\b(\d\d)\.(0[1-9]|1[0-2])(?:\.\d+)?\s+nemo\b", text))
    return (int(m.group(1)), int(m.group(2))) if m else None


#: the first NeMo container whose performance tables Megatron-Bridge's performance scripts
#: produced (Megatron-Bridge docs/performance-summary-archive.md starts at "25.09 NeMo
#: Container"; the scripts' first commit, 568b3a3e, Aug 2025)
MB_PERF_FROM = (25, 9)


def _gradient_settings(row: dict[str, str], fw: str, notes: list[str]) -> dict[str, Any]:
    """The gradient reduction dtype: as the row's prose states it
    (:func:`~codesign.validation.prose.read_grad_reduce_in_fp32`); else bf16 for a
    Megatron-Bridge performance benchmark (its scripts set ``grad_reduce_in_fp32`` False in
    every recipe: ``_benchmark_common`` and ``_perf_precision``, perf_recipes/_common.py, and
    the YAML configs of the first scripts, "mixed_precision: grad_reduce_in_fp32: false");
    else the framework's fp32 (Megatron-LM: "accumulate and all-reduce gradients in fp32 for
    bfloat16 data type")."""
    stated = read_grad_reduce_in_fp32(_prose(row))
    if stated is not None:
        notes.append(f"gradients reduced in {'fp32' if stated else 'bf16'} (as the row states)")
        return {"grad_reduce_in_fp32": stated}
    if mb_benchmark(row, fw):
        notes.append("gradients accumulated and reduced in bf16 (Megatron-Bridge performance "
                     "recipes set grad_reduce_in_fp32 False)")
        return {"grad_reduce_in_fp32": False}
    return {}


def mb_benchmark(row: dict[str, str], fw: str) -> bool:
    """Whether the row is a Megatron-Bridge performance benchmark: a Megatron-Core run from a
    performance table that names Megatron-Bridge or a NeMo container from
    :data:`MB_PERF_FROM` on."""
    where = row_text(row, ("source", "source_location"))
    release = nemo_release(row)
    return fw == "megatron-core" and "perf" in where and (
        "megatron-bridge" in where or (release is not None and release >= MB_PERF_FROM))


def _era_settings(row: dict[str, str], fw: str, notes: list[str]) -> dict[str, Any]:
    """Settings a run's date fixes: no fused flash attention before :data:`FLASH_FROM_YEAR`
    (Megatron-LM 2021-22 rows already have it off)."""
    year = era_year(row)
    if fw == "megatron-2021" or year is None or year >= FLASH_FROM_YEAR:
        return {}
    notes.append(f"source dated {year}: unfused softmax attention (FlashAttention reached the "
                 f"frameworks in {FLASH_FROM_YEAR})")
    return {"flash_attention": False}


def _row_settings(row: dict[str, str], fw: str, tp: int, sp: bool, gpu: GpuSpec, zero: int,
                  dtype: str, notes: list[str]) -> dict[str, Any]:
    """The plan settings a row's framework, sharding, era and attention kernel fix, merged in
    that order (later readings win), for a stated plan and for a searched one alike
    (``dtype``: the plan's training precision)."""
    return {**_framework_settings(fw, tp, sp, gpu, dtype, notes),
            **_sharding_settings(row, fw, zero, notes),
            **_era_settings(row, fw, notes),
            **_attention_settings(row, fw, notes),
            **_kernel_settings(row, notes),
            **_layout_settings(row, notes),
            **_gradient_settings(row, fw, notes),
            **_tp_overlap_settings(row, fw, tp, sp, notes),
            **_remat_settings(row, fw, notes)}


def _remat_settings(row: dict[str, str], fw: str, notes: list[str]) -> dict[str, Any]:
    """What selective recompute re-runs, where the row names Megatron-Core recompute modules
    (:func:`~codesign.validation.prose.read_recompute_modules`) or a JAX / MaxText dot-saving
    policy (:func:`~codesign.validation.prose.read_remat_policy`: ``remat_policy: minimal``
    keeps every projection's output, ``save_dot_except_mlpwi`` re-runs the MLP input GEMMs,
    ``save_dot_except_mlp`` the whole MLP); a MaxText row's unnamed selective recompute is
    ``minimal``'s, the dot-saving kind its policies share. Applies when the recompute the
    run gets is selective (stated, or chosen to fit)."""
    text = row_text(row, ("activation_recompute", "notes", "other_measured"), lower=False)
    stated = read_remat_policy(text)
    modules = read_recompute_modules(text) if stated is None else None
    if modules is not None:
        notes.append(f"selective recompute, where it applies, re-runs the Megatron-Core "
                     f"modules the row names: {', '.join(modules)}")
        return {"selective_recompute": "modules", "recompute_modules": modules}
    if stated is not None:
        notes.append(f"selective recompute, where it applies, re-runs every operator but the "
                     f"GEMMs the row's remat_policy (or its words) saves ({stated})")
        return {"selective_recompute": stated}
    if fw == "maxtext":
        notes.append("selective recompute, where it applies, is MaxText's dot-saving "
                     "remat_policy minimal: every projection's output kept, the rest re-run")
        return {"selective_recompute": "gemm_outputs"}
    return {}


def _tp_overlap_settings(row: dict[str, str], fw: str, tp: int, sp: bool,
                         notes: list[str]) -> dict[str, Any]:
    """Tensor-parallel communication overlap as the row's prose states it
    (:func:`~codesign.validation.prose.read_tp_overlap`), over the framework's default.

    Stated off: the collectives block. Stated on: overlapped where codesign models the
    mechanism, Megatron-Core's Transformer Engine userbuffers (``--tp-comm-overlap``, forward
    and backward GEMMs: the ``next`` / ``prev`` overlap rules of
    :func:`codesign.workload.step_program.wire_pass`; Megatron requires sequence parallelism
    for it).
    Other frameworks' asynchronous TP (torchtitan's micro-pipelined Async TP) keeps blocking
    collectives, recorded as an assumption: its published gains are forward-pass gains ("up to
    ~20% forward pass speedup and ~8% E2E speedup in Llama3 70B", PyTorch dev-discuss
    "Introducing Async Tensor Parallelism in PyTorch", 2024), which the userbuffers rule
    would overstate."""
    stated = read_tp_overlap(_prose(row))
    if stated is None or tp <= 1:
        return {}
    if not stated:
        notes.append("TP communication not overlapped with the GEMMs (as the row states)")
        return {"tp_comm_overlap": False}
    if fw == "megatron-core" and sp:
        notes.append("TP communication overlapped with the GEMMs (as the row states)")
        return {"tp_comm_overlap": True}
    why = ("Megatron overlaps them only under sequence parallelism" if fw == "megatron-core"
           else "asynchronous TP outside Megatron: its published gains are forward-pass "
                "only, ~8% end to end")
    notes.append(f"TP communication overlap stated but the collectives priced blocking ({why})")
    return {}


def _layout_settings(row: dict[str, str], notes: list[str]) -> dict[str, Any]:
    """A pipeline layout that counts the LM head and loss as layers of the last stage, as the
    row's prose states it (:func:`~codesign.validation.prose.read_loss_stage`); unstated: the
    layers split evenly (Megatron-Core's default; NVIDIA's recipes set a layout only for some
    models, so it is not assumed)."""
    if read_loss_stage(_prose(row)):
        notes.append("pipeline layout counts the LM head and loss as layers of the last stage "
                     "(as the row states)")
        return {"balance_loss_stage": True}
    return {}


def _kernel_settings(row: dict[str, str], notes: list[str]) -> dict[str, Any]:
    """Eager or compiled pointwise operators, as the row's prose states
    (:func:`~codesign.validation.prose.read_pointwise_kernels`); unstated: fused kernels (the
    frameworks' fused norms and activations, or torch.compile in tuned benchmarks)."""
    stated = read_pointwise_kernels(_prose(row))
    if stated == "eager":
        notes.append("pointwise operators in PyTorch eager mode, one kernel per op (as the "
                     "row states)")
        return {"pointwise_kernels": "eager"}
    return {}


def _attention_settings(row: dict[str, str], fw: str, notes: list[str]) -> dict[str, Any]:
    """The attention implementation: the one the row's prose names
    (:func:`~codesign.validation.prose.read_attention_kernel`), else the framework's: MosaicML
    llm-foundry's benchmark tables ran ``attn_impl: triton`` (``scripts/train/benchmarking/
    submit_benchmarks.py``: ``--attn_impl`` default 'triton' at the table commits 061f2c7c
    and 5e85bd62d; the ``mpt-*.yaml`` recipes say the same), FP8 runs included: the
    ``flash-attn==1.0.7`` the script installs for them is Transformer Engine v0.10's
    dependency, FP8 stays inside TE's Linear layers and the attention inputs remain bf16,
    which the Triton kernel takes (``check_valid_inputs``). torchtitan calls PyTorch's
    ``scaled_dot_product_attention`` (``torchtitan/models/llama3/model.py``), whose flash
    backend is FlashAttention-2. Other frameworks (Transformer Engine's cuDNN / FlashAttention-3
    on Hopper, MaxText's own kernels): the part's fastest kernel."""
    stated = read_attention_kernel(_prose(row))
    if stated == "unfused":
        notes.append("unfused softmax attention (as the row states)")
        return {"flash_attention": False}
    if stated is not None:
        notes.append(f"attention kernel {stated} (as the row states)")
        return {"flash_attention": True, "attention_kernel": stated}
    if fw == "torchtitan":
        notes.append("attention kernel fa2 (torchtitan: PyTorch scaled_dot_product_attention, "
                     "its FlashAttention-2 backend)")
        return {"attention_kernel": "fa2"}
    if fw == "mosaicml":
        notes.append("attention kernel triton (llm-foundry benchmark default: attn_impl triton)")
        return {"attention_kernel": "triton"}
    return {}


def _framework_settings(fw: str, tp: int, sp: bool, gpu: GpuSpec, dtype: str,
                        notes: list[str]) -> dict[str, Any]:
    """Plan settings a framework fixes: Megatron-LM 2019-22 had no flash attention, no
    overlap and scatter/gathered, blocking pipeline sends; Megatron-Core overlaps TP
    communication with GEMMs where its userbuffers run: Hopper-class and later GPUs (the
    parts with FP8 tensor cores), not the A100 or older (A800, V100), and not in NVFP4
    training (:data:`NVFP4_TP_OVERLAP_NOTE`); Meta's Llama 3 stack
    places PP inside DP; DeepSpeed's bf16 pipelines accumulate gradients by a pass per
    micro-batch (:data:`DEEPSPEED_BF16_NOTE`), and its pipeline engine sends each stage's
    output partitioned over the TP ranks, all-gathered at the receiver, and blocking, as
    Megatron-LM 2021-22 did (``deepspeed/runtime/pipe/engine.py`` ``is_pipe_partitioned``,
    ``pipe/p2p.py`` ``send``); torchtitan's selective activation
    checkpointing is PyTorch's op-level policy
    (``activation_checkpoint.selective_ac_option = "op"`` in its Llama configs: every second
    GEMM recomputed)."""
    if fw == "torchtitan":
        notes.append("selective recompute, where it applies, is torchtitan's op-level "
                     "checkpointing: every second GEMM and the memory-bound operators re-run")
        return {"selective_recompute": "alternate_gemms"}
    if fw == "megatron-2021":
        return dict(flash_attention=False, overlap_grad_reduce=False,
                    overlap_param_gather=False, pipeline_scatter_gather=True, overlap_p2p=False)
    if fw == "megatron-core":
        overlap = tp > 1 and "fp8" in gpu.peak_tflops and sp
        if overlap and dtype == "fp4":
            notes.append(NVFP4_TP_OVERLAP_NOTE)
            return {"tp_comm_overlap": False}
        return {"tp_comm_overlap": overlap}
    if fw == "deepspeed":
        # the pipeline engine's sends: partitioned over the model-parallel ranks and
        # all-gathered at the receiver (``is_pipe_partitioned = is_model_parallel``), and
        # blocking (``p2p.send``: "Doesn't support async_op true")
        ds: dict[str, Any] = dict(pipeline_scatter_gather=True, overlap_p2p=False)
        if dtype == "bf16":
            notes.append(DEEPSPEED_BF16_NOTE)
            ds["grad_accum_pass"] = True
        return ds
    if fw == "llama3":
        # "the order of parallelism dimensions, [TP, CP, PP, DP], is optimized for network
        # communication": PP inside DP, so a pipeline stays in one pod and only DP crosses
        # the tapered layer (Llama 3 report, arXiv 2407.21783, Sec. 3.3.2)
        return {"placement_order": ("tp", "cp", "ep", "pp", "dp")}
    return {}


#: Megatron-Core's userbuffers TP overlap is off in NVFP4 training: Megatron-Bridge's NVFP4
#: performance recipes set ``tp_comm_overlap = False`` on every GPU, stating "NVFP4's
#: fp4_param_gather path is incompatible with TP comm overlap, so it is disabled here"
#: (``src/megatron/bridge/perf_recipes/qwen/b200/qwen3_moe.py``; likewise the Llama 3 70B and
#: Llama 3.1 405B NVFP4 recipes for B200, B300, GB200 and GB300)
NVFP4_TP_OVERLAP_NOTE = ("TP communication not overlapped with the GEMMs: Megatron-Core's "
                         "userbuffers overlap is incompatible with NVFP4 training (its NVFP4 "
                         "recipes disable it)")
#: DeepSpeed runs bf16 pipelines through its BF16_Optimizer (bf16 with pipeline parallelism
#: selects it: ``_do_optimizer_sanity_check`` in ``deepspeed/runtime/engine.py``; before it,
#: PR #1801 of April 2022, bf16 with pipelines did not run), which accumulates each
#: micro-batch's gradients by a separate pass (``ParallelismSpec.grad_accum_pass``)
DEEPSPEED_BF16_NOTE = ("bf16 pipelines: DeepSpeed's BF16_Optimizer zeroes the bf16 gradients "
                       "before each micro-batch's backward and adds them into fp32 gradients "
                       "after it (clear_lp_grads / update_hp_grads)")
#: frameworks whose own sharding a ZeRO-3 row means (FSDP / FSDP2, MaxText's fsdp axis,
#: Meta's stack): their ZeRO-3 is never DeepSpeed's
_OWN_SHARDING = ("torchtitan", "mosaicml", "maxtext", "llama3")
#: frameworks whose FP8 runs use torchao's ``Float8Linear``: its recipes are dynamic
#: ("TENSORWISE: Default, dynamic per-tensor scaling with the cuBLAS tensorwise kernel";
#: "ROWWISE: Dynamic rowwise scaling", ``torchao.float8.Float8LinearRecipeName``), i.e. an
#: amax pass over the tensor before its cast, as Transformer Engine's current scaling
DYNAMIC_FP8_FRAMEWORKS = ("torchtitan",)


def deepspeed_zero3(row: dict[str, str], fw: str, zero: int) -> bool:
    """Whether the row's full sharding (ZeRO stage 3) is DeepSpeed's: the row names DeepSpeed,
    or writes the stage in DeepSpeed's vocabulary ("ZeRO-3", "ZeRO stage 3") rather than
    FSDP's, in a framework without its own sharding (a Megatron-LM paper's ZeRO-3 baseline
    is a DeepSpeed run, Narayanan et al. 2021 Sec. 5.2)."""
    if zero != 3 or fw in _OWN_SHARDING:
        return False
    cell = row.get("zero_fsdp", "").lower()
    text = " ".join((cell, row.get("notes", ""), row.get("source", ""))).lower()
    return "deepspeed" in text or ("zero" in cell and "fsdp" not in cell)


def _sharding_settings(row: dict[str, str], fw: str, zero: int,
                       notes: list[str]) -> dict[str, Any]:
    """Plan settings DeepSpeed fixes. Below ZeRO-3 its gradient reduction and parameter
    gathers do not overlap compute (``overlap_comm`` defaults to ``stage == 3``,
    ``DeepSpeedZeroConfig``) unless the row says so. At ZeRO-3 its parameter all-gathers and
    gradient reduce-scatters are single collectives over the whole data-parallel group, not the
    two-level (intra-node, then per-rail) scheme NCCL-aware FSDP stacks get from ``auto``;
    the two-level forms came later and are opt-in (MiCS hierarchical gather,
    ``mics_hierarchical_params_gather``; ZeRO++ hpZ, ``zero_hpz_partition_size``, Wang et al.
    2023, arXiv 2306.10209, whose Sec. 3 counts the full model size crossing nodes per
    ZeRO-3 pass); a row that names one of them, or the SageMaker model parallel library's
    sharded data parallelism built on MiCS (``prose.read_hierarchical_zero3``), gathers in
    two levels. A recomputed layer's forward gathers its parameters again
    (``regather_for_recompute``). Gradient reduction overlaps the backward, and so do the
    parameter gathers, in issue order on the group's one queue (``param_gather_queue``
    "group"): ZeRO-3 fetches a module's parameters from the module's own hook, after the
    reduce-scatters of the modules before it were issued, and PyTorch's ProcessGroupNCCL runs
    one group's collectives on one NCCL stream per device. The 2021 releases synchronized
    the device before each gather ("each all_gather calls torch.cuda.synchronize()",
    DeepSpeed PR #1188, June 2021); that holds the host until the earlier work is done but
    still issues the next module's gather before the current module's compute, so a large
    module's gather overlaps compute in those releases too."""
    if fw == "deepspeed" and zero < 3:
        if read_overlap_comm(_prose(row)):
            notes.append("DeepSpeed overlap_comm on (as the row states)")
            return {}
        notes.append(f"DeepSpeed ZeRO-{zero}: gradients reduced and parameters gathered after "
                     "the backward, not overlapped (overlap_comm defaults to false below "
                     "stage 3; the pipeline engine reduces after its last micro-batch)")
        return {"overlap_grad_reduce": False, "overlap_param_gather": False}
    if not deepspeed_zero3(row, fw, zero):
        return {}
    reduce_overlaps = read_overlap_comm(_prose(row)) is not False
    two_level = read_hierarchical_zero3(f"{row.get('zero_fsdp', '')} {_prose(row)}")
    notes.append("ZeRO-3 is DeepSpeed's: parameter all-gathers and gradient reduce-scatters "
                 + ("are two-level, inside the node then across nodes per rail (MiCS "
                    "hierarchical communication, as the row names it)" if two_level else
                    "are flat rings over the whole data-parallel group (every GPU's share "
                    "crosses its own NIC)")
                 + "; a recomputed layer gathers its parameters again; "
                 "gathers overlap compute, queued in issue order on the group's one NCCL "
                 "stream (a module's gather waits behind the reduce-scatters issued before "
                 "it); gradient reduce-scatters "
                 + ("overlap the backward (overlap_comm, the stage-3 default)" if reduce_overlaps
                    else "block the backward (overlap_comm off, as the row states)"))
    return {"collective_algorithm": "auto" if two_level else "ring",
            "overlap_grad_reduce": reduce_overlaps,
            "overlap_param_gather": True, "regather_for_recompute": True,
            "param_gather_queue": "group"}


#: torchtitan's last year whose pipeline default was a micro-batch count equal to the number
#: of pipeline stages (``experimental.pipeline_parallel_microbatches``, "defaults to the
#: number of pipeline stages", ``torchtitan/config_manager.py`` at 9dec370, Dec 2024); later
#: versions split the local batch into micro-batches of
#: ``parallelism.pipeline_parallel_microbatch_size`` (default 1)
TORCHTITAN_STAGE_COUNT_UNTIL = 2024


def _micro_batch_sizes(row: dict[str, str], fw: str, gbs: int, dp: int, pp: int,
                       notes: list[str], n: int = 0) -> list[int]:
    """The row's micro-batch size, or when not given every size of 1, 2, 4, 8 dividing the
    per-replica batch (a tuned benchmark runs the fastest; recorded per run).

    torchtitan states a *local* batch (per data-parallel rank); under pipeline parallelism
    the schedule splits it further (:data:`TORCHTITAN_STAGE_COUNT_UNTIL`), so a torchtitan
    row whose micro-batch is its whole per-replica batch with PP > 1 is read that way.

    MaxText states a *per-device* batch: "global_batch_size = per_device_batch_size *
    num_devices" (``src/maxtext/configs/base.yml``), one micro-batch per step
    (``gradient_accumulation_steps: 1``), so a MaxText row without PP whose global batch is its
    micro-batch times its devices runs the whole per-replica batch (``per-device x tp x cp``
    sequences) at once. ``n``: the row's device count."""
    given = int_cell(row, "micro_batch_size")
    if given is not None and fw == "torchtitan" and pp > 1 and dp and given * dp == gbs:
        year = source_year(row)
        if year is not None and year <= TORCHTITAN_STAGE_COUNT_UNTIL and given % pp == 0:
            notes.append(f"micro_batch_size {given} is torchtitan's local batch: split into "
                         f"{pp} pipeline micro-batches of {given // pp} (torchtitan {year}: "
                         "one per pipeline stage)")
            return [given // pp]
        notes.append(f"micro_batch_size {given} is torchtitan's local batch: pipeline "
                     "micro-batches of 1 (torchtitan pipeline_parallel_microbatch_size "
                     "default)")
        return [1]
    if (given is not None and fw == "maxtext" and pp == 1 and dp and n and n > dp
            and gbs == given * n):
        per_replica = gbs // dp
        notes.append(f"micro_batch_size {given} is MaxText's per_device_batch_size: each "
                     f"data-parallel replica of {n // dp} devices runs {per_replica} "
                     "sequences at once (global batch = per-device batch x devices, no "
                     "gradient accumulation)")
        return [per_replica]
    if given is not None:
        return [given]
    per_replica = gbs // dp if dp else 0
    sizes = [m for m in (1, 2, 4, 8) if per_replica and per_replica % m == 0] or [1]
    notes.append(f"micro-batch size not given: the fastest of {', '.join(map(str, sizes))}")
    return sizes


#: torchtitan's model chunks per pipeline rank for a multi-stage (looped) schedule when the
#: layers per stage are not set: "stages_per_rank = 1 if is_single_stage_schedule else 2"
#: (``torchtitan/distributed/pipeline_parallel.py``; ``num_stages_per_rank = 2`` in
#: ``torchtitan/parallelisms/pipelining_utils.py`` at 9dec370, Dec 2024)
TORCHTITAN_LOOPED_STAGES = 2

#: the schedule torchtitan runs when none is named: ``pipeline_parallel_schedule = "1F1B"``
#: (``torchtitan/config/configs.py``; ``config_manager.py`` at 9dec370)
TORCHTITAN_DEFAULT_SCHEDULE = "1f1b"

#: the cells whose prose may name a pipeline schedule
_SCHEDULE_CELLS = ("vpp", "pp", "notes")


def row_schedule(row: dict[str, str], fw: str) -> tuple[str | None, str]:
    """The pipeline schedule a row names in its vpp, pp or notes cell
    (:func:`~codesign.validation.prose.read_pipeline_schedule`), else torchtitan's default
    (:data:`TORCHTITAN_DEFAULT_SCHEDULE`) for a torchtitan row, else ``None`` (tuned), with
    where it comes from."""
    named = read_pipeline_schedule(row_text(row, _SCHEDULE_CELLS))
    if named is not None:
        return named, "as the row states"
    if fw == "torchtitan":
        return TORCHTITAN_DEFAULT_SCHEDULE, "torchtitan's default pipeline_parallel_schedule"
    return None, ""


def _interleaving_depths(row: dict[str, str], fw: str, num_layers: int, pp: int, n_mb: int,
                         schedule: tuple[str | None, str], notes: list[str]) -> list[int]:
    """The row's interleaving depth, or when not given every depth the schedule allows (the
    fastest is kept, as a user of the framework tunes it; recorded per candidate). A row that
    names a single-stage schedule (1F1B, GPipe, ZB-H1) runs none; torchtitan runs its own
    defaults (:data:`TORCHTITAN_DEFAULT_SCHEDULE`, :data:`TORCHTITAN_LOOPED_STAGES`).
    ``schedule``: :func:`row_schedule`'s reading of the row."""
    text = row.get("vpp", "").lower()
    given, _ = read_interleave(text)  # "4", "vpp=5", "virtual pipeline 6"
    if given:
        return [given]
    if not (pp > 1 and ("interleaved" in text or not text or "not stated" in text)):
        return [1]
    named, source = schedule
    if named not in (None, "interleaved"):
        notes.append(f"pipeline schedule {named} ({source}): no interleaving")
        return [1]
    if fw in NON_INTERLEAVED:
        notes.append(f"interleaving depth not given: none ({fw} has no interleaved schedule)")
        return [1]
    if fw == "torchtitan":
        notes.append(f"interleaving depth not given: {TORCHTITAN_LOOPED_STAGES} (torchtitan's "
                     "default stages per rank for a multi-stage schedule)")
        return [TORCHTITAN_LOOPED_STAGES]
    vpps = [v for v in range(2, 9) if num_layers >= pp * v and n_mb % pp == 0
            and _interleaving_allowed(fw, num_layers, pp, v)] or [1]
    if named is None:  # interleaving not named (a vpp cell saying so names it): 1 tried too
        vpps = [1, *[v for v in vpps if v > 1]]
    notes.append(f"interleaving depth not given: the fastest of vpp {', '.join(map(str, vpps))}")
    return vpps


def map_rows(rows: Iterable[dict[str, str]], mapper: Callable[[dict[str, str]], T],
             ) -> Iterator[tuple[dict[str, str], T | str]]:
    """Each row with ``mapper``'s case, or the reason it cannot be simulated: a cell the
    reading refuses, a value the specs refuse (e.g. seq_len 0, a hidden size the heads do not
    divide), or any other failure of the mapping, named by its type: one row never ends the
    run (training and inference rows alike)."""
    for row in rows:
        try:
            yield row, mapper(row)
        except (Unsupported, SpecError) as exc:
            yield row, str(exc)
        except ValidationError as exc:
            yield row, format_validation_error(exc, exc.title, f"case {row.get('case_id', '')}")
        except Exception as exc:  # a failing row is a row, never the end of the run
            yield row, f"{type(exc).__name__}: {exc}"


def iter_cases(path: Path) -> Iterator[tuple[dict[str, str], MappedCase | str]]:
    """Each row with its mapped case, or the reason it cannot be simulated (:func:`map_rows`)."""
    return map_rows(read_rows(path), map_row)
