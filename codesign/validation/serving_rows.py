"""Readings of serving rows beyond the mode, unit and lengths
(:mod:`codesign.validation.inference_cases`): whether the framework replays decode steps from
captured CUDA graphs, and a closed-loop concurrency instead of a request rate.

CUDA graphs (:func:`cuda_graphs_of`). A row that says so wins ("CUDA graphs", "cuda graph max
bs 160", "enforce_eager", "--disable-cuda-graph", "eager mode"); otherwise the framework's
default for decode-only steps:

* **TensorRT-LLM 0.9** ``gptSessionBenchmark``: eager (``--enable_cuda_graph`` is off by
  default, ``benchmarks/cpp/gptSessionBenchmark.cpp``).
* **TensorRT-LLM 1.0**, ``trtllm-bench``: graphs with padding up to the tuned
  ``max_batch_size`` (``tensorrt_llm/bench/benchmark/utils/general.py``, ``get_settings``:
  ``cuda_graph_config = {"enable_padding": True, "max_batch_size": max_batch_size}``); other
  entry points (LLM API): ``cuda_graph_config`` on by default with batch sizes 1-31, 32, 64,
  128 and no padding (``tensorrt_llm/llmapi/llm_args.py``, ``CudaGraphConfig`` and
  ``TorchLlmArgs.validate_cuda_graph_config``: ``max_batch_size or 128``).
* **vLLM**: graphs (``enforce_eager`` defaults to False) with padding up to 512 sequences
  (V1's default largest capture size; V0 captured up to 256, ``vllm/worker/model_runner.py``
  ``_BATCH_SIZES_TO_CAPTURE``).
* **SGLang**: graphs (``--disable-cuda-graph`` defaults to off) with padding up to
  ``cuda_graph_max_bs``; ASSUMPTION 160 when the row does not give it (SGLang sizes it from
  the GPU memory at start-up; 160 is its value for 80 GB GPUs at small TP).
* anything else: eager (the serving spec's default), listed as an assumption.

Concurrency (:func:`stated_concurrency`, :func:`closed_loop_of`). A server or throughput row
that states a number of concurrent users instead of a request rate ("max-concurrency 32",
"--concurrency=8", "concurrency of 64", "16 concurrent users", "closed loop with 4 clients")
is simulated with closed-loop clients: that many users, each sending its next request as its
previous one finishes (vLLM ``benchmark_serving --max-concurrency`` at its default unlimited
``--request-rate``; genai-perf ``--concurrency``), over the row's number of requests
("num-prompts 500", "2000 requests") or vLLM's ``--num-prompts`` default of 1000.
"""

from __future__ import annotations

import re

from codesign.specs.model import ModelSpec
from codesign.validation.csvrows import row_text
from codesign.validation.training_cases import Unsupported

#: largest decode batch vLLM captures by default (V1 ``max_cudagraph_capture_size``)
VLLM_MAX_CAPTURE = 512
#: ASSUMPTION: SGLang's ``cuda_graph_max_bs`` when a row does not state it
SGLANG_MAX_CAPTURE = 160
#: TensorRT-LLM LLM API default capture sizes without padding (``CudaGraphConfig``)
TRTLLM_API_SIZES = (*range(1, 33), 64, 128)

_OFF = re.compile(r"enforce[_ -]?eager|disable[_ -]?cuda[_ -]?graphs?|no cuda[_ -]?graphs?|"
                  r"cuda[_ -]?graphs?\s*(?:[:=]\s*)?(?:off|disabled|false|no)\b(?!\s*padding)|"
                  r"\beager\b")
_ON = re.compile(r"cuda[_ -]?graphs?")
_MAX = re.compile(r"cuda[_ -]?graphs?[^0-9;]{0,40}?(?:max[_ -]?(?:bs|batch(?:[_ -]?size)?)|"
                  r"up to|<=|≤)\D{0,6}(\d+)")


