"""Rules that turn a training row's stated plan into a runnable one where the row leaves a
gap: a framework's own TP/PP defaults, a published batch that splits over no replica count,
MoE parallel folding, and the row's plan cells named when its run does not fit."""

from __future__ import annotations

import re
from typing import Any

from codesign.errors import InfeasiblePlan
from codesign.search.choose import choose_plan
from codesign.specs.run import TrainingRun
from codesign.validation.prose import nearby_batches, read_lora

#: TP/PP degrees a framework runs when a row does not state them: llm-foundry trains with
#: Composer's FSDP only (no pipeline; its ``tp_config`` is opt-in), and torchtitan's
#: ``Parallelism`` config defaults ``tensor_parallel_degree = 1`` and
#: ``pipeline_parallel_degree = 1`` (torchtitan/config/job_config.py); PyTorch FSDP stacks
#: (Metaseq, fairscale) add no pipeline either
PLAN_DEFAULTS: dict[str, dict[str, int]] = {"mosaicml": {"tp": 1, "pp": 1},
                                            "torchtitan": {"tp": 1, "pp": 1}}


def plan_default(fw: str, col: str, stated: int | None, notes: list[str]) -> int | None:
    """``stated``, or when ``None`` the framework's own default degree for ``col``
    (:data:`PLAN_DEFAULTS`; ``None`` where it has none and the search decides)."""
    if stated is not None or col not in PLAN_DEFAULTS.get(fw, {}):
        return stated
    value = PLAN_DEFAULTS[fw][col]
    notes.append(f"{col} not stated: {value} ({fw} default)")
    return value


#: (lowest ZeRO stage, the pipeline's name) of a framework that runs no pipeline from that
#: stage on: DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3
#: (deepspeed/runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
#: parallelism")
NO_PIPELINE_FROM_ZERO: dict[str, tuple[int, str]] = {
    "deepspeed": (2, "DeepSpeed's pipeline engine")}


def pipeline_allowed(fw: str, zero: int, notes: list[str]) -> bool:
    """Whether framework ``fw`` can pipeline at ZeRO stage ``zero``
    (:data:`NO_PIPELINE_FROM_ZERO`); when it cannot, a searched plan takes PP 1 (noted)."""
    lowest, engine = NO_PIPELINE_FROM_ZERO.get(fw, (4, ""))
    if zero < lowest:
        return True
    notes.append(f"pp not stated: 1 ({engine} does not run ZeRO stage {zero})")
    return False


#: the columns that fix a run's plan and memory, named when a row's run does not fit
PLAN_COLUMNS = ("num_gpus", "seq_len", "global_batch_size", "micro_batch_size", "tp", "pp",
                "dp", "cp", "ep", "vpp", "zero_fsdp", "activation_recompute")


def stated_cells(row: dict[str, str]) -> tuple[str, ...]:
    """``column='cell'`` for every :data:`PLAN_COLUMNS` cell the row fills (a run that does
    not fit is reported with these, the settings that stopped it)."""
    return tuple(f"{col}={row[col]!r}" for col in PLAN_COLUMNS
                 if row.get(col, "").strip() and not re.fullmatch(
                     r"(?i)not stated|unknown|\?|-|n/?a", row[col].strip()))


def choose_with_batch(base: TrainingRun, fixed: dict[str, Any], n: int,
                       notes: list[str]) -> tuple[TrainingRun, tuple[str, ...]]:
    """:func:`choose_plan`; when no plan splits the stated batch evenly, the batch rounded to
    a multiple of a data-parallel size the stated degrees allow
    (:func:`~codesign.validation.prose.nearby_batches`, widest first; the first that fits)."""
    try:
        return choose_plan(base, fixed)
    except InfeasiblePlan as exc:
        if "global_batch_size" not in str(exc) or "dp" in fixed:
            raise
        first = exc
    model_parallel = 1
    for key in ("tp", "pp", "cp"):
        model_parallel *= int(fixed.get(key, 1))
    gbs = base.parallel.global_batch_size
    for dp, rounded in nearby_batches(gbs, n // model_parallel)[:4]:
        par = base.parallel.model_copy(update={"global_batch_size": rounded})
        try:
            run, chosen = choose_plan(base.model_copy(update={"parallel": par}),
                                      {**fixed, "dp": dp})
        except InfeasiblePlan:
            continue
        notes.append(f"global batch {gbs} splits over no data-parallel size that fits: "
                     f"{rounded} (the nearest multiple of dp {dp})")
        return run, chosen
    raise first


#: first year of sources whose Megatron-Core sets the experts' tensor parallelism apart from
#: the attention's (``--expert-tensor-parallel-size``, Megatron-Core 0.10, MoE parallel
#: folding; Liu et al. 2025, arXiv 2504.14960). ASSUMPTION: a row dated 2025 or later ran it.
EXPERT_TP_FROM_YEAR = 2025


def expert_tp_choices(fw: str, tp: int, cp: int, dp: int, ep: int, year: int | None,
                      stated: int | None, notes: list[str]) -> list[int | None]:
    """Expert tensor-parallel sizes to try (``None``: Megatron-Core's default, the TP size).

    The size the row states; else 1 when the row's EP only fits that way (MoE parallel
    folding lays the experts over the ``tp × cp × dp`` ranks, so ``ep × etp`` must divide
    them; the DeepSeek-V3 / Mixtral recipes that run EP wider than ``dp`` set ETP 1); else,
    for a Megatron-Core MoE run with TP dated from :data:`EXPERT_TP_FROM_YEAR`, both the
    default and 1, as a tuned run picks the faster (Megatron-Bridge's MoE recipes set
    ``expert_tensor_parallel_size=1``); else the default alone."""
    if ep <= 1:
        return [None]
    if stated is not None:
        notes.append(f"expert tensor parallelism {stated} (as the row states)")
        return [stated]
    ranks = tp * cp * dp
    if fw != "megatron-core" or tp <= 1 or not ranks or ranks % ep:
        return [None]
    if ranks % (ep * tp):
        notes.append(f"ep {ep} fits the {ranks} tp×cp×dp ranks only with expert tensor "
                     "parallelism 1 (Megatron-Core MoE parallel folding): etp=1")
        return [1]
    if year is None or year < EXPERT_TP_FROM_YEAR:
        return [None]
    notes.append(f"expert tensor parallelism not stated: the faster of {tp} (Megatron-Core's "
                 "default, the TP size) and 1 (MoE parallel folding, Megatron-Core 0.10+)")
    return [None, 1]


#: LoRA rank when a LoRA row states none: the MLPerf Training Llama 2 70B LoRA reference
#: (mlcommons/training llama2_70b_lora/run_llama_70B_scrolls_r16.sh: ``--lora_r 16``)
MLPERF_LORA_RANK = 16


def lora_rank_of(text: str, notes: list[str]) -> int | None:
    """The LoRA rank a row's ``text`` (notes, model, source) states, or ``None`` when it does
    not say LoRA; a LoRA row without a rank gets :data:`MLPERF_LORA_RANK` (an assumption,
    noted)."""
    lora, rank = read_lora(text)
    if not lora:
        return None
    if rank is not None:
        notes.append(f"LoRA fine-tuning, rank {rank} as the row states: frozen base "
                     "weights, adapters on the attention projections")
        return rank
    notes.append(f"LoRA fine-tuning, rank not stated: {MLPERF_LORA_RANK} (ASSUMPTION: the "
                 "MLPerf Training Llama 2 70B LoRA reference), adapters on the attention "
                 "projections, frozen base weights")
    return MLPERF_LORA_RANK
