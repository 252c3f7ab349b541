"""Map rows of an inference-measurement CSV (the columns of ``shared/validation/
inference_cases.csv``) to inference cases: the engine (model, GPU, system, plan), the serving
mode, the benchmark's settings and the measured value in the row's own unit. Every assumption
made for a row is listed with it. :mod:`codesign.validation.inference_serving` turns a case
into a serving spec and runs it through the serving simulator.

A row with no ``input_len``/``output_len`` that names a dataset whose lengths are known
(:data:`DATASET_LENGTHS`: ShareGPT, Alpaca), or an online/server row that names none
(ShareGPT-like, the default of vLLM's and SGLang's serving benchmarks), draws lognormal lengths
around the dataset's means, listed as an assumption.

Serving modes (column ``serving_mode``): **offline static batch** (``batch_size`` requests of
``input_len`` prompt and ``output_len`` output tokens, fixed lengths, no early exit;
throughput = ``batch × output_len / total time``, per GPU when the unit is ``tok/s/GPU``),
**batch-1 latency** (time to first token of one prompt) and **offline max-throughput,
in-flight batching** (``num_requests`` requests at an infinite rate; throughput = all output
tokens / the time until the last request finishes, TensorRT-LLM's "Total Output
Throughput").

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
  (:func:`~codesign.validation.inference_serving.trtllm_bench_settings`,
  ``tensorrt_llm/bench/build/tuning.py``), FP8 KV cache with
  FP8 weights (``bench/build/build.py``: "If the quantization is NVFP4 or FP8, force the KV
  cache dtype to FP8"), XQA for GQA decode, KV blocks of 32 tokens, ``num_requests`` per
  ISL/OSL from the document's dataset table (:data:`TRTLLM_BENCH_NUM_REQUESTS`). The overlap
  scheduler hides host work, so iterations are priced by GPU time only.

The engine runs on the GPU's standard system (``dgx-h100`` for an H100): the rows use at most
one node.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from codesign.errors import SpecError
from codesign.specs.catalog import load_model, load_topology
from codesign.specs.gpu import GpuSpec
from codesign.specs.inference import InferencePlan
from codesign.specs.model import ModelSpec, MoESpec
from codesign.specs.topology import FullFlatTopology, TwoTierTopology
from codesign.validation.csvrows import float_cell, int_cell, row_text
from codesign.validation.csvrows import read_rows as _read_rows
from codesign.validation.serving_rows import (
    LATENCY_BENCHMARK,
    closed_loop_of,
    cuda_graphs_of,
    deepep_of,
    fused_allreduce_norm_of,
    integer_weights_of,
    kv_fraction_of,
    latency_kind,
    normalized_unit,
    percentile_of,
    server_bounds,
    stated_concurrency,
    stated_ep,
    stated_rate,
    stated_redundant_experts,
    stated_requests,
    unmodelled_of,
)
from codesign.validation.training_cases import Unsupported, gpu_of, map_rows

#: a CSV with this column holds inference rows
INFERENCE_MARKER = "serving_mode"
REQUIRED_COLUMNS = ("case_id", "source", "model", "gpu_type", "tp", "serving_mode",
                    "input_len", "output_len", "measured_value", "unit")

#: trtllm-bench dataset sizes per (ISL, OSL) (perf-overview.md, v1.0, "$num_requests" table)
TRTLLM_BENCH_NUM_REQUESTS: dict[tuple[int, int], int] = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500,
    (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
    (500, 2000): 3000, (20000, 2000): 1000}
#: requests when the table has no entry for the row's lengths
DEFAULT_NUM_REQUESTS = 1000
#: seconds of Poisson arrivals an online or server row is simulated over (per probe)
SERVER_WINDOW_S = 60.0


@dataclass(frozen=True)
class InferenceCase:
    """A row turned into an engine, a serving mode and the measured value."""

    case_id: str
    source: str
    framework: str  # trtllm-0.9 | trtllm-1.0 | generic
    mode: str  # static | ttft | tpot | ifb | server | online | closed
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
    #: server mode: p99 latency bounds (seconds) the rate must meet
    latency_bounds_s: tuple[float, float] = (0.0, 0.0)
    #: online mode: the request rate the row states, requests/s
    rate_rps: float = 0.0
    #: closed mode: concurrent users (each sends its next request when the previous ends)
    concurrency: int = 0
    #: decode all-to-alls of an EP group across nodes as DeepEP low-latency kernels
    deepep: bool = False
    #: TP all-reduce + residual + RMSNorm fused into one kernel (the row says so)
    fused_allreduce_norm: bool = False
    #: kernel-efficiency share sustained in serving (None: the step-cost model's default,
    #: 1.0); set by the inference calibration (inference_calibrate.py), never by a row
    sustained_fraction: float | None = None
    #: lengths drawn from a dataset's distribution (lognormal around ``input_len`` /
    #: ``output_len`` with this log-space sigma) instead of fixed; 0: fixed
    length_sigma: float = 0.0
    #: decode batches replayed from captured CUDA graphs (:mod:`.serving_rows`), padding,
    #: and whether the captured range is the engine's ``max_batch_size`` (trtllm-bench)
    cuda_graphs: tuple[tuple[int, ...], bool, bool] = ((), False, False)
    #: the statistic of a latency metric the row reports: mean, p50, p90 or p99
    percentile: str = "mean"
    #: GPUs per node the row states (0: not stated), for per-node throughput
    gpus_per_node: int = 0


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


#: (pattern on the lower-cased ``serving_mode`` and ``measured_metric``, mode), first match
#: wins: ``static`` one static batch; ``ttft`` a prefill step alone (time to first token);
#: ``tpot`` decode steps of a running batch (time per output token); ``ifb`` every request at
#: once through an in-flight batching scheduler (offline max throughput, MLPerf Offline);
#: ``server`` the highest Poisson rate meeting latency bounds (MLPerf Server, "max QPS at an
#: SLO", :mod:`codesign.serving.max_rate`); an aggregated (mixed prefill and decode) row is
#: ``ifb`` even where its text names the prefill
MODE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?:decode|generation)[- ](?:pool|nodes?|instances?|servers?|workers?|side|gpus?)",
     "decode_pool"),  # one phase of a disaggregated deployment (inference_phase.py)
    (r"(?:prefill|context)[- ](?:pool|nodes?|instances?|servers?|workers?|side|gpus?)",
     "prefill_pool"),
    (r"offline static batch|static batch", "static"),
    (r"server|online|poisson|qps|queries per second|request rate|req/s|interactive|"
     r"at (?:an? )?slo|slo-bound|latency-bound|concurren|closed[- ]loop", "server"),
    # prefill and decode batched together on one engine: a throughput run, even though the
    # text names the prefill
    (r"\bmixed\b|(?<!dis)aggregated|co-?located", "ifb"),
    (r"batch-1 latency|first token|ttft|context phase|prefill", "ttft"),
    # tokens/s per user is 1 / TPOT; a decode throughput is the batch over a decode step
    (r"time per output token|tpot|inter[- ]?token|itl|decode latency|per output token|"
     r"generation phase|decode step|decode throughput|per user|/user|^decode$", "tpot"),
    (r"in-flight|inflight|max-throughput|max throughput|offline|throughput benchmark|"
     r"trtllm-bench|benchmark_throughput|continuous batching|aggregated|throughput$|"
     r"benchmark_serving|serving benchmark", "ifb"),
    # a latency benchmark of one batch (vLLM benchmark_latency, MLPerf SingleStream)
    (LATENCY_BENCHMARK + r"|^latency$", "ttft"),
)
MODES = ("decode pool / prefill pool of a disaggregated deployment", "static batch",
         "time to first token / prefill", "time per output token / decode",
         "offline / max throughput (MLPerf Offline)", "server / online at an SLO (MLPerf "
         "Server)")


def mode_of(row: dict[str, str]) -> str:
    """The serving mode a row describes (:data:`MODE_PATTERNS` on ``serving_mode``, then on
    ``measured_metric``)."""
    for col in ("serving_mode", "measured_metric"):
        text = row.get(col, "").lower()
        for pattern, mode in MODE_PATTERNS:
            if text and re.search(pattern, text):
                if mode in ("server", "ifb") and not stated_rate(row) \
                        and stated_concurrency(row):
                    return "closed"  # users in a closed loop (serving_rows.closed_loop_of)
                return "online" if mode == "server" and stated_rate(row) else mode
    raise Unsupported(f"serving_mode '{row.get('serving_mode', '')}' is not simulated; "
                      f"supported: {'; '.join(MODES)}")


#: (pattern on the normalized unit, metric, factor to the metric's unit); the metric's unit:
#: seconds for latencies, tokens/s or requests/s for rates
UNIT_PATTERNS: tuple[tuple[str, str, float], ...] = (
    (r"^(?:ms|msec|milliseconds?)(?:/tok(?:en)?)?$", "latency", 1e-3),
    (r"^(?:us|µs|μs|usec|microseconds?)(?:/tok(?:en)?)?$", "latency", 1e-6),
    (r"^(?:s|sec|seconds?)(?:/tok(?:en)?)?$", "latency", 1.0),
    (r"^(?:tok(?:en)?s?/s(?:ec)?|tps)/(?:gpu|chip|accelerator|device)$", "tokens_per_s_gpu",
     1.0),
    (r"^(?:tok(?:en)?s?/s(?:ec)?|tps)/(?:user|request|req|seq|stream)$", "tokens_per_s_user",
     1.0),
    (r"^(?:tok(?:en)?s?/s(?:ec)?|tps)/(?:node|server|host)$", "tokens_per_s_node", 1.0),
    (r"^(?:tok(?:en)?s?/s(?:ec)?|tps)$", "tokens_per_s", 1.0),
    (r"^(?:req(?:uest)?s?/s(?:ec)?|qps|queries/s|samples/s|seq(?:uence)?s?/s)$",
     "requests_per_s", 1.0),
)


def metric_of(row: dict[str, str], mode: str) -> tuple[str, float]:
    """The metric key and the measured value in the row's unit (kept as the row states it:
    ``ttft_ms``, ``ttft_s``, ``tpot_ms``, ``tpot_s``, ``e2e_s``, ... (:func:`.latency_kind`),
    ``tokens_per_s(_gpu|_node)``, ``tokens_per_s_user``, ``requests_per_s``)."""
    value = float_cell(row, "measured_value")
    if value is None or value <= 0:
        raise Unsupported(f"measured_value {row.get('measured_value', '')!r}: no number")
    unit, thousands = normalized_unit(row.get("unit", ""))
    value *= thousands
    what = row.get("measured_metric", "").lower()
    for pattern, kind, factor in UNIT_PATTERNS:
        if re.match(pattern, unit.replace("tok/", "tok/").replace("toks/", "tok/")):
            if kind == "latency":
                name = {1e-3: "ms", 1e-6: "us", 1.0: "s"}[factor]
                return f"{latency_kind(row, mode)}_{name}", value
            if kind == "tokens_per_s" and "per gpu" in what:
                return "tokens_per_s_gpu", value
            return kind, value
    raise Unsupported(f"unit '{row.get('unit')}' not understood (ms, s, us; tok/s, tok/s/GPU, "
                      "tok/s/user, req/s, QPS)")


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
    quant = integer_weights_of(row)
    if quant is not None:  # integer weights: a stand-in storage format (serving_rows)
        kv = "fp8" if "fp8" in text else "bf16"
        notes.append(f"{quant[2]}; KV cache {kv}")
        return quant[0], kv
    if "fp4" in text:
        weight = "fp4"
    elif "fp8" in text:
        weight = "fp8"
    elif "bf16" in text or "bfloat16" in text:
        weight = "bf16"
    elif re.search(r"fp16|float16|\bhalf\b", text):
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


def map_row(row: dict[str, str]) -> InferenceCase:
    """Turn one CSV row into an :class:`InferenceCase`; raises :class:`Unsupported`."""
    fw = framework_of(row)
    notes: list[str] = [f"framework defaults: {fw}"]
    mode = mode_of(row)
    metric, value = metric_of(row, mode)
    stat = percentile_of(row) if metric[:4] in ("ttft", "tpot", "e2e_") else "mean"
    model = model_of(row, notes)
    gpu, system = gpu_of(row, notes)
    topo = load_topology(system)
    notes.append(f"system: {topo.name}" + (" (the GPU's standard system)"
                                           if system == gpu.default_topology else ""))
    tp, pp = int_cell(row, "tp") or 1, int_cell(row, "pp") or 1
    ep = int_cell(row, "ep") or stated_ep(row) or 1
    if model.moe is not None and not row.get("ep", "").strip() and ep == 1:
        notes.append("ep not given: MoE tensor parallelism (every GPU holds 1/tp of each "
                     "expert)")
    weight, kv = dtypes_of(row, fw, notes)
    unmodelled_of(row, notes)
    plan = InferencePlan.parse(
        {"tp": tp, "pp": pp, "ep": ep, "weight_dtype": weight, "kv_dtype": kv,
         "redundant_experts": stated_redundant_experts(row) if model.moe else 0,
         "decode_attention": decode_attention_of(model, fw, notes),
         "compute_dtype": (integer_weights_of(row) or (None, None))[1]}, f"case {row['case_id']}")
    custom_ar = fw != "trtllm-0.9"
    if not custom_ar and tp > 1:
        notes.append("TP all-reduce: NCCL (the documented TensorRT-LLM 0.9 build commands do "
                     "not enable the opt-in custom all-reduce plugin)")
    gpus = int_cell(row, "num_gpus")
    if gpus is not None and gpus != plan.num_gpus * (int_cell(row, "replicas") or 1):
        notes.append(f"num_gpus {gpus} != tp×pp×ep×replicas: throughput per engine of "
                     f"{plan.num_gpus} GPUs")
    isl, osl = int_cell(row, "input_len"), int_cell(row, "output_len")
    sigma = 0.0
    if not isl or not osl:
        named = dataset_of(row)
        if named is None:
            raise Unsupported("input_len or output_len not given, and no dataset named whose "
                              f"lengths are known ({', '.join(DATASET_LENGTHS)})")
        name, (mean_in, mean_out, sigma, source) = named
        isl, osl = isl or mean_in, osl or mean_out
        notes.append(f"lengths: {name}-like, lognormal around {isl} prompt / {osl} output "
                     f"tokens (sigma {sigma}; {source}): an assumption standing in for the "
                     "dataset")
    batch, users = 1, 0
    kv_fraction = 0.9
    n_req = DEFAULT_NUM_REQUESTS
    bounds = (0.0, 0.0, "")
    if mode == "static":
        batch = int_cell(row, "batch_size") or 0
        if not batch:
            raise Unsupported("static batch without a batch_size")
        notes.append(f"static batch: one prefill step of {batch} prompts, then {osl - 1} "
                     "decode steps over the whole batch")
    elif mode == "ttft":
        batch = int_cell(row, "batch_size") or 1
        notes.append("time to first token: the prefill step alone (no queueing, no host "
                     "overhead)" if metric[:4] == "ttft" else f"latency: one batch of {batch}, "
                     f"its prefill step and {osl - 1} decode steps (no queueing)")
    elif mode == "tpot":
        batch = int_cell(row, "batch_size") or 1
        notes.append(f"time per output token: decode steps of a batch of {batch} after one "
                     "prefill step")
    elif mode == "online":
        kv_fraction = kv_fraction_of(row, fw, notes)
        notes.append(f"online: Poisson arrivals at the stated {stated_rate(row):g} requests/s, "
                     f"{int(SERVER_WINDOW_S)} s of them, {'mean' if sigma else 'fixed'} "
                     f"lengths {isl}/{osl}; the {stat} of the measured metric")
    elif mode in ("decode_pool", "prefill_pool"):
        kv_fraction = kv_fraction_of(row, fw, notes)
        batch = int_cell(row, "batch_size") or 1
        if mode == "decode_pool" and not int_cell(row, "batch_size"):
            raise Unsupported("a decode-pool row needs batch_size (sequences per engine)")
    elif mode == "closed":
        kv_fraction = kv_fraction_of(row, fw, notes)
        users, n_req = closed_loop_of(row, notes)
    elif mode == "server":
        kv_fraction = kv_fraction_of(row, fw, notes)
        bounds = server_bounds(row)
        notes.append(f"server: the highest Poisson rate whose p99 TTFT <= {bounds[0]:g} s and "
                     f"p99 TPOT <= {bounds[1]:g} s ({bounds[2]}), "
                     f"{'mean' if sigma else 'fixed'} lengths {isl}/{osl}")
    else:
        kv_fraction = kv_fraction_of(row, fw, notes)
        n_req, src = stated_requests(row, (isl, osl), TRTLLM_BENCH_NUM_REQUESTS, n_req)
        notes.append(f"in-flight batching: {n_req} requests at t = 0 ({src})")
    return InferenceCase(
        case_id=row["case_id"], source=row.get("source", ""), framework=fw, mode=mode,
        model=model, gpu=gpu, topology=topo, plan=plan, input_len=isl, output_len=osl,
        metric=metric, value=value, batch_size=batch, kv_fraction=kv_fraction,
        num_requests=n_req, custom_allreduce=custom_ar, assumptions=tuple(notes),
        latency_bounds_s=(bounds[0], bounds[1]) if mode == "server" else (0.0, 0.0),
        rate_rps=(stated_rate(row) or 0.0) if mode == "online" else 0.0,
        length_sigma=sigma, cuda_graphs=cuda_graphs_of(row, fw, mode, notes),
        concurrency=users, deepep=deepep_of(row, model, ep, notes),
        fused_allreduce_norm=fused_allreduce_norm_of(row, notes),
        gpus_per_node=int_cell(row, "gpus_per_node") or 0,
        percentile=stat)


#: mean prompt and output tokens of public serving datasets and the log-space spread used
#: for them: ShareGPT 161 / 338 and Alpaca 19 / 58 mean tokens (Kwon et al. 2023, "Efficient
#: Memory Management for Large Language Model Serving with PagedAttention", SOSP, Sec. 6.1 and
#: Fig. 11, the distributions vLLM's benchmarks sample); sigma 1.0 is an ASSUMPTION for their
#: long right tails (the figure's lengths span about two decades)
DATASET_LENGTHS: dict[str, tuple[int, int, float, str]] = {
    "sharegpt": (161, 338, 1.0, "Kwon et al. 2023, vLLM paper Sec. 6.1"),
    "alpaca": (19, 58, 1.0, "Kwon et al. 2023, vLLM paper Sec. 6.1"),
}


def dataset_of(row: dict[str, str]) -> tuple[str, tuple[int, int, float, str]] | None:
    """The dataset a row names (``ShareGPT``, ``Alpaca``) with its known lengths; an online
    or server row that names none is taken as ShareGPT-like (the usual default of vLLM's and
    SGLang's serving benchmarks)."""
    text = row_text(row, ("serving_mode", "notes", "measured_metric", "dataset",
                          "source_location"))
    text = re.sub(r"[^a-z0-9]", "", text)
    for name in DATASET_LENGTHS:
        if name in text:
            return name, DATASET_LENGTHS[name]
    mode_text = (row.get("serving_mode", "") + " " + row.get("measured_metric", "")).lower()
    if re.search(r"online|serv(?:er|ing)|qps|req/s|request rate|poisson|concurren|closed",
                 mode_text):
        return "sharegpt", DATASET_LENGTHS["sharegpt"]
    return None


def iter_cases(path: Path) -> Iterator[tuple[dict[str, str], InferenceCase | str]]:
    """Each row with its mapped case, or the reason it cannot be simulated
    (:func:`~codesign.validation.training_cases.map_rows`)."""
    return map_rows(read_rows(path), map_row)


__all__ = [
    "DEFAULT_NUM_REQUESTS",
    "TRTLLM_BENCH_NUM_REQUESTS",
    "InferenceCase",
    "is_inference_csv",
    "iter_cases",
    "map_row",
    "read_rows",
]