_CONCURRENCY = (
    re.compile(r"(?:max[_ -]?)?concurrency\s*(?:of|=|:)?\s*(\d+)"),
    re.compile(r"(\d+)\s*concurrent\s*(?:users?|requests?|clients?|streams?|sessions?|"
               r"connections?)"),
    re.compile(r"closed[- ]loop\D{0,20}?(\d+)\s*(?:users?|clients?)"),
    re.compile(r"(\d+)\s*closed[- ]loop\s*(?:users?|clients?)"),
)
_REQUESTS = re.compile(r"num[_ -]?prompts\s*[=:]?\s*(\d+)|(\d+)\s*(?:prompts|requests)\b")
#: requests of a closed-loop row that does not state them (vLLM benchmark_serving
#: ``--num-prompts`` default)
CLOSED_LOOP_REQUESTS = 1000


def stated_concurrency(row: dict[str, str]) -> int | None:
    """Concurrent users (requests in flight) the row states, or ``None``."""
    text = row_text(row, ("serving_mode", "notes", "framework"))
    for pattern in _CONCURRENCY:
        m = pattern.search(text)
        if m:
            n = int(m.group(1))
            if n < 1:
                raise Unsupported(f"concurrency {n} in the row: must be >= 1")
            return n
    return None


def closed_loop_of(row: dict[str, str], notes: list[str]) -> tuple[int, int]:
    """(users, requests) of a closed-loop row (module docstring)."""
    users = stated_concurrency(row)
    if users is None:
        raise Unsupported("closed loop without a concurrency")
    stated = _stated_requests(row)
    n = stated if stated is not None else CLOSED_LOOP_REQUESTS
    where = ("as the row states" if stated is not None
             else "vLLM benchmark_serving --num-prompts default")
    notes.append(f"closed loop: {users} concurrent users, each sending its next request when "
                 f"the previous one finishes; {n} requests ({where})")
    return users, max(n, users)


def engine_name(row: dict[str, str], framework: str) -> str:
    """``trtllm-0.9``, ``trtllm-1.0``, ``vllm``, ``sglang`` or ``generic``."""
    if framework != "generic":
        return framework
    text = f"{row.get('framework', '')} {row.get('source', '')}".lower()
    for name in ("sglang", "vllm"):
        if name in text:
            return name
    return "generic"


def cuda_graphs_of(row: dict[str, str], framework: str, mode: str,
                   notes: list[str]) -> tuple[tuple[int, ...], bool, bool]:
    """(captured decode batch sizes, padding, up to the engine's ``max_batch_size``) for the
    row (module docstring); ``((), False, False)``: every step eager."""
    text = row_text(row, ("framework", "notes", "serving_mode"))
    engine = engine_name(row, framework)
    if _OFF.search(text):
        notes.append("CUDA graphs: off, as the row states (every kernel pays the host launch)")
        return (), False, False
    m = _MAX.search(text)
    if m:
        top = int(m.group(1))
        if top < 1:
            raise Unsupported(f"CUDA-graph batch size {top} in the row: must be >= 1")
        notes.append(f"CUDA graphs: decode batches up to {top} (as the row states), padded")
        return (top,), True, False
    if engine == "trtllm-1.0" and mode == "ifb":
        notes.append("CUDA graphs: trtllm-bench captures decode batches up to max_batch_size "
                     "with padding (bench/benchmark/utils/general.py)")
        return (), True, True
    defaults: dict[str, tuple[tuple[int, ...], bool, str]] = {
        "trtllm-1.0": (TRTLLM_API_SIZES, False, "TensorRT-LLM LLM API default: decode "
                       "batches 1-32, 64, 128, no padding"),
        "vllm": ((VLLM_MAX_CAPTURE,), True, f"vLLM default: decode batches up to "
                 f"{VLLM_MAX_CAPTURE}, padded"),
        "sglang": ((SGLANG_MAX_CAPTURE,), True, f"SGLang default: decode batches up to "
                   f"{SGLANG_MAX_CAPTURE} (ASSUMPTION: cuda_graph_max_bs), padded"),
    }
    if engine in defaults:
        sizes, pad, why = defaults[engine]
        notes.append(f"CUDA graphs: {why}")
        return sizes, pad, False
    if _ON.search(text):
        notes.append(f"CUDA graphs: on (the row says so), decode batches up to "
                     f"{VLLM_MAX_CAPTURE} padded (ASSUMPTION: vLLM's default capture range)")
        return (VLLM_MAX_CAPTURE,), True, False
    why = ("gptSessionBenchmark --enable_cuda_graph is off by default"
           if engine == "trtllm-0.9" else "the framework's setting is not known")
    notes.append(f"CUDA graphs: off ({why})")
    return (), False, False


