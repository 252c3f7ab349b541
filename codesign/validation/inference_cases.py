"""Map rows of an inference-measurement CSV (the columns of ``shared/validation/
inference_cases.csv``) to inference engines and predict what each row measured, in the row's
own unit, from the step-cost model (:mod:`codesign.serving.step_cost`). Every assumption made
for a row is listed with it.

Serving modes (column ``serving_mode``):

* **offline static batch** — ``batch_size`` requests of ``input_len`` prompt tokens and
  ``output_len`` output tokens: one prefill step over all prompts (it yields the first output
  token), then ``output_len − 1`` decode steps over the whole batch (fixed output length, no
  early exit). Throughput = ``batch × output_len / total time``, per GPU when the unit is
  ``tok/s/GPU``.
* **batch-1 latency**, time to first token — the prefill step of one ``input_len`` prompt.
* **offline max-throughput, in-flight batching** — requests at an infinite rate through an
  iteration-level continuous-batching loop (:func:`inflight_batching`), a stand-in for the
  request-level simulator: all ``num_requests`` requests are queued at t = 0; a request is
  admitted when fewer than ``max_batch_size`` are active and the KV cache can reserve its
  whole ``input_len + output_len`` (in blocks; TensorRT-LLM's GUARANTEED_NO_EVICT capacity
  policy); each iteration runs every decoding request plus, first come first served, the
  prompts that fit in the remaining ``max_num_tokens`` budget (a prompt longer than the budget
  is chunked: chunked prefill); a prompt's step yields its first token. Throughput = all output
  tokens / the time until the last request finishes (TensorRT-LLM's "Total Output
  Throughput"). The KV budget is the step-cost model's ``kv_capacity_tokens`` at the row's
  ``kv_cache_free_gpu_mem_fraction``.

Framework defaults:

* **TensorRT-LLM 0.9** (``docs/source/performance.md`` of that release: ``trtllm-build
  --paged_kv_cache disable --context_fmha enable --gpt_attention_plugin``, ckpt_config.json with
  ``quant_algo FP8, kv_cache_quant_algo FP8``, ``gptSessionBenchmark``): FP8 weights, GEMMs
  and KV cache; static batching; the GQA decode kernel XQA (enabled by ``TRTLLM_ENABLE_XQA=1``
  for Llama-2-70B and Falcon) existed only as precompiled kernels for head dim 128 with 8 query
  heads per KV head (``cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/cubin/
  xqa_kernel_cubin.h``: ``xqa_kernel_dt_fp16_d_128_..._nqpkv_8_sm_90``), so other GQA shapes
  (Falcon-180B: 29 query heads per KV head of dim 64; Mixtral: 4) decode with the generic
  masked-MHA kernel, which reads a KV head once per query head (``decode_attention =
  "per_head"``); MoE models without an ``ep`` use MoE tensor parallelism; TP all-reduces run
  on NCCL: the documented build commands do not enable the custom all-reduce plugin, an
  opt-in ``--use_custom_all_reduce`` build option of the 0.x releases (release 0.10 added the
  heuristic that falls back to NCCL, release 0.12 removed the option).
* **TensorRT-LLM 1.0** (``docs/source/performance/perf-overview.md``, ``trtllm-bench
  throughput --backend pytorch``): in-flight batching with the GUARANTEED_NO_EVICT capacity
  scheduler and ``max_batch_size`` / ``max_num_tokens`` from trtllm-bench's tuning heuristic
  (:func:`trtllm_bench_settings`, ``tensorrt_llm/bench/build/tuning.py``), FP8 KV cache with
  FP8 weights (``bench/build/build.py``: "If the quantization is NVFP4 or FP8, force the KV
  cache dtype to FP8"), XQA for GQA decode, KV blocks of 32 tokens, ``num_requests`` per
  ISL/OSL from the document's dataset table (:data:`TRTLLM_BENCH_NUM_REQUESTS`). The overlap
  scheduler hides host work, so iterations are priced by GPU time only.

The engine runs on the GPU's standard system (``dgx-h100`` for an H100): the rows use at most
one node.
"""

from __future__ import annotations