#: MLPerf Inference latency bounds (TTFT p99 s, TPOT p99 s) by scenario: Llama-2-70B Server
#: 2 s / 200 ms, its Interactive variant 450 ms / 40 ms (MLPerf Inference rules v4.1-v5.0,
#: "Benchmarks": llama2-70b and llama2-70b-interactive latency constraints)
MLPERF_SERVER_BOUNDS = (2.0, 0.2)
MLPERF_INTERACTIVE_BOUNDS = (0.45, 0.04)


def server_bounds(row: dict[str, str]) -> tuple[float, float, str]:
    """(TTFT bound s, TPOT bound s, where they come from): a bound the row states ("TTFT
    p99 <= 2 s", "TPOT 40 ms") wins, else MLPerf's for the interactive or server scenario."""
    text = row_text(row, ("serving_mode", "notes", "measured_metric"), lower=False)
    low = text.lower()
    base = MLPERF_INTERACTIVE_BOUNDS if "interactive" in low else MLPERF_SERVER_BOUNDS
    where = "MLPerf interactive" if "interactive" in low else "MLPerf server"
    out = list(base)
    for i, name in enumerate(("ttft", "tpot")):
        m = re.search(rf"{name}(?:\s*\(?p\d+\)?)?[^0-9]{{0,20}}?([0-9.]+)\s*(ms|s)\b", low)
        if m:
            out[i] = float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1.0)
            where = "as the row states"
    return out[0], out[1], where


_EP = re.compile(r"\bep\s*[=:]?\s*(\d+)\b|expert[- ]parallel(?:ism|\s+size)?\s*(?:of\s*)?[=:]?"
                 r"\s*(\d+)|ep[_-]size\s*[=:]?\s*(\d+)")
_DEEPEP = re.compile(r"deep[_ -]?ep|low[- ]latency (?:all-to-all|a2a|dispatch)")


def stated_ep(row: dict[str, str]) -> int | None:
    """An expert-parallel size the prose states ("EP32", "EP=72", "expert parallelism 32",
    "--ep-size 16") when the ``ep`` column is empty."""
    text = row_text(row, ("framework", "notes", "serving_mode"))
    m = _EP.search(text)
    if not m:
        return None
    n = int(next(g for g in m.groups() if g))
    if n < 1:
        raise Unsupported(f"expert parallel size {n} in the row: must be >= 1")
    return n


_REDUNDANT = re.compile(r"(\d+)\s*redundant\s*experts?|redundant[_ -]experts?\s*[=:]?\s*(\d+)")


def stated_redundant_experts(row: dict[str, str]) -> int:
    """Redundant expert slots the prose states ("32 redundant experts", SGLang
    ``--ep-num-redundant-experts 32``); 0 when it states none."""
    text = row_text(row, ("framework", "notes", "serving_mode"))
    m = _REDUNDANT.search(text)
    return int(m.group(1) or m.group(2)) if m else 0


_FUSION = re.compile(r"all[_ -]?reduce[_ -]?(?:\+\s*(?:rms)?norm|fusion)|fi_allreduce_fusion|"
                     r"flashinfer[_ -]allreduce[_ -]fusion|residual_rms_norm")


def fused_allreduce_norm_of(row: dict[str, str], notes: list[str]) -> bool:
    """Whether the row states the TP all-reduce fused with the residual add and RMSNorm
    ("allreduce fusion", vLLM ``enable_fi_allreduce_fusion``, SGLang
    ``--enable-flashinfer-allreduce-fusion``, TensorRT-LLM ``RESIDUAL_RMS_NORM``); no
    framework default turns it on (vLLM's is off; TensorRT-LLM's depends on the model)."""
    text = row_text(row, ("framework", "notes", "serving_mode"))
    if not _FUSION.search(text):
        return False
    notes.append("TP all-reduce fused with the residual add and RMSNorm (as the row states)")
    return True


def deepep_of(row: dict[str, str], model: ModelSpec, ep: int, notes: list[str]) -> bool:
    """Whether the row's decode all-to-alls run DeepEP's low-latency kernels: the row names
    DeepEP (SGLang ``--enable-deepep-moe``, DeepSeek's inference system) for an MoE model
    with ``ep`` > 1."""
    text = row_text(row, ("framework", "notes", "serving_mode"))
    if model.moe is None or ep <= 1 or not _DEEPEP.search(text):
        return False
    notes.append(f"MoE all-to-all: DeepEP low-latency kernels in decode steps across nodes "
                 f"(EP{ep}, as the row states), the network model elsewhere")
    return True


#: a benchmark timing whole requests of one batch: its unqualified "latency" is end-to-end
LATENCY_BENCHMARK = r"latency benchmark|benchmark_latency|single[- ]?stream"


def normalized_unit(unit: str) -> tuple[str, float]:
    """(the unit lower-cased without spaces, "tokens" as "tok", "per second" as "/s", "per
    GPU" as "/gpu", parentheses and a leading "output"/"generated" dropped; its "k"
    multiplier: 1000 for "k tok/s", else 1)."""
    u = re.sub(r"\(.*?\)", "", unit.strip().lower())
    u = re.sub(r"^(?:output|generated|generation|decode)\s+", "", u.strip())
    u = re.sub(r"\s*per\s+(?:second|sec|s)\b", "/s", u)
    u = re.sub(r"\s+per\s+", "/", u)
    u = re.sub(r"\s+", "", u).replace("tokens", "tok").replace("toks/", "tok/")
    u = u.replace("second", "s").replace("/sec", "/s")
    if re.match(r"^k(?:tok|tps)", u):
        return u[1:], 1000.0
    return u, 1.0


def latency_kind(row: dict[str, str], mode: str) -> str:
    """Which latency a row's time unit measures: ``e2e`` (the metric names an end-to-end or
    request latency), ``tpot`` (decode modes, or the metric names TPOT/ITL/inter-token) or
    ``ttft`` (prefill and server modes, or the metric names the first token); raises
    :class:`Unsupported` when neither mode nor metric names one."""
    what = row.get("measured_metric", "").lower()
    named = re.search(r"first token|ttft|prefill|per output token|tpot|inter[- ]?token|\bitl\b|"
                      r"decode", what)
    if re.search(r"end[- ]to[- ]end|\be2e\b|request latency", what) or (
            not named and re.search(LATENCY_BENCHMARK, row.get("serving_mode", "").lower())):
        return "e2e"
    if mode in ("tpot", "decode_pool") or re.search(
            r"per output token|tpot|inter[- ]?token|\bitl\b|decode", what):
        return "tpot"
    if mode in ("ttft", "server", "prefill_pool") or re.search(r"first token|ttft|prefill",
                                                                  what):
        return "ttft"
    raise Unsupported(f"unit {row.get('unit')!r}: a latency, but measured_metric "
                      f"{row.get('measured_metric')!r} names no TTFT, TPOT or end-to-end "
                      "latency")


_PERCENTILE = re.compile(r"\b(?:p(50|90|99)|(median)|(50|90|99)(?:th)?[- ]?percentile)\b")


def percentile_of(row: dict[str, str]) -> str:
    """The statistic a latency metric names ("median TTFT", "P99 ITL", "90th percentile"):
    ``p50``, ``p90``, ``p99``, else ``mean``; another percentile (p95) is refused, the
    serving metrics holding only these."""
    what = row.get("measured_metric", "").lower()
    m = _PERCENTILE.search(what)
    if m:
        return "p50" if m.group(2) else f"p{m.group(1) or m.group(3)}"
    other = re.search(r"\bp(\d+(?:\.\d+)?)\b|(\d+)(?:th)? percentile", what)
    if other:
        raise Unsupported(f"measured_metric {row.get('measured_metric')!r}: percentile not "
                          "simulated (mean, median/p50, p90, p99)")
    return "mean"


def stated_requests(row: dict[str, str], lengths: tuple[int, int],
                    table: dict[tuple[int, int], int], default: int) -> tuple[int, str]:
    """(requests, where from) of a throughput row: the number it states ("num-prompts 500",
    "3000 prompts"), else ``table``'s for its (input, output) lengths (trtllm-bench's dataset
    sizes), else ``default``."""
    n = _stated_requests(row)
    if n is not None:
        return max(n, 1), "as the row states"
    if lengths in table:
        return table[lengths], "trtllm-bench table"
    return default, "default"