import csv
import math
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from codesign.errors import InfeasiblePlan, SpecError
from codesign.serving.step_cost import DEFAULT_MAX_NUM_TOKENS, StepCostModel, StepShape
from codesign.specs.catalog import load_gpu, load_model, load_topology
from codesign.specs.gpu import GpuSpec
from codesign.specs.inference import InferencePlan
from codesign.specs.model import ModelSpec, MoESpec
from codesign.specs.topology import FullFlatTopology, TwoTierTopology
from codesign.units import GiB
from codesign.validation.csvrows import float_cell, int_cell
from codesign.validation.csvrows import read_rows as _read_rows
from codesign.validation.training_cases import Unsupported
from codesign.workload.params import param_counts

#: a CSV with this column holds inference rows
INFERENCE_MARKER = "serving_mode"
REQUIRED_COLUMNS = ("case_id", "source", "model", "gpu_type", "tp", "serving_mode",
                    "input_len", "output_len", "measured_value", "unit")
MODES = ("offline static batch", "batch-1 latency", "offline max-throughput")

#: trtllm-bench dataset sizes per (ISL, OSL) (perf-overview.md, v1.0, "$num_requests" table)
TRTLLM_BENCH_NUM_REQUESTS: dict[tuple[int, int], int] = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500,
    (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
    (500, 2000): 3000, (20000, 2000): 1000}
#: requests when the table has no entry for the row's lengths
DEFAULT_NUM_REQUESTS = 1000
#: tokens per KV-cache block (TensorRT-LLM KvCacheConfig.tokens_per_block default)
KV_BLOCK_TOKENS = 32
#: trtllm-bench's ``kv_cache_gpu_mem_fraction`` default in its tuning heuristic
TRTLLM_BENCH_KV_FRACTION = 0.95


@dataclass(frozen=True)
class InferenceCase:
    """A row turned into an engine, a serving mode and the measured value."""

    case_id: str
    source: str
    framework: str  # trtllm-0.9 | trtllm-1.0 | generic
    mode: str  # static | ttft | ifb
    model: ModelSpec
    gpu: GpuSpec
    topology: TwoTierTopology | FullFlatTopology
    plan: InferencePlan
    input_len: int
    output_len: int
    metric: str  # tokens_per_s_per_gpu | tokens_per_s | ttft_ms | ttft_s
    value: float
    batch_size: int = 1
    kv_fraction: float = 0.9
    num_requests: int = DEFAULT_NUM_REQUESTS
    custom_allreduce: bool = True
    assumptions: tuple[str, ...] = field(default=())


def is_inference_csv(path: Path) -> bool:
    """Whether ``path`` has the inference columns (``serving_mode``)."""
    try:
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), [])
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror}") from None
    return INFERENCE_MARKER in [h.strip() for h in header]


def read_rows(path: Path) -> list[dict[str, str]]:
    """Rows of the CSV; raises :class:`SpecError` if required columns are missing."""
    return _read_rows(path, REQUIRED_COLUMNS, "an inference")


def framework_of(row: dict[str, str]) -> str:
    """``trtllm-0.9`` (TensorRT-LLM before 0.10), ``trtllm-1.0`` (later) or ``generic``."""
    text = f"{row.get('framework', '')} {row.get('source', '')}".lower()
    if "tensorrt-llm" not in text and "trt-llm" not in text:
        return "generic"
    m = re.search(r"(?:tensorrt-llm|trt-llm)\s*v?(\d+)\.(\d+)", text)
    if m and (int(m.group(1)), int(m.group(2))) < (0, 10):
        return "trtllm-0.9"
    return "trtllm-1.0"


def mode_of(row: dict[str, str]) -> str:
    """``static``, ``ttft`` or ``ifb`` from the ``serving_mode`` column."""
    text = row.get("serving_mode", "").lower()
    if text.startswith("offline static batch"):
        return "static"
    if text.startswith("batch-1 latency"):
        return "ttft"
    if "in-flight" in text or "inflight" in text or "max-throughput" in text:
        return "ifb"
    raise Unsupported(f"serving mode '{row.get('serving_mode', '')}' is not simulated; "
                      f"supported: {', '.join(MODES)}")


def metric_of(row: dict[str, str], mode: str) -> tuple[str, float]:
    """The metric key and the measured value in the row's unit."""
    value = float_cell(row, "measured_value")
    if value is None or value <= 0:
        raise Unsupported("no measured value")
    unit = row.get("unit", "").strip().lower().replace(" ", "")
    what = row.get("measured_metric", "").lower()
    if mode == "ttft" or "first token" in what:
        if unit == "ms":
            return "ttft_ms", value
        if unit == "s":
            return "ttft_s", value
        raise Unsupported(f"time to first token in unit '{row.get('unit')}' (expected ms or s)")
    if unit in ("tok/s/gpu", "tokens/s/gpu") or "per gpu" in what:
        return "tokens_per_s_gpu", value
    if unit in ("tok/s", "tokens/s"):
        return "tokens_per_s", value
    raise Unsupported(f"unit '{row.get('unit')}' not understood (tok/s/GPU, tok/s, ms, s)")


def model_of(row: dict[str, str], notes: list[str]) -> ModelSpec:
    """The catalog model named by the row (checked against its layer count and hidden size
    when the row gives them), else one built from the row's architecture columns."""
    layers, hidden, heads = (int_cell(row, "num_layers"), int_cell(row, "hidden_size"),
                             int_cell(row, "num_heads"))
    try:
        cat = load_model(row["model"])
    except SpecError:
        cat = None
    if cat is not None and (layers is None or (cat.num_layers == layers
                                               and cat.hidden_size == hidden)):
        if layers is None:
            notes.append(f"model: architecture not in the row; catalog entry {cat.name} "
                         "(its cited Hugging Face config)")
        else:
            notes.append(f"model: catalog entry {cat.name}")
        return cat
    if not (layers and hidden and heads):
        raise Unsupported("model architecture not given (layers, hidden size, heads) and no "
                          "catalog entry matches the model name")
    ffn = int_cell(row, "ffn_size")
    if ffn is None:
        ffn = 4 * hidden
        notes.append("ffn_size not given: 4h")
    vocab = int_cell(row, "vocab_size") or 32000
    name = row["model"].lower()
    gated = any(f in name for f in ("llama", "mistral", "mixtral", "qwen", "deepseek"))
    moe = None
    experts, top_k, eff = (int_cell(row, "moe_experts"), int_cell(row, "moe_top_k"),
                           int_cell(row, "moe_expert_ffn"))
    if experts and top_k and eff:
        moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn_hidden_size=eff)
    notes.append(f"model: built from the row's columns ({'gated' if gated else 'plain'} MLP)")
    return ModelSpec(name=row["model"], num_layers=layers, hidden_size=hidden, num_heads=heads,
                     num_kv_heads=int_cell(row, "num_kv_heads") or heads, ffn_hidden_size=ffn,
                     vocab_size=vocab, mlp="gated" if gated else "plain",
                     norm="rmsnorm" if gated else "layernorm", moe=moe)


def dtypes_of(row: dict[str, str], framework: str, notes: list[str]) -> tuple[str, str]:
    """(weight dtype, KV dtype) from the ``precision`` column."""
    text = row.get("precision", "").lower()
    if "fp4" in text:
        weight = "fp4"
    elif "fp8" in text:
        weight = "fp8"
    elif "bf16" in text:
        weight = "bf16"
    elif "fp16" in text:
        weight = "fp16"
    else:
        weight = "bf16"
        notes.append("precision not given: bf16")
    if "kv" in text:
        kv = "fp8" if weight in ("fp8", "fp4") else weight
    elif weight in ("fp8", "fp4") and framework.startswith("trtllm"):
        kv = "fp8"
        notes.append("KV-cache dtype not in the row: fp8 (TensorRT-LLM: FP8 KV cache with FP8/"
                     "FP4 weights in the documented configs)")
    else:
        kv = "fp16" if weight == "fp16" else "bf16"
        notes.append(f"KV-cache dtype not in the row: {kv}")
    notes.append(f"weights {weight}, KV cache {kv}")
    return weight, kv


def decode_attention_of(model: ModelSpec, framework: str, notes: list[str]) -> str:
    """``per_head`` where TensorRT-LLM 0.9 had no XQA kernel for the GQA shape."""
    group = model.num_heads // model.kv_heads
    if framework != "trtllm-0.9" or group == 1 or model.mla is not None:
        return "grouped"
    if model.dim_per_head == 128 and group == 8:
        notes.append("decode attention: XQA (GQA kernel, head dim 128, 8 query heads per KV)")
        return "grouped"
    notes.append(f"decode attention: masked-MHA kernel reading each KV head once per query "
                 f"head (TensorRT-LLM 0.9 XQA lacks head dim {model.dim_per_head} with "
                 f"{group} query heads per KV head)")
    return "per_head"