def _stated_requests(row: dict[str, str]) -> int | None:
    text = row_text(row, ("serving_mode", "notes", "framework"))
    m = _REQUESTS.search(text)
    return int(m.group(1) or m.group(2)) if m else None


_UNMODELLED = ((re.compile(r"dp[_ -]?attention|data[- ]parallel attention"),
                "DP attention as the row states is not modelled: attention runs tensor-parallel "
                "over tp (data-parallel only over ep ranks)"),)


def unmodelled_of(row: dict[str, str], notes: list[str]) -> None:
    """Notes a setting the row states that the simulation does not model (the row still
    runs)."""
    text = row_text(row, ("framework", "notes", "serving_mode"))
    for pattern, note in _UNMODELLED:
        if pattern.search(text) and not stated_ep(row):
            notes.append(note)


def stated_rate(row: dict[str, str]) -> float | None:
    """A request rate the row states ("online chat at 2 requests/s", "QPS 8", "rate: 4
    req/s"), requests/s; ``None`` when it states none (a server row then searches it)."""
    text = row_text(row, ("serving_mode", "notes"))
    m = re.search(r"([0-9]*\.?[0-9]+)\s*(?:req(?:uest)?s?/s(?:ec)?|requests per second|qps|"
                  r"queries/s)", text) or re.search(r"(?:qps|rate)\s*[:=]?\s*([0-9]*\.?[0-9]+)",
                                                    text)
    return float(m.group(1)) if m and float(m.group(1)) > 0 else None


def kv_fraction_of(row: dict[str, str], framework: str, notes: list[str]) -> float:
    """``kv_cache_free_gpu_mem_fraction`` the row states (the largest of a range), else 0.9
    (TensorRT-LLM's default, noted for TensorRT-LLM 1.0 rows)."""
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

#: integer-quantized weights (pattern on ``precision``, storage dtype, GEMM dtype or None for
#: the storage format where the GPU has it): 4-bit weight-only (AWQ, GPTQ, W4A16) stored as
#: the catalog's 4-bit format and multiplied in BF16; W4A8 with FP8 GEMMs; 8-bit weight-only
#: (W8A16) with BF16 GEMMs; W8A8/INT8 (SmoothQuant) as 8-bit storage and GEMMs (Hopper's INT8
#: and FP8 dense peaks are equal, H100 datasheet)
_INT_WEIGHTS = ((r"w4a16|\bint4\b|\bawq\b|gptq|4[- ]?bit", "fp4", "bf16"),
                (r"w4a8", "fp4", "fp8"),
                (r"w8a16", "fp8", "bf16"),
                (r"w8a8|\bint8\b|smoothquant", "fp8", None))


def integer_weights_of(row: dict[str, str]) -> tuple[str, str | None, str] | None:
    """(storage dtype, GEMM dtype or None, note) for integer-quantized weights the
    ``precision`` states, else ``None``. ASSUMPTION: 4-bit integer weights with per-group
    scales take the bytes of the catalog's 4-bit format (4.5 bits per value), 8-bit ones one
    byte."""
    text = row.get("precision", "").lower()
    for pattern, weight, gemm in _INT_WEIGHTS:
        if re.search(pattern, text):
            return weight, gemm, (f"precision {row.get('precision')!r}: integer weights stored "
                                  f"as {weight} bytes (ASSUMPTION), GEMMs in "
                                  f"{gemm or weight + ' where the GPU has it, else bf16'}")
    return None

__all__ = [
    "CLOSED_LOOP_REQUESTS",
    "LATENCY_BENCHMARK",
    "MLPERF_INTERACTIVE_BOUNDS",
    "MLPERF_SERVER_BOUNDS",
    "SGLANG_MAX_CAPTURE",
    "TRTLLM_API_SIZES",
    "VLLM_MAX_CAPTURE",
    "closed_loop_of",
    "cuda_graphs_of",
    "deepep_of",
    "engine_name",
    "fused_allreduce_norm_of",
    "integer_weights_of",
    "kv_fraction_of",
    "latency_kind",
    "normalized_unit",
    "percentile_of",
    "server_bounds",
    "stated_concurrency",
    "stated_ep",
    "stated_rate",
    "stated_redundant_experts",
    "stated_requests",
    "unmodelled_of",
]