def _kv_fraction(row: dict[str, str], framework: str, notes: list[str]) -> float:
    text = row.get("framework", "")
    m = re.search(r"kv_cache_free_gpu_mem_fraction\s*([0-9.]+)(?:\s*-\s*([0-9.]+))?", text)
    if m:
        values = [float(v) for v in m.groups() if v]
        if len(values) > 1:
            notes.append(f"kv_cache_free_gpu_mem_fraction {m.group(1)}-{m.group(2)}: "
                         f"{max(values)} (the document uses it unless out of memory)")
        return max(values)
    if framework == "trtllm-1.0":
        notes.append("kv_cache_free_gpu_mem_fraction not given: 0.9 (TensorRT-LLM default)")
    return 0.9


def map_row(row: dict[str, str]) -> InferenceCase:
    """Turn one CSV row into an :class:`InferenceCase`; raises :class:`Unsupported`."""
    fw = framework_of(row)
    notes: list[str] = [f"framework defaults: {fw}"]
    mode = mode_of(row)
    metric, value = metric_of(row, mode)
    model = model_of(row, notes)
    try:
        gpu = load_gpu(row["gpu_type"])
    except SpecError as exc:
        raise Unsupported(str(exc)) from None
    topo = load_topology(gpu.default_topology)
    notes.append(f"system: {topo.name} (the GPU's standard system)")
    tp, pp = int_cell(row, "tp") or 1, int_cell(row, "pp") or 1
    ep = int_cell(row, "ep") or 1
    if model.moe is not None and not row.get("ep", "").strip():
        notes.append("ep not given: MoE tensor parallelism (every GPU holds 1/tp of each "
                     "expert)")
    weight, kv = dtypes_of(row, fw, notes)
    plan = InferencePlan.parse(
        {"tp": tp, "pp": pp, "ep": ep, "weight_dtype": weight, "kv_dtype": kv,
         "decode_attention": decode_attention_of(model, fw, notes)}, f"case {row['case_id']}")
    custom_ar = fw != "trtllm-0.9"
    if not custom_ar and tp > 1:
        notes.append("TP all-reduce: NCCL (the documented TensorRT-LLM 0.9 build commands do "
                     "not enable the opt-in custom all-reduce plugin)")
    gpus = int_cell(row, "num_gpus")
    if gpus is not None and gpus != plan.num_gpus * (int_cell(row, "replicas") or 1):
        notes.append(f"num_gpus {gpus} != tp×pp×ep×replicas: throughput per engine of "
                     f"{plan.num_gpus} GPUs")
    isl, osl = int_cell(row, "input_len"), int_cell(row, "output_len")
    if not isl or not osl:
        raise Unsupported("input_len or output_len not given")
    batch = 1
    kv_fraction = 0.9
    n_req = DEFAULT_NUM_REQUESTS
    if mode == "static":
        b = int_cell(row, "batch_size")
        if not b:
            raise Unsupported("static batch without a batch_size")
        batch = b
        notes.append(f"static batch: one prefill step of {batch} prompts, then {osl - 1} "
                     "decode steps over the whole batch")
    elif mode == "ttft":
        batch = int_cell(row, "batch_size") or 1
        notes.append("time to first token: the prefill step alone (no queueing, no host "
                     "overhead)")
    else:
        kv_fraction = _kv_fraction(row, fw, notes)
        n_req = TRTLLM_BENCH_NUM_REQUESTS.get((isl, osl), DEFAULT_NUM_REQUESTS)
        src = "trtllm-bench table" if (isl, osl) in TRTLLM_BENCH_NUM_REQUESTS else "default"
        notes.append(f"in-flight batching: {n_req} requests at t = 0 ({src}), "
                     f"GUARANTEED_NO_EVICT admission, KV blocks of {KV_BLOCK_TOKENS} tokens")
    return InferenceCase(
        case_id=row["case_id"], source=row.get("source", ""), framework=fw, mode=mode,
        model=model, gpu=gpu, topology=topo, plan=plan, input_len=isl, output_len=osl,
        metric=metric, value=value, batch_size=batch, kv_fraction=kv_fraction,
        num_requests=n_req, custom_allreduce=custom_ar, assumptions=tuple(notes))


def iter_cases(path: Path) -> Iterator[tuple[dict[str, str], InferenceCase | str]]:
    """Each row with its mapped case, or the reason it cannot be simulated."""
    for row in read_rows(path):
        try:
            yield row, map_row(row)
        except (Unsupported, SpecError) as exc:
            yield row, str(exc)


# --- serving modes ---------------------------------------------------------------------------


def static_batch_s(sc: StepCostModel, batch: int, input_len: int,
                   output_len: int) -> tuple[float, float]:
    """(prefill seconds, decode seconds) of a static batch (see module docstring)."""
    prefill = sc.shape_time_s(StepShape.prefill_batch(batch, input_len))
    decode = sum(sc.shape_time_s(StepShape.decode_batch(batch, input_len + i))
                 for i in range(output_len - 1))
    return prefill, decode


def ttft_s(sc: StepCostModel, input_len: int, batch: int = 1) -> float:
    """Seconds of the prefill step of ``batch`` prompts of ``input_len`` tokens."""
    return sc.shape_time_s(StepShape.prefill_batch(batch, input_len))


def trtllm_bench_settings(model: ModelSpec, plan: InferencePlan, gpu: GpuSpec, input_len: int,
                          output_len: int,
                          kv_fraction: float = TRTLLM_BENCH_KV_FRACTION) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as trtllm-bench chooses them (``tensorrt_llm/bench/
    build/tuning.py``: ``calc_engine_setting`` and ``finetune_setting``): the requests whose
    whole ``input + output`` KV fits in ``fraction × (GPU memory − weights)``, capped at 4096
    and rounded up; tokens ``batch × (1 + input/output)`` capped at 32768, rounded up, at least
    2048."""
    bpe = {"fp8": 1.0, "fp4": 0.5}.get(plan.weight_dtype, 2.0)
    kv_bpe = {"fp8": 1.0, "fp4": 0.5}.get(plan.kv_dtype, 2.0)
    kv_heads = max(plan.tp, model.kv_heads)
    per_token = 2 * model.num_layers * kv_heads * model.dim_per_head * kv_bpe / GiB
    engine = param_counts(model).total * bpe / GiB
    available = gpu.memory_bytes / GiB * plan.tp * plan.pp - engine
    requests = available * kv_fraction / (per_token * (input_len + output_len))
    raw_bs = min(requests, 4096) / plan.pp
    raw_tokens = min(raw_bs * (1 + input_len / output_len), 32768)
    max_bs = max(64, _round_up(raw_bs, ((256, 32), (1024, 128), (math.inf, 256))))
    max_tokens = max(2048, _round_up(raw_tokens, ((4096, 256), (8192, 512), (math.inf, 1024))))
    return max_bs, max_tokens


def _round_up(x: float, tiers: tuple[tuple[float, int], ...]) -> int:
    """``x`` rounded up to the step of the first tier whose bound exceeds it."""
    step = next(s for bound, s in tiers if x < bound)
    return step * math.ceil(x / step)


@dataclass(frozen=True)
class BatchingResult:
    """Outcome of :func:`inflight_batching`."""

    output_tokens_per_s: float
    total_s: float
    iterations: int
    mean_decode_batch: float
    max_active: int


def inflight_batching(sc: StepCostModel, input_len: int, output_len: int, num_requests: int,
                      max_batch_size: int, max_num_tokens: int,
                      block_tokens: int = KV_BLOCK_TOKENS) -> BatchingResult:
    """Iteration-level continuous batching of identical requests queued at t = 0 (see the
    module docstring); KV budget ``sc.kv_capacity_tokens``. Decoding requests advance in
    cohorts (requests that entered decode in the same iteration)."""
    per_req = math.ceil((input_len + output_len) / block_tokens) * block_tokens
    if per_req > sc.kv_capacity_tokens:
        raise InfeasiblePlan(f"one request needs {per_req} KV tokens > capacity "
                             f"{sc.kv_capacity_tokens}")
    waiting = num_requests
    prefilling: deque[int] = deque()  # prompt tokens already processed, per admitted request
    cohorts: deque[tuple[int, int]] = deque()  # (iteration the cohort's first decode ran, n)
    n_dec = 0
    ctx_sum = 0.0  # Σ cached tokens over decoding requests
    kv_used = 0
    t = 0.0
    it = 0
    dec_total = 0
    max_active = 0
    while waiting or prefilling or n_dec:
        while (waiting and n_dec + len(prefilling) < max_batch_size
               and kv_used + per_req <= sc.kv_capacity_tokens):
            waiting -= 1
            kv_used += per_req
            prefilling.append(0)
        max_active = max(max_active, n_dec + len(prefilling))
        budget = max_num_tokens - n_dec
        chunks: list[tuple[int, int]] = []
        for done in prefilling:
            if budget <= 0:
                break
            rest = input_len - done
            if rest > budget and input_len <= max_num_tokens:
                break  # waits for an iteration with room for the whole prompt (FCFS)
            n = min(rest, budget)
            chunks.append((n, done))
            budget -= n
        t += sc.shape_time_s(StepShape.mixed(chunks, n_dec, ctx_sum))
        dec_total += n_dec
        # decoding requests each emitted a token and cached one more
        ctx_sum += n_dec
        while cohorts and it - cohorts[0][0] + 1 >= output_len - 1:
            _, n = cohorts.popleft()
            n_dec -= n
            ctx_sum -= n * (input_len + output_len - 1)
            kv_used -= n * per_req
        # prompts that finished their prefill emitted their first token
        finished = 0
        for i, (n, done) in enumerate(chunks):
            prefilling[i] = done + n
            if done + n >= input_len:
                finished += 1
        for _ in range(finished):
            prefilling.popleft()
        if finished:
            if output_len > 1:
                cohorts.append((it + 1, finished))
                n_dec += finished
                ctx_sum += finished * input_len
            else:
                kv_used -= finished * per_req
        it += 1
    total_tokens = num_requests * output_len
    return BatchingResult(output_tokens_per_s=total_tokens / t, total_s=t, iterations=it,
                          mean_decode_batch=dec_total / it, max_active=max_active)


def build_engine(case: InferenceCase, max_num_tokens: int | None = None) -> StepCostModel:
    """The step-cost model of the case's engine (raises :class:`InfeasiblePlan`)."""
    return StepCostModel.build(case.model, case.gpu, case.topology, case.plan,
                               kv_fraction=case.kv_fraction,
                               max_num_tokens=max_num_tokens or DEFAULT_MAX_NUM_TOKENS,
                               custom_allreduce=case.custom_allreduce)


def predict(case: InferenceCase) -> tuple[float, list[str]]:
    """The simulator's value of the case's metric (in the row's unit) and notes on how it
    was obtained. Raises :class:`InfeasiblePlan` for a plan that does not fit."""
    notes: list[str] = []
    isl, osl = case.input_len, case.output_len
    if case.mode == "ifb":
        max_bs, max_tokens = trtllm_bench_settings(case.model, case.plan, case.gpu, isl, osl)
        notes.append(f"trtllm-bench heuristic: max_batch_size {max_bs}, max_num_tokens "
                     f"{max_tokens}")
        sc = build_engine(case, max_num_tokens=max_tokens)
        res = inflight_batching(sc, isl, osl, case.num_requests, max_bs, max_tokens)
        notes.append(f"KV budget {sc.kv_capacity_tokens} tokens; at most {res.max_active} "
                     f"requests active, mean decode batch {res.mean_decode_batch:.0f}, "
                     f"{res.iterations} iterations")
        total = res.output_tokens_per_s
        value = total / case.plan.num_gpus if case.metric == "tokens_per_s_gpu" else total
        return value, notes
    sc = build_engine(case)
    if case.mode == "ttft":
        t = ttft_s(sc, isl, case.batch_size)
        return (t * 1e3 if case.metric == "ttft_ms" else t), notes
    need = case.batch_size * (isl + osl)
    if need > sc.kv_capacity_tokens / case.kv_fraction:
        raise InfeasiblePlan(f"static batch needs {need} KV tokens > {sc.kv_capacity_tokens} "
                             "that fit next to the weights")
    prefill, decode = static_batch_s(sc, case.batch_size, isl, osl)
    notes.append(f"prefill {prefill:.3g} s, decode {decode:.3g} s")
    total = case.batch_size * osl / (prefill + decode)
    if case.metric == "tokens_per_s_gpu":
        return total / case.plan.num_gpus, notes
    if case.metric == "tokens_per_s":
        return total, notes
    raise Unsupported(f"metric {case.metric} does not fit a static batch")


__all__ = ["InferenceCase", "inflight_batching", "is_inference_csv", "iter_cases",
           "map_row", "predict", "static_batch_s", "trtllm_bench_settings", "ttft_s"]
