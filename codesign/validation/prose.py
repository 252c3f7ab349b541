"""Reading the cells of a published-run row as their authors wrote them.

Each reader is a table of ``(pattern, meaning)`` tried in order (first match wins), so a new
phrasing is one line, and every reading returns a note that the validation report lists as an
assumption. Framework vocabularies covered: Megatron-LM/Core and NeMo/Megatron-Bridge
(``--use-distributed-optimizer``, ``DistributedFusedAdam``, "virtual pipeline"), DeepSpeed
("ZeRO stage 2", "ZeRO-Infinity", "ZeRO-Offload"), PyTorch FSDP/torchtitan (``FULL_SHARD``,
``SHARD_GRAD_OP``, ``HYBRID_SHARD``, ``reshard_after_forward``), MaxText/PaLM (batch in tokens),
MLPerf and throughput reports ("~", "up to", ranges, units in the cell).

Sources of the meanings: DeepSpeed ZeRO docs (deepspeed.readthedocs.io, "ZeRO": stage 1 shards
optimizer states, 2 adds gradients, 3 adds parameters; ZeRO-Offload = stage 2 + CPU offload,
ZeRO-Infinity = stage 3 + NVMe/CPU offload); PyTorch FSDP docs (``ShardingStrategy``:
FULL_SHARD ~ ZeRO-3, SHARD_GRAD_OP ~ ZeRO-2, HYBRID_SHARD = FULL_SHARD within a node and
replicas across nodes, NO_SHARD ~ DDP); Megatron-Core docs (distributed optimizer shards
optimizer states and gradients' reduction = ZeRO-1 semantics, ``--use-distributed-optimizer``);
NeMo (``MegatronDistributedFusedAdam`` / ``distributed_fused_adam`` = the distributed optimizer).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: qualifiers around a number: (pattern, note); the number itself is read as written
_QUALIFIERS: tuple[tuple[str, str], ...] = (
    (r"^(?:~|≈|∼|about|approximately|approx\.?|around|roughly|circa|ca\.|nearly|almost)\s*",
     "approximate figure read as written"),
    (r"^(?:up to|upto|max\.?|maximum|peak|as high as)\s*", "upper figure ('up to') read as "
                                                            "the measured value"),
    (r"^(?:>=|≥|>|at least|over|more than|above|exceeding)\s*", "lower bound read as the "
                                                                "measured value"),
    (r"^(?:<=|≤|<|under|less than|below|at most)\s*", "upper bound read as the measured value"),
)
#: a metric's own name written before its number ("MFU 38%", "HFU: 52%", "step time 1.2 s")
_LABEL = re.compile(r"^(?:mfu|hfu|tflop/?s|tflops|throughput|step time|iteration time|"
                    r"time per (?:step|iteration)|tokens/s|tok/s|tps)\s*[:=]?\s*(?=[~≈0-9.<>]|"
                    r"about|approx|around|up to)", re.IGNORECASE)
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^({_NUMBER})\s*(?:-|–|—|to|~)\s*({_NUMBER})(?![0-9])")
_SINGLE = re.compile(rf"^({_NUMBER})")
#: magnitude suffixes directly after a number
_MAGNITUDE = {"k": 1e3, "K": 1e3, "M": 1e6, "m": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}

#: time units to seconds; (pattern, factor), matched right after the number
_TIME_UNITS: tuple[tuple[str, float], ...] = (
    (r"^(?:ms|msec|millisecond)", 1e-3),
    (r"^(?:us|µs|μs|usec|microsecond)", 1e-6),
    (r"^(?:min|minute)", 60.0),
    (r"^(?:h|hr|hour)\b", 3600.0),
    (r"^(?:s|sec|second)", 1.0),
)


@dataclass(frozen=True)
class Number:
    """A number read from a cell, with what reading it took."""

    value: float
    rest: str  # the text after the number (units, qualifiers)
    notes: tuple[str, ...] = ()
    suffix: str = ""  # the magnitude suffix written after it ("k", "M", ...), if any


def read_number(text: str) -> Number | None:
    """The first number of a free-text cell: qualifiers ("~", "about", "up to", ">"), ranges
    ("380-400" → 390, the midpoint) and magnitude suffixes ("4M" → 4e6, "1.5k") understood;
    thousands separators ignored. ``None`` when the cell holds no number."""
    s = text.strip().replace(",", "").replace("\u202f", "").replace("\u00a0", " ")
    s = _LABEL.sub("", s)
    notes: list[str] = []
    for pattern, note in _QUALIFIERS:
        m = re.match(pattern, s, flags=re.IGNORECASE)
        if m:
            s = s[m.end():]
            notes.append(note)
            break
    m = _RANGE.match(s)
    if m:
        lo, hi = float(m.group(1)), float(m.group(2))
        if hi > lo:
            notes.append(f"range {m.group(0).strip()} read as its midpoint {(lo + hi) / 2:g}")
            return Number((lo + hi) / 2, s[m.end():].strip(), tuple(notes))
    m = _SINGLE.match(s)
    if not m:
        return None
    value, rest = float(m.group(1)), s[m.end():]
    suffix = ""
    # the suffix directly after the number, or after one space when a word or the end follows
    # it ("1.2 M tokens/s", "4 M tokens"; never "400 TFLOP/s" or "12 ms")
    gap = 1 if rest[:1] == " " and rest[1:2] in _MAGNITUDE and rest[2:3] in ("", " ") else 0
    if rest[gap:gap + 1] in _MAGNITUDE and rest[gap:gap + 1] and \
            not rest[gap + 1:gap + 2].isalpha():
        value *= _MAGNITUDE[rest[gap]]
        suffix, rest = rest[gap], rest[gap + 1:]
    if not math.isfinite(value):  # "1e400": no number a measurement can hold
        return None
    return Number(value, rest.strip(), tuple(notes), suffix)


#: a number with an optional magnitude suffix ("1.2k", "380"), as metric prose writes it
_QTY = r"(\d+(?:\.\d+)?)\s*([km](?![a-z]))?\s*"
_PER_DEVICE = r"\s*(?:/|per)\s*(?:gpu|device|chip|accelerator|xpu)\b"
_PER_SECOND = r"(?:/\s*s(?:ec)?\b|per\s+sec(?:ond)?\b)"
#: (pattern, kind, scale); first match wins. What a free-text measurement cell (the schema's
#: ``other_measured``) states when the metric columns are empty, as reports write it: step
#: time ("2.3 s/step", "iteration time of 850 ms"), tokens/s per device or in all ("3,100
#: tokens/s/GPU", "1.2M tokens per second"), samples/s, TFLOP/s per device, aggregate
#: PFLOP/s / EFLOP/s ("aggregate 502 PFLOP/s"), MFU / HFU. ``kind`` names the quantity:
#: a metric column, ``tflops_total`` (all devices, TFLOP/s) or ``samples_per_s``; the
#: reading is multiplied by ``scale`` (ms -> s, PFLOP/s -> TFLOP/s).
OTHER_METRIC_PATTERNS: tuple[tuple[str, str, float], ...] = (
    (rf"{_QTY}(ms|s|sec|seconds?)\s*(?:/|per)\s*(?:step|iter(?:ation)?|batch)\b",
     "iteration_time_s", 1.0),
    (r"(?:step|iteration|iter)[- ]time\s*(?:of|=|:|was|is|~|≈|about|\s)*"
     rf"{_QTY}(ms|s|sec|seconds?)\b", "iteration_time_s", 1.0),
    (rf"{_QTY}tok(?:en)?s?\s*{_PER_SECOND}{_PER_DEVICE}", "tokens_per_s_per_gpu", 1.0),
    (rf"{_QTY}tok(?:en)?s?\s*{_PER_SECOND}", "tokens_per_s_total", 1.0),
    (rf"{_QTY}(?:samples|sequences|seqs)\s*{_PER_SECOND}", "samples_per_s", 1.0),
    (rf"{_QTY}tflop/?s{_PER_DEVICE}", "tflops_per_gpu", 1.0),
    (rf"{_QTY}pflop/?s\b", "tflops_total", 1e3),
    (rf"{_QTY}eflop/?s\b", "tflops_total", 1e6),
    (r"\bmfu\s*(?:of|=|:|was|is|~|≈|about|\s)*(\d+(?:\.\d+)?)()\s*%", "mfu_pct", 1.0),
    (r"(\d+(?:\.\d+)?)()\s*%\s*(?:model\s+flops?\s+utili[sz]ation|mfu)\b", "mfu_pct", 1.0),
    (r"\bhfu\s*(?:of|=|:|was|is|~|≈|about|\s)*(\d+(?:\.\d+)?)()\s*%", "hfu_pct", 1.0),
    (r"(\d+(?:\.\d+)?)()\s*%\s*(?:hardware\s+flops?\s+utili[sz]ation|hfu)\b", "hfu_pct", 1.0),
)


def _no_thousands(text: str) -> str:
    """``text`` with the thousands separators of its numbers dropped ("3,200" -> "3200"),
    other commas kept."""
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)


#: magnitudes of a count as reports abbreviate or spell them ("1.72M GPU hours", "2T tokens",
#: "180K", "2 trillion tokens")
_COUNT_MAGNITUDE = {**{k.lower(): v for k, v in _MAGNITUDE.items()}, "thousand": 1e3,
                    "million": 1e6, "billion": 1e9, "trillion": 1e12}
_COUNT_SCALE = r"((?:k|m|b|t)(?![a-z])|thousand|million|billion|trillion)?\s*"
_COUNT = rf"(?<![\w.])(\d+(?:\.\d+)?)\s*{_COUNT_SCALE}"
#: device hours, the device optionally named ("H800 GPU hours", "TPU-v4 chip hours")
_DEVICE_HOURS = (r"(?:[a-z][\w-]*\s+)?(?:gpu|tpu|chip|device|accelerator)[- ]?hours?"
                 r"|[a-z]+\d+[a-z]*[- ]hours?")
#: (pattern, group of the device hours, group of the tokens); a training run's cost as papers
#: state it: "1,720,320 GPU hours for 2.0T tokens" (Llama 2 Table 2 with its token count),
#: "180K H800 GPU hours per trillion tokens" (DeepSeek-V3 Sec. 1), "2T tokens in 1.7M GPU
#: hours"; a missing token count after "per" is one ("per trillion tokens")
GPU_HOURS_PATTERNS: tuple[tuple[str, int, int], ...] = (
    (rf"{_COUNT}(?:{_DEVICE_HOURS})\s*(?:for|per|to train on|over|on)\s*(?:a\s+|one\s+)?"
     rf"(?:(\d+(?:\.\d+)?)\s*)?{_COUNT_SCALE}tokens?\b",
     1, 3),
    (rf"{_COUNT}tokens?\s*(?:in|with|using|took|for)\s*{_COUNT}(?:{_DEVICE_HOURS})", 3, 1),
)


def _count(m: re.Match[str], group: int) -> float:
    """The count of ``m``'s number group ``group`` times the magnitude in the next group (a
    magnitude without a number, "per trillion tokens", is one of it)."""
    number, magnitude = m.group(group), m.group(group + 1)
    return float(number or 1.0) * _COUNT_MAGNITUDE.get(magnitude or "", 1.0)


def read_gpu_hours_rate(text: str) -> float | None:
    """Tokens per second per device from a run's cost in device hours for a token count
    (:data:`GPU_HOURS_PATTERNS`): ``tokens / (hours x 3600)``; ``None`` when the text
    states no such pair."""
    low = _no_thousands(text.lower())
    for pattern, hours_at, tokens_at in GPU_HOURS_PATTERNS:
        m = re.search(pattern, low)
        if m is None or (m.group(tokens_at) is None and m.group(tokens_at + 1) is None):
            continue
        hours, tokens = _count(m, hours_at), _count(m, tokens_at)
        if hours > 0 and tokens > 0:
            return tokens / (hours * 3600.0)
    return None


def read_other_metric(text: str) -> tuple[str, float] | None:
    """The measurement a free-text cell states (:data:`OTHER_METRIC_PATTERNS`, then a cost in
    device hours for a token count, :func:`read_gpu_hours_rate`): ``(kind, value)`` with
    ``value`` in the kind's unit (seconds, tokens/s, TFLOP/s, %); ``None`` when it states none
    of them."""
    low = _no_thousands(text.lower())
    rate = read_gpu_hours_rate(low)
    if rate is not None:
        return "tokens_per_s_per_gpu", rate
    for pattern, kind, scale in OTHER_METRIC_PATTERNS:
        m = re.search(pattern, low)
        if not m:
            continue
        value = float(m.group(1)) * {"k": 1e3, "m": 1e6}.get(m.group(2) or "", 1.0) * scale
        if kind == "iteration_time_s" and m.group(3) == "ms":
            value *= 1e-3
        return kind, value
    return None


def read_seconds(text: str) -> Number | None:
    """A duration in seconds: "1.2 s", "850 ms", "2.5 min", "~12 s/iter" (no unit: seconds)."""
    n = read_number(text)
    if n is None:
        return None
    for pattern, factor in _TIME_UNITS:
        if re.match(pattern, n.rest, flags=re.IGNORECASE):
            if factor != 1.0:
                return Number(n.value * factor, n.rest,
                              (*n.notes, f"'{text.strip()}' read as {n.value * factor:g} s"))
            return n
    return n


# --- ZeRO / FSDP ---------------------------------------------------------------------------

#: (pattern on the lower-cased cell, ZeRO stage, note); the first match wins. ``None`` as
#: stage: "off" (the framework's no-sharding default applies)
ZERO_PATTERNS: tuple[tuple[str, int | None, str], ...] = (
    (r"zero[-_ ]?infinity", 3, "ZeRO-Infinity: ZeRO-3 (its CPU/NVMe offload is not modelled)"),
    (r"zero[-_ ]?offload", 2, "ZeRO-Offload: ZeRO-2 (its CPU offload is not modelled)"),
    (r"zero[-_ ]?\+\+|zero\+\+", 3, "ZeRO++: ZeRO-3 (its quantized collectives are not "
                                     "modelled)"),
    (r"zero[-_ ]?(?:stage|level)?[-_ =:]*([0-3])\b", -1, "ZeRO stage as stated"),
    (r"\bstage[-_ =:]*([0-3])\b", -1, "ZeRO stage as stated"),
    (r"distributed[-_ ]?optimi[sz]er|distributed[-_ ]?fused[-_ ]?adam|distributedfusedadam|"
     r"dist[-_ ]?opt|zeroredundancyoptimizer|zero[-_ ]?redundancy|optimi[sz]er[-_ ]?(?:state[s]? )?"
     r"shard|shard(?:ed|ing)[-_ ]optimi[sz]er", 1,
     "distributed optimizer (optimizer states sharded over data-parallel ranks): ZeRO-1"),
    (r"reshard[-_ ]?after[-_ ]?forward\s*[=:]?\s*(?:false|0|no)|not resharded|no reshard|"
     r"keeps? param|params? not resharded", 2,
     "FSDP keeping parameters after forward: ZeRO-2 semantics"),
    (r"shard[-_ ]?grad[-_ ]?op", 2, "FSDP SHARD_GRAD_OP: ZeRO-2"),
    (r"hybrid[-_ ]?shard|\bhsdp\b", 3, "FSDP HYBRID_SHARD: ZeRO-3 over the data-parallel group "
                                       "(the replication across nodes is not modelled)"),
    (r"no[-_ ]?shard|\bddp\b", None, "FSDP NO_SHARD / DDP: no sharding"),
    (r"fsdp\s*[:=(]?\s*(?:0|off|no|false|disabled|none)\b", None, "FSDP off"),
    (r"full[-_ ]?shard|fully[-_ ]?sharded|fsdp|zero[-_ ]?3|sharded data parallel", 3,
     "FSDP FULL_SHARD: ZeRO-3"),
    (r"^(?:0|none|off|no|false|disabled|n/?a)$", None, "no ZeRO/FSDP"),
    # a bare stage number, as DeepSpeed configs write ``"zero_optimization": {"stage": 2}``
    (r"^([1-3])$", -1, "a bare 1-3 in the ZeRO/FSDP column read as the ZeRO stage"),
    # a bare larger number is a sharding-group size: NeMo / Megatron-Bridge tables' FSDP
    # column ("FSDP > 0: use FSDP with sharding group size = #GPUs / (TP x PP)",
    # Megatron-Bridge docs/performance-summary.md, Nomenclature); no ZeRO stage exceeds 3
    (r"^(?:[4-9]|[1-9][0-9]+)$", 3, "a number above 3 in the ZeRO/FSDP column is an FSDP "
                                     "sharding-group size (Megatron-Bridge tables): FSDP "
                                     "FULL_SHARD, ZeRO-3"),
)


def read_zero(text: str) -> tuple[int | None, str] | None:
    """The ZeRO stage a ``zero_fsdp`` cell means, with the note; ``(None, note)`` when it says
    sharding is off; ``None`` when it says nothing (empty, "not stated", "?")."""
    z = text.strip().lower()
    if not z or re.fullmatch(r"not stated|unknown|\?|-|n\.?s\.?", z):
        return None
    for pattern, stage, note in ZERO_PATTERNS:
        m = re.search(pattern, z)
        if m:
            if stage == -1:
                return int(m.group(1)), f"{note}: ZeRO-{m.group(1)}"
            return stage, note
    return None


# --- switches, recompute, interleaving, precision -------------------------------------------

_YES = r"yes|y|true|on|enabled?|used|1"
_NO = r"no|n|false|off|disabled?|none|not used|0"


#: token dropping named without a capacity factor ("tokendrop", "token dropping", "drop
#: tokens"), never "dropless"
_TOKEN_DROP = re.compile(r"token[-_ ]?drop(?!less)|drop(?:ping|ped)?\s+(?:the\s+)?(?:excess\s+)?"
                         r"tokens|capacity[-_ ]based (?:routing|dispatch)")
#: the capacity factor such a row is read with: Megatron-Core's token-drop runs
#: (Megatron-Bridge / NeMo performance recipes: ``moe_expert_capacity_factor=1.0`` with
#: ``moe_pad_expert_input_to_capacity=True``)
DEFAULT_DROP_CAPACITY = 1.0


#: a stated capacity factor; group 1 is its value
_CAPACITY_FACTOR = re.compile(r"(?:capacity[ _-]?factor|\bcf)\s*(?:of|=|:)?\s*([0-9]*\.?[0-9]+)")


def states_capacity_factor(text: str) -> bool:
    """Whether ``text`` gives a capacity factor's value (not only says tokens are dropped)."""
    return _CAPACITY_FACTOR.search(text.lower()) is not None


def read_capacity_factor(text: str) -> float | None:
    """An MoE expert capacity factor a row states ("capacity factor 1.25", "CF=2",
    "capacity_factor: 1.0"), :data:`DEFAULT_DROP_CAPACITY` when it says tokens are dropped
    without a factor ("tokendrop"); ``None`` when it states none or says dropless."""
    low = text.lower()
    m = _CAPACITY_FACTOR.search(low)
    if m is None:
        said = _TOKEN_DROP.search(low) and not re.search(
            r"(?:no|without|w/o|zero|never)\s+(?:\w+\s+)?(?:token[-_ ]?drop|drop)", low)
        return DEFAULT_DROP_CAPACITY if said else None
    if re.search(r"dropless|no token drop", low) and "capacity" not in low:
        return None
    value = float(m.group(1))
    return value if value > 0 else None


#: (pattern, overlapped); first match wins. The MoE all-to-all overlap across micro-batches as
#: reports write it: Megatron-Core / Megatron-Bridge (``--overlap-moe-expert-parallel-comm``,
#: ``moe_a2a_overlap``, "EP A2A overlap", "1F1B A2A overlap"), DeepSeek-V3 (DualPipe,
#: "all-to-all ... fully overlapped", "computation-communication overlap")
_A2A = r"\b(?:a2a|all[- ]?to[- ]?all|alltoall|ep|expert[- ]parallel(?:ism)?|moe|dispatch|combine)"
EP_OVERLAP_PATTERNS: tuple[tuple[str, bool], ...] = (
    (r"moe_a2a_overlap\s*[=:]\s*(?:false|0|off|no)\b|overlap[-_]moe[-_]expert[-_]parallel"
     r"[-_]comm\s*[=:]\s*(?:false|0|off|no)\b", False),
    (rf"(?:no|without|w/o|disabled?)\s+(?:\w+\s+){{0,2}}{_A2A}\s+(?:comm\w*\s+)?overlap"
     rf"|{_A2A}\s+(?:comm\w*\s+)?overlap\w*\s*(?:[=:]\s*)?(?:off|no|false|disabled)\b"
     rf"|{_A2A}\s+(?:comm\w*\s+)?(?:is|are)\s+not\s+overlapped", False),
    (r"moe_a2a_overlap|overlap[-_]moe[-_]expert[-_]parallel[-_]comm|dual[- ]?pipe", True),
    (rf"{_A2A}\s+(?:comm\w*\s+)?overlap"
     rf"|overlap\w*\s+(?:of\s+|the\s+)*{_A2A}\b"
     rf"|{_A2A}\s+(?:comm\w*\s+)?(?:is\s+|are\s+)?(?:fully\s+|completely\s+)?"
     r"(?:overlapped|hidden)"
     r"|computation[- ]communication overlap", True),
)


def _first_match(patterns: tuple[tuple[str, T], ...], text: str) -> T | None:
    """The meaning of the first of ``(pattern, meaning)`` that ``text`` matches, else
    ``None`` (the readers' tables: first match wins)."""
    return next((meaning for pattern, meaning in patterns if re.search(pattern, text)), None)


def read_ep_overlap(text: str) -> bool | None:
    """Whether a row's prose says the MoE all-to-alls overlap other micro-batches' computation
    (:data:`EP_OVERLAP_PATTERNS`); ``None`` when it says nothing of it."""
    return _first_match(EP_OVERLAP_PATTERNS, text.lower())


#: (pattern, overlapped); first match wins. DeepSpeed's ``overlap_comm`` switch as a row
#: writes it ("overlap_comm: true", "overlap_comm=1", "overlap comm enabled")
OVERLAP_COMM_PATTERNS: tuple[tuple[str, bool], ...] = (
    (r"overlap[_ ]comm\W{0,3}(?:false|off|0|disabled)", False),
    (r"overlap[_ ]comm\W{0,3}(?:true|on|1|enabled)", True),
)


def read_overlap_comm(text: str) -> bool | None:
    """DeepSpeed's ``overlap_comm`` as a row's prose states it
    (:data:`OVERLAP_COMM_PATTERNS`); ``None`` when it says nothing of it."""
    return _first_match(OVERLAP_COMM_PATTERNS, text.lower())


#: ZeRO-3 whose parameter gathers are two-level (inside the node, then across nodes per
#: rail), as its authors name it: MiCS (Zhang et al. 2022, arXiv 2205.00119, Sec. 3.3
#: "hierarchical communication"; DeepSpeed ``mics_hierarchical_params_gather``), the
#: SageMaker model parallel library's sharded data parallelism built on it (BloombergGPT, Wu et
#: al. 2023, Sec. 2.4), ZeRO++'s hierarchical partitioning (hpZ, Wang et al. 2023,
#: arXiv 2306.10209)
HIERARCHICAL_ZERO3_PATTERN = (r"\bmics\b|mics_hierarchical|sagemaker (?:distributed )?model "
                              r"parallel|\bsmp\b|(?<!fully )sharded data parallelism"
                              r"|zero\+\+|\bhpz\b|hierarchical partition|zero_hpz")


def read_hierarchical_zero3(text: str) -> bool:
    """Whether the prose names a ZeRO-3 implementation whose gathers are two-level
    (:data:`HIERARCHICAL_ZERO3_PATTERN`)."""
    return re.search(HIERARCHICAL_ZERO3_PATTERN, text.lower()) is not None


_TP = r"(?:tp|tensor[- ]parallel(?:ism)?)"
#: (pattern, overlapped); first match wins. Tensor-parallel communication overlapped with the
#: GEMMs that produce or consume it, as the frameworks name it: torchtitan's "Async TP"
#: (``enable_async_tensor_parallel``: all-gather/matmul and matmul/reduce-scatter
#: micro-pipelined over symmetric memory) against its "vanilla TP", Megatron-Core's
#: ``--tp-comm-overlap`` / ``tp_comm_overlap`` (Transformer Engine userbuffers). A speed-up
#: figure quoted for it ("async TP speedup 1.09x") reports a comparison, not this run's setting.
TP_OVERLAP_PATTERNS: tuple[tuple[str, bool], ...] = (
    (rf"vanilla\s+{_TP}|(?:no|without|w/o)\s+async(?:hronous)?[- ]?{_TP}"
     rf"|async(?:hronous)?[- ]?{_TP}\s*(?:[=:]\s*)?(?:off|false|disabled)\b"
     r"|enable_async_tensor_parallel\W{0,3}(?:false|0)\b"
     r"|tp[-_ ]comm[-_ ]overlap\W{0,3}(?:false|off|0|no|disabled)\b"
     rf"|(?:no|without|w/o)\s+{_TP}\s+(?:comm\w*\s+)?overlap", False),
    (rf"async(?:hronous)?[- ]?{_TP}(?!\s*(?:speed[- ]?ups?|gains?)\b)"
     r"|enable_async_tensor_parallel|tp[-_ ]comm[-_ ]overlap"
     rf"|{_TP}\s+(?:comm\w*\s+)?overlap", True),
)


#: the parallelism each plan column names, as prose spells it
_DEGREE_WORDS = {"tp": "tensor", "pp": "pipeline", "cp": "context", "ep": "expert"}


def read_degree(text: str, col: str) -> int | None:
    """The degree of parallelism ``col`` (``tp``, ``pp``, ``cp``, ``ep``) a row's prose
    states, or ``None``: "TP=8", "PP 4", "tp: 2", "8-way tensor parallelism", "16-way
    zero-bubble pipeline", "expert parallelism of 8", "context parallel size 2"; "no tensor
    parallelism" / "without pipeline parallelism" read as 1. Expert tensor parallelism
    ("ETP", "expert tensor parallel") is not TP, a virtual / interleaved pipeline ("VPP") is
    not PP. Megatron's argument names read too ("--tensor-model-parallel-size 8",
    "pipeline_model_parallel_size: 4"), and with no pipeline named, "12-way model parallelism"
    / "model parallel size 2" is TP."""
    word = _DEGREE_WORDS[col]
    # Megatron's names: --tensor-model-parallel-size 8, pipeline_model_parallel_size: 4
    low = re.sub(r"\b(tensor|pipeline|expert|context)[-_ ]model[-_ ]parallel"
                 r"(?:[-_ ](size|degree))?",
                 lambda m: f"{m.group(1)} parallel {m.group(2) or ''}", text.lower())
    found = re.search(rf"(?<![a-z]){col}\s*(?:=|:|size|degree)?\s*(\d+)\b", low)
    if found:
        return int(found.group(1))
    for m in re.finditer(rf"(\d+)[- ]way\s+((?:[a-z-]+\s+){{0,2}}?){word}[- ]?parallel|"
                         rf"(\d+)[- ]way\s+((?:[a-z-]+\s+){{0,2}}?){word}\b|"
                         rf"((?:[a-z-]+\s+)?){word}[- ]parallel(?:ism|ization)?(?:\s+(?:size|"
                         rf"degree|dimension))?\s*(?:of|=|:)?\s*(\d+)\b", low):
        between = " ".join(g for g in (m.group(2), m.group(4), m.group(5)) if g)
        if (col == "tp" and "expert" in between) or (col == "pp" and re.search(
                r"virtual|interleav", between)):
            continue
        return int(m.group(1) or m.group(3) or m.group(6))
    if re.search(rf"\b(?:no|without)\s+(?:[a-z-]+\s+)?{word}[- ]parallel", low):
        return 1
    if col == "tp" and not re.search(r"pipeline|\bpp\b|expert", low):
        # plain "model parallelism" with no pipeline is tensor parallelism (Megatron-LM's
        # --model-parallel-size before pipelining, GPT-NeoX, Mesh TensorFlow / PaLM)
        mp = re.search(r"(\d+)[- ]way\s+(?:[a-z-]+\s+){0,2}?model[- ]parallel|"
                       r"\bmodel[-_ ]parallel(?:ism)?(?:[-_ ](?:size|degree))?"
                       r"\s*(?:of|=|:)?\s*(\d+)\b", low)
        if mp:
            return int(mp.group(1) or mp.group(2))
    return None


def read_tp_overlap(text: str) -> bool | None:
    """Whether a row's prose says tensor-parallel communication overlaps the GEMMs
    (:data:`TP_OVERLAP_PATTERNS`); ``None`` when it says nothing of it."""
    return _first_match(TP_OVERLAP_PATTERNS, text.lower())


_HALF = r"(?:bf16|bfloat16|fp16|half[- ]precision|16[- ]bit)"
_FULL = r"(?:fp32|float32|full[- ]precision|32[- ]bit)"
_GRAD_OP = r"(?:reduc\w*|all[- ]?reduce\w*|reduce[- ]scatter\w*|accumulat\w*|sync\w*|comm\w*)"
#: (pattern, gradients reduced in fp32); first match wins. Megatron's switch as configs and
#: command lines write it ("grad_reduce_in_fp32: false", "--accumulate-allreduce-grads-in-fp32"),
#: and prose ("bf16 gradient reduction",
#: "gradients all-reduced in fp32", "reduce_dtype=bfloat16" of PyTorch FSDP's
#: MixedPrecisionPolicy, DeepSpeed's "communication_data_type": "bf16")
GRAD_REDUCE_PATTERNS: tuple[tuple[str, bool], ...] = (
    (r"grad(?:ient)?s?[_ -]reduce[_ -]in[_ -]fp32\W{0,3}(?:false|off|0|no)\b", False),
    (r"grad(?:ient)?s?[_ -]reduce[_ -]in[_ -]fp32\W{0,3}(?:true|on|1|yes)\b", True),
    (r"accumulate[_-]allreduce[_-]grads[_-]in[_-]fp32", True),
    (rf"(?:reduce_dtype|communication_data_type|grad(?:ient)?_sync_dtype)\W{{0,4}}(?:torch\.)?{_HALF}",
     False),
    (rf"(?:reduce_dtype|communication_data_type|grad(?:ient)?_sync_dtype)\W{{0,4}}(?:torch\.)?{_FULL}",
     True),
    (rf"{_HALF}\s+grad(?:ient)?s?\s+{_GRAD_OP}", False),
    (rf"{_FULL}\s+grad(?:ient)?s?\s+{_GRAD_OP}", True),
    (rf"grad(?:ient)?s?\s+(?:are\s+)?{_GRAD_OP}\s+in\s+{_HALF}", False),
    (rf"grad(?:ient)?s?\s+(?:are\s+)?{_GRAD_OP}\s+in\s+{_FULL}", True),
)


def read_grad_reduce_in_fp32(text: str) -> bool | None:
    """Whether a row's prose says gradients are accumulated and reduced in fp32 (``True``) or
    in bf16 (``False``) (:data:`GRAD_REDUCE_PATTERNS`); ``None`` when it says nothing of it."""
    return _first_match(GRAD_REDUCE_PATTERNS, text.lower())


#: (pattern, dispatcher); first match wins. MoE token dispatchers as reports name them:
#: DeepEP / HybridEP and Megatron-Core's flex dispatcher forward a token once per destination
#: node (``deepep``); DeepSeek-V3 describes the same kernels as IB-then-NVLink forwarding
#: under node-limited routing; NCCL's all-to-all dispatcher sends every copy (``alltoall``)
DISPATCHER_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?:no|without|w/o)\s+(?:deep[-_ ]?ep|hybrid[-_ ]?ep)"
     r"|deep[-_ ]?ep\s*[=:]\s*(?:false|off|no)\b"
     r"|(?:token[-_ ]dispatcher(?:[-_ ]type)?|dispatcher)\s*[=:]?\s*['\"]?all[-_ ]?to[-_ ]?all"
     r"|all[-_ ]?to[-_ ]?all\s+(?:token\s+)?dispatcher", "alltoall"),
    (r"deep[-_ ]?ep|hybrid[-_ ]?ep|flex(?:ible)?[-_ ](?:token[-_ ])?dispatcher"
     r"|moe_flex_dispatcher|dispatcher(?:[-_ ]type)?\s*[=:]?\s*['\"]?flex"
     r"|nvlink[- ]forward|node[- ]limited routing", "deepep"),
)


def read_dispatcher(text: str) -> str | None:
    """The MoE token dispatcher a row's prose names (:data:`DISPATCHER_PATTERNS`):
    ``deepep``, ``alltoall``, or ``None`` when it names none."""
    return _first_match(DISPATCHER_PATTERNS, text.lower())


#: expert tensor parallelism as rows write it: "ETP 1", "etp=2", "ETP1",
#: "expert_tensor_parallel_size: 1", "--expert-tensor-parallel-size 4", "expert TP 2",
#: "expert tensor parallelism of 1", "expert-TP=1"
_EXPERT_TP = re.compile(
    r"(?<![a-z])etp\s*[=:]?\s*(\d+)"
    r"|expert[-_ ]tensor[-_ ](?:model[-_ ])?parallel(?:ism|[-_ ]size)?"
    r"(?:\s+(?:of|size|degree))?\s*[=:]?\s*(\d+)"
    r"|expert[-_ ]tp\s*[=:]?\s*(\d+)")


def read_expert_tp(text: str) -> int | None:
    """The expert tensor-parallel size a row's prose states (Megatron-Core
    ``--expert-tensor-parallel-size``), or ``None``."""
    m = _EXPERT_TP.search(text.lower())
    if m is None:
        return None
    value = int(next(g for g in m.groups() if g is not None))
    return value if value > 0 else None


#: (pattern, kernel); first match wins. Attention implementations as rows name them:
#: ``unfused`` = softmax attention with the score matrix in HBM (``flash_attention`` off);
#: xformers' memory-efficient attention (its CUTLASS kernels, which the FlashAttention-2 paper,
#: arXiv 2307.08691 Fig. 4-5, measures at or below FlashAttention-1 speed) reads as ``fa1``;
#: ``fa1`` / ``triton`` / ``fa2`` / ``auto`` = the fused kernel families of
#: :func:`codesign.hardware.compute.attention_fractions` (``auto``: the part's fastest:
#: FlashAttention-3/4, cuDNN / Transformer Engine fused attention)
ATTENTION_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?:no|without|w/o)\s+flash[-_ ]?att(?:n|ention)"
     r"|flash[-_ ]?attention\s*[=:]\s*(?:false|off|no)\b|unfused\s+(?:softmax\s+)?attention"
     r"|standard\s+attention|attn_impl\s*[=:\s]\s*['\"]?torch\b|eager\s+attention", "unfused"),
    (r"flash[-_ ]?attn\s*==\s*1\.|flash[-_ ]?attention[-_ ]?v?1\b|\bfa[-_ ]?1\b", "fa1"),
    (r"attn_impl\s*[=:\s]\s*['\"]?triton|triton\s+flash[-_ ]?attention"
     r"|flash[-_ ]?attention\s+(?:in|with)\s+triton|triton\s+attention", "triton"),
    (r"flash[-_ ]?attention[-_ ]?v?[34]\b|flash[-_ ]?attn\s*==\s*[34]\.|\bfa[-_ ]?[34]\b"
     r"|cudnn\s+(?:fused\s+|flash\s+)?attention|(?:te|transformer engine)\s+fused\s+attention",
     "auto"),
    (r"flash[-_ ]?attention[-_ ]?v?2\b|flash[-_ ]?attn\s*==\s*2\.|flash[-_ ]?attn[-_ ]?2\b"
     r"|\bfa[-_ ]?2\b", "fa2"),
    # last: a named FlashAttention version wins over the generic description
    (r"xformers|memory[-_ ]efficient\s+(?:causal\s+)?(?:multi[-_ ]head\s+)?attention", "fa1"),
)


def read_attention_kernel(text: str) -> str | None:
    """The attention implementation a row's prose names (:data:`ATTENTION_KERNEL_PATTERNS`):
    ``unfused``, ``fa1``, ``triton``, ``fa2`` or ``auto``; ``None`` when it names none."""
    return _first_match(ATTENTION_KERNEL_PATTERNS, text.lower())


#: (pattern, kernels); first match wins. Whether the step's pointwise operators were compiled
#: (``fused``: torch.compile, Inductor, fused kernels) or ran in PyTorch eager mode
#: (``eager``), as rows write it: "eager (no torch.compile)", "without torch.compile",
#: "compile false in config", "training.compile = false", "+ torch.compile", "compile=True".
#: A statement that the setting is unknown reads as unstated (``unstated``)
POINTWISE_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"compile\w*\s+(?:(?:is|was)\s+)?(?:not\s+(?:stated|specified|given|known)|unknown"
     r"|unstated)", "unstated"),
    (r"(?:no|without|w/o|disabled?)\s+(?:torch[._ ])?compile"
     r"|compile\w*['\"]?\s*[=:]?\s*['\"]?(?:false|off|no|disabled|none|0)\b"
     r"|(?:not|un)[-_ ]?compiled|\beager(?:\s+mode)?\b(?!\s+attention)", "eager"),
    (r"torch[._ ]compile|\bcompile\w*['\"]?\s*[=:]?\s*['\"]?(?:true|on|yes|enabled|1)\b"
     r"|\bcompiled\b|inductor|fused\s+(?:rms\s*)?norm", "fused"),
)


def read_pointwise_kernels(text: str) -> str | None:
    """``eager`` or ``fused`` as a row's prose says its pointwise operators ran
    (:data:`POINTWISE_KERNEL_PATTERNS`); ``None`` when it says nothing of it."""
    meaning = _first_match(POINTWISE_KERNEL_PATTERNS, text.lower())
    return None if meaning == "unstated" else meaning


#: words before "parallel" that make it a parallelism, not the block layout ("tensor-parallel
#: layers", "context parallel attention")
_NOT_BLOCK = "".join(f"(?<!{w} )(?<!{w}-)" for w in (
    "tensor", "model", "pipeline", "expert", "data", "context", "sequence", "head"))
#: (pattern, layout); first match wins. Whether attention and MLP run as a parallel block
#: (PaLM "Parallel Layers", GPT-J / GPT-NeoX parallel residual, Falcon parallel attention,
#: MegaScale's "parallel transformer block") or sequentially, as rows write it. A bare
#: "parallel attention" is not read (context- and tensor-parallel attention are written so).
BLOCK_LAYOUT_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?:no|without|w/o|not?\s+(?:a|the))\s+parallel\s+(?:transformer\s+)?(?:blocks?|layers"
     r"|residual|attention)|(?:use_parallel_residual|parallel_attn(?:ention)?|gpt_j_residual)"
     r"['\"]?\s*[=:]\s*['\"]?(?:false|0|no)\b|\bsequential\s+(?:transformer\s+)?blocks?",
     "sequential"),
    (_NOT_BLOCK + r"\bparallel\s+(?:transformer\s+blocks?|layers\b|residuals?\b|blocks?\b"
     r"|attention\s*(?:\+|and|/|&)\s*(?:mlp|ffn|feed[- ]?forward)|attention\s+(?:and\s+mlp\s+)?"
     r"blocks?)|\bptb\b|use_parallel_residual|parallel_attn\b|gpt_j_residual"
     r"|gpt-j[- ]style\s+(?:residual|block)", "parallel"),
)


def read_block_layout(text: str) -> str | None:
    """``parallel`` or ``sequential`` as a row's prose describes its transformer block
    (:data:`BLOCK_LAYOUT_PATTERNS`); ``None`` when it says nothing of it."""
    return _first_match(BLOCK_LAYOUT_PATTERNS, text.lower())


#: (pattern, kind); first match wins. The MLP of a transformer block as papers, configs and
#: model cards write it: a gated linear unit (Shazeer 2020, "GLU Variants Improve Transformer":
#: SwiGLU / GeGLU / ReGLU, three weight matrices, ``ffn_size`` the width of each of gate and
#: up; Hugging Face ``hidden_act: silu`` with ``gate_proj``; MaxText
#: ``mlp_activations: [silu, linear]``; Megatron ``--swiglu``) or a plain two-matrix MLP (GPT-2/3,
#: OPT, BLOOM, Falcon: GELU or ReLU; Nemotron's squared ReLU; Megatron without ``--swiglu``).
#: Negations ("non-gated", "no GLU", "without SwiGLU") are read as plain first.
MLP_KIND_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"non[- ]?gated|un[- ]?gated|(?:no|without|w/o)\s+(?:a\s+)?(?:gat\w+|swiglu|geglu|glu)\b"
     r"|plain\s+(?:gelu\s+|relu\s+)?(?:mlp|ffn)|squared[- ]relu|relu\s*\^?\s*2\b|\brelu2\b"
     r"|(?:gelu|relu)\s+(?:mlp|ffn|feed[- ]?forward|activation)|mlp_activations\s*[=:]\s*"
     r"\[?\s*['\"]?(?:gelu|relu)['\"]?\s*\]", "plain"),
    (r"\b(?:swi|ge|re|silu[- ]?)glu\b|swiglu|geglu|\bglu\b|gated[- ](?:linear[- ]unit|mlp|ffn"
     r"|silu|gelu|feed[- ]?forward|activation)|silu[- ]gated|gelu[- ]gated|gate_proj"
     r"|mlp_activations\s*[=:]\s*\[?\s*['\"]?(?:silu|gelu|relu)['\"]?\s*,\s*['\"]?linear"
     r"|--swiglu\b|hidden_act\s*[=:]\s*['\"]?silu", "gated"),
)


def read_mlp_kind(text: str) -> str | None:
    """``gated`` or ``plain`` as a row's prose describes its MLP (:data:`MLP_KIND_PATTERNS`);
    ``None`` when it says nothing of it."""
    return _first_match(MLP_KIND_PATTERNS, text.lower())


#: an attention head's dimension as configs and papers state it: "head_dim 128", "head
#: dimension of 256", Megatron's ``--kv-channels 128``, "128-dimensional heads", Hugging Face
#: ``head_dim: 64``; group 1 (or 2) is its value
_HEAD_DIM = re.compile(r"head[_ ]?dim(?:ension)?s?\s*(?:of|=|:|is)?\s*(\d{2,4})\b"
                       r"|kv[-_ ]channels\s*[=: ]\s*(\d{2,4})\b"
                       r"|\b(\d{2,4})[- ]dim(?:ensional)?\s+(?:attention\s+)?heads\b")
#: the head dimensions accepted (a number outside is another quantity)
HEAD_DIM_RANGE = (16, 1024)


def read_head_dim(text: str) -> int | None:
    """The attention head dimension a row's prose states (:data:`_HEAD_DIM`), ``None`` when
    it states none in :data:`HEAD_DIM_RANGE`."""
    m = _HEAD_DIM.search(text.lower())
    if m is None:
        return None
    value = int(next(g for g in m.groups() if g))
    lo, hi = HEAD_DIM_RANGE
    return value if lo <= value <= hi else None


#: (pattern, balanced); first match wins. A pipeline layout that counts the loss (LM head) as
#: a layer of the last stage, as Megatron-Core writes it: ``account_for_loss_in_pipeline_split``
#: ("the loss layer will be treated as a standard transformer layer in the context of
#: partition and placement"), a ``pipeline_model_parallel_layout`` string ending in a stage
#: with ``L`` ("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"), or prose ("fewer layers on the last
#: stage for the LM head"); "num_layers_in_last_pipeline_stage" balances by hand too
LOSS_STAGE_PATTERNS: tuple[tuple[str, bool], ...] = (
    (r"account[-_ ]for[-_ ]loss[-_ ]in[-_ ]pipeline[-_ ]split\s*[=:]\s*(?:false|0|off|no)\b",
     False),
    (r"account[-_ ]for[-_ ]loss|num[-_ ]layers[-_ ]in[-_ ]last[-_ ]pipeline[-_ ]stage"
     r"|(?:^|[\s'\"=:])e?[t*\d|(),m]*\|[t*\d|(),m]*l(?=[\s'\",;)]|$)"
     r"|(?:fewer|less)\s+layers\s+(?:on|in)\s+the\s+last\s+(?:pipeline\s+)?stage"
     r"|(?:lm[- ]head|loss|logits)\s+(?:is\s+|are\s+)?(?:counted|treated)\s+as\s+(?:a\s+)?"
     r"(?:transformer\s+)?layers?", True),
)


def read_loss_stage(text: str) -> bool | None:
    """Whether a row's prose says its pipeline layout counts the LM head and loss as layers
    of the last stage (:data:`LOSS_STAGE_PATTERNS`); ``None`` when it says nothing of it."""
    return _first_match(LOSS_STAGE_PATTERNS, text.lower())


#: a sliding attention window named: "sliding window attention (window 4096)", "SWA with a
#: 4K window", "sliding_window=4096", "local attention window of 1024 tokens"
_WINDOW = re.compile(r"sliding[-_ ]window|\bswa\b|local\s+attention|windowed\s+attention"
                     r"|attention\s+window|window[-_ ]size")
_WINDOW_SIZE = re.compile(r"(\d[\d,]*)\s*(k\b)?(?![\d,]|\s*(?:of\b|layers?\b|gpus?\b|nodes?\b|%))")
#: the smallest number read as a window (tokens): smaller ones are counts; numbers followed
#: by "of", "layers", "GPUs", "nodes" or "%" are never windows; gpt-oss's 128 is the smallest
#: window in the catalog
MIN_WINDOW = 32


def read_sliding_window(text: str) -> int | None:
    """The sliding attention window (tokens) a row's prose states: the first number of at
    least :data:`MIN_WINDOW` within 50 characters after the window is named ("4K" = 4096);
    ``None`` when no window is named, or none with its size."""
    low = text.lower()
    m = _WINDOW.search(low)
    if m is None:
        return None
    for n in _WINDOW_SIZE.finditer(low[m.end():m.end() + 50].split(";")[0]):
        value = int(n.group(1).replace(",", "")) * (1024 if n.group(2) else 1)
        if value >= MIN_WINDOW:
            return value
    return None


#: multi-token prediction named: "MTP", "multi-token prediction", "mtp_num_layers",
#: "nextn" (Hugging Face num_nextn_predict_layers)
_MTP = re.compile(r"\bmtp(?:_num_layers|_depths?)?\b|multi[- ]token[- ]prediction"
                  r"|nextn_predict_layers|\bnextn\b")
#: turned off: "no MTP", "without multi-token prediction", "MTP disabled / off / none"
_MTP_OFF = re.compile(r"(?:\bno|without|w/o|disabled?|drops?)\s+(?:the\s+)?(?:mtp|multi[- ]token)"
                      r"|(?:mtp|prediction)(?:_num_layers)?\s*(?:[:=]\s*)?"
                      r"(?:off|disabled|none|0)\b")
_MTP_DEPTH = re.compile(r"(?:depths?|layers?|modules?|heads?)?\s*(?:[:=(]|of)?\s*(\d{1,2})\b"
                        r"(?!\s*(?:%|b\b|gpus?|nodes?|k\b))")


def read_mtp(text: str) -> int | None:
    """Multi-token-prediction depths a row's prose states
    (:attr:`~codesign.specs.model.ModelSpec.mtp_num_layers`): 0 when turned off ("no MTP",
    "mtp_num_layers=0"), the first number of at most two digits within 30 characters after
    it is named ("MTP=2", "MTP depth 1", "mtp_num_layers: 1"), 1 when named without one
    ("trained with multi-token prediction": DeepSeek-V3's depth); ``None`` when not named."""
    low = text.lower()
    m = _MTP.search(low)
    if m is None:
        return None
    if _MTP_OFF.search(low):
        return 0
    n = _MTP_DEPTH.match(low[m.end():m.end() + 30].split(";")[0])
    return int(n.group(1)) if n else 1


def read_switch(text: str) -> bool | None:
    """yes/no/on/off/true/false/enabled/disabled (possibly followed by details); ``None``
    for an empty or "not stated" cell."""
    t = text.strip().lower()
    if re.match(rf"^(?:{_YES})\b", t):
        return True
    if re.match(rf"^(?:{_NO})\b", t):
        return False
    return None


#: MaxText policies that keep one projection's output and re-run the rest of the layer
#: (``save_qkv_proj``, ``save_out_proj``, ``qkv_proj_offloaded``: ``get_remat_policy`` in
#: MaxText's ``layers/decoders.py``): read as full recompute, the closest kind
_ONE_PROJECTION_REMAT = (r"remat[_ ]policy\W+(?:save_qkv_proj|save_out_proj|qkv_proj_offloaded)"
                         r"\b", "full")

#: a paper's words for recompute that keeps the GEMM outputs and re-runs the cheap operators
#: (LLaMA, Touvron et al. 2023, Sec. 2.4: "we save the activations that are expensive to
#: compute, such as the outputs of linear layers"; as rows paraphrase it: "checkpointing
#: saves expensive activations (linear layer outputs)"): JAX's dot-saving policy, in words
_SAVE = r"(?:sav(?:e|es|ed|ing)|keep(?:s|ing)?|kept|stor(?:e|es|ed|ing))"
_SAVED_GEMM_OUTPUTS = (
    rf"{_SAVE}\s+(?:only\s+)?(?:the\s+)?activations\s+that\s+are\s+(?:expensive|costly)"
    rf"|{_SAVE}\s+(?:only\s+)?(?:the\s+)?(?:expensive|costly)(?:[- ]to[- ]compute)?\s+"
    r"activations"
    rf"|{_SAVE}\s+(?:only\s+)?(?:the\s+)?outputs?\s+of\s+(?:the\s+|all\s+)?"
    r"(?:linear\s+layers|gemms|matmuls|projections)"
    rf"|{_SAVE}\s+(?:only\s+)?(?:the\s+|all\s+)?(?:linear[- ]layer|gemm|matmul)\s+outputs")

#: (pattern, recompute kind); first match wins
RECOMPUTE_PATTERNS: tuple[tuple[str, str], ...] = (
    _ONE_PROJECTION_REMAT,
    (r"selective|attention[- ]core|core attention|remat[_ ]policy\W+(?:minimal|save_\w+)"
     r"|\bminimal\b", "selective"),
    (r"^(?:no|none|off|false|disabled|0)\b|(?:no|without) (?:\w+ )?(?:recompute|"
     r"recomputation|checkpointing|remat(?:eriali[sz]ation)?)|remat[_ ]policy\W+none", "none"),
    (r"full|uniform|block|every layer|all layers|activation checkpointing|"
     r"gradient checkpointing|checkpoint(?:ing)?|recompute|remat|^yes|^on|^true", "full"),
)
#: the same readings from a row's free text, where "recompute" also names other things
#: (``force_recompute_fp8_weight_in_bwd``, "recompute not stated"): only phrases that name
#: activation recomputation itself, JAX's rematerialization ("remat", MaxText's
#: ``remat_policy``, PaLM's "rematerialization") included
RECOMPUTE_PROSE_PATTERNS: tuple[tuple[str, str], ...] = (
    _ONE_PROJECTION_REMAT,
    (r"selective (?:activation )?(?:recompute|recomputation|checkpointing)"
     rf"|{_SAVED_GEMM_OUTPUTS}"
     r"|remat[_ ]policy\W+(?:minimal|save_\w+)", "selective"),
    (r"(?:no|without|w/o) (?:activation )?(?:recompute|recomputation|checkpointing"
     r"|remat(?:eriali[sz]ation)?)\b|remat[_ ]policy\W+none", "none"),
    (r"\bremat(?:eriali[sz]ation|eriali[sz]ed)?\b|remat[_ ]policy\W+full"
     r"|full (?:activation )?(?:recompute|recomputation|checkpointing)"
     r"|activation (?:recompute|recomputation|checkpointing)|gradient checkpointing",
     "full"),
)


#: (pattern, ``selective_recompute`` policy); first match wins. MaxText's dot-saving
#: rematerialization policies (``get_remat_policy`` in its ``layers/decoders.py``):
#: ``minimal`` (and ``minimal_offloaded``, ``minimal_with_context``) saves every projection's
#: output (qkv, out, mlpwi, mlpwo) and re-runs the rest, the attention core included;
#: ``save_dot_except_mlpwi`` re-runs the MLP input GEMMs too; ``save_dot_except_mlp`` and
#: ``save_dot_with_context_except_mlp`` the whole MLP. A paper that says it saves the linear
#: layers' outputs (:data:`_SAVED_GEMM_OUTPUTS`) names ``minimal``'s policy in words
REMAT_POLICY_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"remat[_ ]policy\W+save_dot_except_mlpwi\b", "mlp_input"),
    (r"remat[_ ]policy\W+save_dot_(?:with_context_)?except_mlp\b", "mlp"),
    (r"remat[_ ]policy\W+minimal", "gemm_outputs"),
    (_SAVED_GEMM_OUTPUTS, "gemm_outputs"),  # the same policy in a paper's words (LLaMA)
)


def read_remat_policy(text: str) -> str | None:
    """The op-level ``selective_recompute`` policy a MaxText ``remat_policy`` names, or a
    paper's words for one (:data:`REMAT_POLICY_PATTERNS`); ``None`` when the text names
    none of them."""
    return _first_match(REMAT_POLICY_PATTERNS, text.lower())


#: (pattern, Megatron-Core recompute module) for the module names a row's recompute prose
#: gives: Megatron's labels (``recompute_modules: [layernorm, moe_act]``,
#: ``--recompute-modules``) and papers' words ("recomputation of RMSNorm and MLA
#: up-projection", DeepSeek-V3 Sec. 3.2.3)
RECOMPUTE_MODULE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bcore[_ ]attn\b|\bcore attention\b", "core_attn"),
    (r"\bmla[_ ]up[_ ]?proj|\b(?:mla\s+)?up[- ]?projections?\b", "mla_up_proj"),
    (r"\bmoe[_ ]act\b|\b(?:moe|expert)(?:'s)?\s+activations?(?:\s+functions?)?\b", "moe_act"),
    (r"\b(?:rms|layer)[_ ]?norms?\b|\bnormali[sz]ations?\b", "layernorm"),
    (r"\bshared[_ ]experts?\b", "shared_experts"),
    (r"(?:^|[\s'\"\[,])mlp(?=\s*(?:['\"\],]|and\b|$))|\bdense mlp\b", "mlp"),
    (r"(?:^|[\s'\"\[,])moe(?=\s*(?:['\"\],]|and\b|$))|\b(?:moe|expert) layers?\b", "moe"),
)
#: where a text names its recompute modules: Megatron's list after ``recompute_modules`` /
#: ``--recompute-modules``, or the words after a recompute verb, to the end of the clause
_MODULE_SPANS = (
    r"recompute[-_ ]modules\W{0,4}([^;\n]{0,120})",
    r"\b(?:recompute|recomputes|recomputed|recomputing|recomputation)\s+(?:of\s+)?"
    r"(?:only\s+)?(?:all\s+)?(?:the\s+)?([^.;:\n]{0,100})",
)


def read_recompute_modules(text: str) -> tuple[str, ...] | None:
    """The Megatron-Core recompute modules a text names (:data:`RECOMPUTE_MODULE_PATTERNS`,
    in Megatron's order), or ``None`` when it names none, or only the attention core (plain
    selective recompute, which :func:`read_recompute` reads)."""
    low = f" {text.lower()} "
    found: set[str] = set()
    for span in _MODULE_SPANS:
        for m in re.finditer(span, low):
            words = f" {m.group(1)} "
            found.update(module for pattern, module in RECOMPUTE_MODULE_PATTERNS
                         if re.search(pattern, words))
        if found:
            break
    if not found or found == {"core_attn"}:
        return None
    order = [module for _, module in RECOMPUTE_MODULE_PATTERNS]
    return tuple(sorted(found, key=order.index))


def read_recompute(text: str) -> str | None:
    """none / selective / full from a recompute cell ("full (uniform)", "activation
    checkpointing every layer", "selective (attention core only)"); ``None`` if not stated."""
    t = text.strip().lower()
    if not t or "not stated" in t:
        return None
    return _first_match(RECOMPUTE_PATTERNS, t)


def read_recompute_prose(text: str) -> str | None:
    """none / selective / full as a row's free text names its activation recompute
    (:data:`RECOMPUTE_PROSE_PATTERNS`: "with rematerialization", "remat_policy: minimal",
    "activation checkpointing"); ``None`` when it names none."""
    return _first_match(RECOMPUTE_PROSE_PATTERNS, text.lower())


_CKPT = r"(?:recompute|recomputation|recomputing|activation checkpointing|checkpointing|checkpoint)"
#: patterns whose group 1 is the number of layers recomputed per pipeline chunk (Megatron's
#: ``--recompute-method block --recompute-num-layers N``); first match wins
RECOMPUTE_LAYERS_PATTERNS: tuple[str, ...] = (
    r"recompute[-_ ]num[-_ ]layers\s*(?:=|:)?\s*(\d+)",
    rf"{_CKPT}\s+(?:on|of|for|in)?\s*(?:the\s+)?(?:first\s+)?(\d+)\s+"
    r"(?:transformer\s+)?(?:layers?|blocks?)\b",
    r"(\d+)\s+(?:transformer\s+)?(?:layers?|blocks?)\s+(?:are\s+|were\s+)?"
    r"(?:recomputed|checkpointed)",
    r"(\d+)\s+(?:recomputed|checkpointed)\s+(?:transformer\s+)?(?:layers?|blocks?)\b",
)


def read_recompute_layers(text: str) -> int | None:
    """The number of transformer layers per pipeline chunk a row says are recomputed
    ("recompute-num-layers 4", "--recompute-num-layers=2", "activation checkpointing on 2
    layers per stage", "4 layers recomputed"); ``None`` when it states none, or when it names
    Megatron's uniform method, whose ``recompute_num_layers`` is a group size, every layer
    still recomputed."""
    t = text.strip().lower()
    if not t or "uniform" in t:
        return None
    for pattern in RECOMPUTE_LAYERS_PATTERNS:
        m = re.search(pattern, t)
        if m and int(m.group(1)) > 0:
            return int(m.group(1))
    return None


def read_interleave(text: str) -> tuple[int | None, bool]:
    """``(depth, interleaved)`` from a vpp cell: "4", "vpp=5", "virtual pipeline 4",
    "interleaved, 2 chunks" → depth; "interleaved (depth not stated)" → (None, True);
    "1", "no", "none" → (1, False); empty → (None, False)."""
    t = text.strip().lower()
    m = re.search(r"(\d+)", t)
    interleaved = bool(re.search(r"interleav|virtual|vpp|chunk", t))
    if m and not re.search(r"not stated", t):
        depth = int(m.group(1))
        return depth, depth > 1
    if re.match(rf"^(?:{_NO})\b", t):
        return 1, False
    return None, interleaved


#: pipeline schedules as frameworks and papers name them, most specific first: a looped /
#: interleaved schedule (Megatron's "interleaved 1F1B", torchtitan's ``Interleaved1F1B``,
#: ``LoopedBFS``, ``InterleavedZeroBubble``, ``ZBVZeroBubble``), the zero-bubble ZB-H1 (Qi et
#: al. 2023, arXiv 2401.10241), GPipe's fill-drain (Huang et al. 2019), and 1F1B
#: (PipeDream-Flush, Narayanan et al. 2021; torchtitan's ``1F1B``, Megatron's default); a
#: negated interleaving ("non-interleaved", "without interleaving") is 1F1B
SCHEDULE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"non[- ]?interleaved|(?:without|no|not)\s+interleav", "1f1b"),
    (r"interleav|virtual[- ]pipeline|looped[- ]?bfs|\bzbv\b|zbv[- ]?zero", "interleaved"),
    (r"zero[- ]?bubble|\bzb[- ]?h1\b", "zb-h1"),
    (r"gpipe|fill[- ]drain|all[- ]forward[- ]all[- ]backward|\bafab\b", "gpipe"),
    (r"(?<![a-z0-9])1f1b\b|one[- ]forward[- ]one[- ]backward|pipedream[- ]flush", "1f1b"),
)


def read_pipeline_schedule(text: str) -> str | None:
    """The pipeline schedule ``text`` names: ``"interleaved"`` ("Interleaved 1F1B", "virtual
    pipeline", "LoopedBFS"), ``"zb-h1"`` ("zero bubble", "ZB-H1"), ``"gpipe"`` ("GPipe",
    "fill-drain") or ``"1f1b"`` ("1F1B schedule", "PipeDream-Flush"); ``None`` when it names
    none."""
    return _first_match(SCHEDULE_PATTERNS, text.lower())


def read_precision(text: str) -> str:
    """The GEMM dtype of a precision cell: FP4 in any spelling (NVFP4, MXFP4, "fp4", E2M1)
    → fp4; FP8 in any spelling (FP8-CS, "fp8 hybrid", "Transformer Engine FP8", MXFP8) → fp8;
    fp16 alone → fp16; else bf16. A part without an FP4 peak runs an fp4 row in FP8
    (:func:`codesign.validation.training_cases.map_row` says so)."""
    t = text.strip().lower()
    if re.search(r"fp4|e2m1", t):
        return "fp4"
    if re.search(r"fp8|float8|e4m3|mxfp8", t):
        return "fp8"
    if re.search(r"fp16|float16|half", t) and not re.search(r"bf16|bfloat", t):
        return "fp16"
    return "bf16"


_LAYERS = r"(?:transformer\s+)?(?:layers?|blocks?)"
_HIGH = r"(?:bf16|bfloat16|fp16|high[- ]precision|higher[- ]precision|fp8)"


def read_fp4_high_precision_layers(text: str) -> tuple[int, int] | None:
    """``(first, last)``: how many leading and trailing transformer layers an FP4 run keeps
    in higher precision, as its prose says ("first 2 and last 8 blocks in BF16", "last 14
    layers in BF16", "first and last layers in BF16" (one each, Megatron-LM's
    ``--first-last-layers-bf16`` default), "all layers in NVFP4" → (0, 0)); ``None`` when it
    says neither."""
    t = text.lower()
    if re.search(rf"all\s+{_LAYERS}\s+(?:in\s+)?(?:nv|mx)?fp4", t):
        return 0, 0
    m = re.search(rf"first\s+(\d+)\s+(?:{_LAYERS}\s+)?and\s+(?:the\s+)?last\s+(\d+)\s+"
                  rf"{_LAYERS}[^.;]*?{_HIGH}", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.search(rf"(first|last)\s+(\d+)\s+{_LAYERS}[^.;]*?{_HIGH}", t)
    if m:
        n = int(m.group(2))
        return (n, 0) if m.group(1) == "first" else (0, n)
    if re.search(rf"first\s*(?:and|/|&)\s*last\s+{_LAYERS}[^.;]*?{_HIGH}"
                 r"|first[-_]last[-_]layers[-_]bf16", t):
        return 1, 1
    return None


#: (pattern, recipe); first match wins. The FP8 scaling recipes as precision cells write
#: them: Transformer Engine's delayed scaling ("FP8-DS", "delayed scaling", amax history),
#: torchao's row-wise recipe ("rowwise: dynamic rowwise scaling",
#: ``torchao.float8.Float8LinearRecipeName``; "rowwise_with_gw_hp" too, ASSUMPTION: priced as
#: "rowwise") and per-tensor current scaling ("FP8-CS", NeMo / Megatron-Bridge tables), as
#: torchao's dynamic per-tensor recipe ("tensorwise: dynamic per-tensor scaling") scales
#: from the tensor being cast: "dynamic scaling", "tensorwise".
FP8_ROWWISE = r"row[-_ ]?wise|per[-_ ]row"
FP8_RECIPE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"fp8[-_ ]?ds\b|delayed[-_ ]scal|amax[-_ ]history", "delayed"),
    (FP8_ROWWISE, "rowwise"),
    (r"fp8[-_ ]?cs\b|current[-_ ]scal|dynamic[-_ ](?:\w+[-_ ])?scal|tensor[-_ ]?wise",
     "current"),
)


def read_fp8_recipe(text: str) -> str | None:
    """The FP8 scaling recipe a precision cell names (:data:`FP8_RECIPE_PATTERNS`):
    "current" for per-tensor scaling from the tensor itself (TE current scaling, torchao's
    tensorwise recipe), "rowwise" for torchao's row-wise scales, "delayed" for an amax
    history, ``None`` when it names neither (or is not FP8)."""
    t = text.strip().lower()
    if not re.search(r"fp8|float8", t):
        return None
    return _first_match(FP8_RECIPE_PATTERNS, t)


def read_global_batch(text: str, seq_len: int) -> tuple[int, tuple[str, ...]] | None:
    """Sequences per step from a batch cell: "1024", "1,536", "4M tokens" / "2097152 tokens"
    (divided by ``seq_len``), "1024 x 2048" (sequences × length); a ramp ("ramped from 32 to
    1536", "batch ramp-up to 4M tokens") is its final batch, and words before the number
    ("batch size 1536") are skipped."""
    ramp = re.search(r"(?i)\b(?:ramp|warm[- ]?up|increas|grow|from\b).*?\bto\s+(?=[~≈0-9])", text)
    if ramp:
        final = read_global_batch(text[ramp.end():], seq_len)
        if final is not None:
            return final[0], (f"global batch '{text.strip()}': the ramp's final batch",
                              *final[1])
    text = re.sub(r"^[^\d~≈<>]*?(?=[~≈<>]?\s*\d)", "", text.strip())
    n = read_number(text)
    if n is None or n.value <= 0:
        return None
    rest = n.rest.lower()
    if re.match(r"^(?:tokens?|tok)\b", rest) or "token" in rest[:12]:
        # "4M tokens": a power-of-two count written in M/K usually means 2^20/2^10
        tokens = n.value
        binary = {"M": 2**20, "m": 2**20, "k": 2**10, "K": 2**10}.get(n.suffix)
        if tokens % seq_len and binary:  # "4M tokens" of 2048-token sequences: M meant 2^20
            as_binary = tokens / _MAGNITUDE[n.suffix] * binary
            if as_binary % seq_len == 0:
                tokens = as_binary
        seqs = round(tokens / seq_len)
        return max(seqs, 1), (*n.notes, f"global batch '{text.strip()}' in tokens: "
                                         f"{seqs} sequences of {seq_len}")
    return round(n.value), n.notes


def read_seq_len(text: str) -> tuple[int, str | None] | None:
    """Tokens per sequence from a ``seq_len`` cell: "2048", "2,048", "4K" / "4k tokens" (K and M
    are binary for context lengths: "4K" = 4,096, "128K" = 131,072, "1M" = 1,048,576, as model
    cards write them), "8192 tokens"; with a note when a suffix was read. ``None`` when the cell
    holds no number (empty, "not stated")."""
    n = read_number(text)
    if n is None or n.value <= 0:
        return None
    binary = {"k": 2**10, "K": 2**10, "M": 2**20, "m": 2**20}.get(n.suffix)
    if binary is None:
        return round(n.value), None
    tokens = round(n.value / _MAGNITUDE[n.suffix] * binary)
    return tokens, f"seq_len '{text.strip()}': {tokens} tokens ({n.suffix} = {binary})"


def nearby_batches(batch: int, widest_dp: int, max_change: float = 0.1) -> list[tuple[int, int]]:
    """``(dp, batch')`` pairs a published batch of ``batch`` sequences may stand for when it
    does not split evenly: for every data-parallel size ``dp`` dividing ``widest_dp`` (widest
    first), ``batch`` rounded to the nearest multiple of ``dp``, when that differs from it by at
    most ``max_change`` (a fraction) and is not ``batch`` itself. Frameworks split a step's
    batch evenly over the replicas, so a published "2M tokens" on 992 GPUs is itself a rounded
    figure. ASSUMPTION: a published batch is exact to 10% (``max_change``)."""
    out = []
    for dp in sorted((d for d in range(1, widest_dp + 1) if widest_dp % d == 0), reverse=True):
        rounded = max(dp, round(batch / dp) * dp)
        if rounded != batch and abs(rounded - batch) <= max_change * batch:
            out.append((dp, rounded))
    return out



_LORA = re.compile(r"\b(?:q?lora|low[- ]rank adapt)")
_LORA_RANK = re.compile(r"\b(?:q?lora|low[- ]rank adapt\w*)\b[^,;]*?\b(?:rank|r)\s*[=:]?\s*(\d+)")


def read_lora(text: str) -> tuple[bool, int | None]:
    """Whether ``text`` says LoRA / QLoRA / low-rank adaptation, and the adapter rank it
    states ("LoRA rank 8", "QLoRA r=32"; ``None`` when none, or not a positive number)."""
    low = text.lower()
    if not _LORA.search(low):
        return False, None
    m = _LORA_RANK.search(low)
    rank = int(m.group(1)) if m is not None else 0
    return True, rank if rank >= 1 else None


#: a statement that sequences are packed from several samples: "sequence packing", "packed
#: sequences", "inputs are packed to 4096 tokens", "SQuAD packed to 4096 tokens"; or the
#: variable-length attention that packing runs on (Transformer Engine's THD layout with
#: ``cu_seqlens``, FlashAttention ``varlen``, padding-free batches)
_UNITS = r"(?:sequences?|samples?|examples?|inputs?|documents?|tokens?|conversations?)"
_VARLEN = r"\bthd\b|\bcu_seqlens\b|\bvarlen\b|padding[- ]free"
_PACKED = re.compile(
    r"\b(?:sequence|sample|example|input|document)s?[- ]packing\b"
    rf"|\bpack(?:ed|s|ing)?\b[^.;]{{0,40}}?\b{_UNITS}\b"
    rf"|\b{_UNITS}\b[^.;]{{0,30}}?\bpacked\b"
    r"|\bwith\s+packing\b|\bpacking\s*(?:=|:)\s*(?:true|on|enabled)\b"
    rf"|{_VARLEN}")
#: packing said not to be used ("without sequence packing", "no packing", "unpacked")
_NOT_PACKED = re.compile(r"\b(?:without|no|not|w/o)\s+(?:\w+\s+){0,2}?pack|\bunpacked\b"
                         r"|\bpacking\s*(?:=|:)?\s*(?:off|false|disabled|none)\b")
#: fine-tuning, where a packed sequence's samples are kept apart in attention (NeMo, Megatron
#: Bridge, TRL ``padding_free``, torchtune): "SFT", "fine-tuning", "LoRA", "PEFT"
_FINE_TUNING = re.compile(r"\b(?:sft|peft|q?lora|fine[- ]?tun\w*|instruction[- ]tun\w*"
                          r"|supervised fine)")
#: attention said to stay within each packed document, whatever the training stage
_DOC_MASKED = re.compile(
    rf"{_VARLEN}"
    r"|(?:document|sample|example)[- ](?:level |wise )?(?:attention )?mask"
    r"|attention\s+(?:is\s+)?(?:masked|restricted|confined|limited)\s+(?:to|per|within)\s+"
    r"(?:each\s+|its\s+own\s+)?(?:document|sample|example|sequence)")
#: a stated mean length of the packed samples: "average sample length 350 tokens", "mean
#: example length of ~512 tokens", "documents of about 300 tokens"
_DOC_LEN = re.compile(
    r"\b(?:average|mean|avg\.?|typical)\s+(?:packed\s+)?(?:sample|example|document|sequence"
    r"|conversation|record)\s+(?:length|size)\s*(?:of|is|=|:|~|≈|about|around|\s)*"
    r"(\d+)\s*tokens"
    r"|\b(?:samples|examples|documents|conversations)\s+(?:of|averaging)\s+(?:about\s+|~\s*"
    r"|around\s+)?(\d+)\s*tokens")


def read_packing(text: str) -> tuple[bool | None, int | None]:
    """Whether ``text`` says its sequences are packed from samples that attend only to
    themselves (:data:`_PACKED` in a fine-tuning context, :data:`_FINE_TUNING`, or with
    per-document masking stated, :data:`_DOC_MASKED`; ``False`` when it says packing is not
    used; ``None`` when it says neither), and the mean sample length in tokens it states
    (:data:`_DOC_LEN`; ``None`` when none). Pretraining that packs documents without a
    stated mask is not read: Megatron-style pretraining concatenates documents and attends
    across their boundaries (Megatron Bridge docs, "Packed Sequences")."""
    low = _no_thousands(text.lower())
    if _NOT_PACKED.search(low):
        return False, None
    packed = _PACKED.search(low) is not None and (
        _FINE_TUNING.search(low) is not None or _DOC_MASKED.search(low) is not None)
    if not packed:
        return None, None
    m = _DOC_LEN.search(low)
    size = int(m.group(1) or m.group(2)) if m is not None else 0
    return True, size if size >= 1 else None


# --- the scale-out network ------------------------------------------------------------------

#: (pattern, scope) for a NIC rate in a network cell; scope: "count" (``N x R`` per node),
#: "gpu" (R per GPU), "node" (R per node / server / host / instance) or "port" (a bare adapter
#: rate, see :data:`MAX_PORT_GBPS`); first match wins
NIC_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(\d+)\s*[x×]\s*(\d+(?:\.\d+)?)\s*(g|t)(?:b|bit)?(?:/s|ps)?", "count"),
    (r"(\d+(?:\.\d+)?)\s*(g|t)(?:b|bit)?(?:/s|ps)?\s*(?:\w+\s+){0,2}(?:per|/|each)\s*"
     r"(?:gpu|accelerator|chip|device)", "gpu"),
    (r"(\d+(?:\.\d+)?)\s*(g|t)(?:b|bit)?(?:/s|ps)?\s*(?:\w+\s+){0,2}(?:per|/|each)?\s*"
     r"(?:node|server|host|instance|node-to-node)", "node"),
    (r"(\d+(?:\.\d+)?)\s*(g|t)(?:b|bit)?(?:/s|ps)?\s*efa\b", "node"),
    (r"(\d+(?:\.\d+)?)\s*(g|t)(?:b|bit)?(?:/s|ps)?\s*(?:infiniband|roce|ib)\b", "port"),
)

#: the fastest single InfiniBand / Ethernet adapter port, Gb/s (NVIDIA Quantum-X800 and
#: ConnectX-8: 800 Gb/s XDR). A bare rate with no scope ("200 Gbps InfiniBand") at most this is
#: one adapter's, and DGX/HGX servers give each GPU its own compute adapter (DGX A100 user
#: guide: 8 single-port ConnectX-6 HDR 200 Gb/s; DGX H100: 8 ConnectX-7 NDR 400 Gb/s), so it
#: is per GPU; a higher bare rate is a server's aggregate. AWS quotes EFA per instance (P4d
#: "400 Gbps", P5 "3200 Gbps"), so a bare EFA rate is per node.
MAX_PORT_GBPS = 800.0


_IB_RATE = {"edr": "100", "hdr": "200", "ndr": "400", "xdr": "800"}


#: a rate written in bytes ("50 GB/s", "25 GBps", "3.2 TB/s", "100 gigabytes per second"),
#: which :func:`read_nic_gbps` turns into bits before the case is dropped: the abbreviation
#: needs its capital ``B``, as "Gb/s", "Gbps", "Gbit/s" and a lower-case "gb/s" are bits, the
#: way network rates are quoted
_BYTE_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([GTgt])B|(?i:([gt])(?:iga|era)?bytes?))"
                        r"(?i:\s*/\s*s(?:ec)?\b|ps\b|\s+per\s+s(?:ec(?:ond)?)?\b)")


def _bits(text: str) -> str:
    """``text`` with every rate stated in bytes per second rewritten in bits (x8)."""
    return _BYTE_RATE.sub(lambda m: f"{float(m.group(1)) * 8:g} "
                          f"{(m.group(2) or m.group(3)).lower()}b/s", text)


def read_nic_gbps(text: str, gpus_per_node: int) -> tuple[float, str] | None:
    """Scale-out bandwidth per GPU (Gb/s) a network cell states, with the note: "8x 200Gb/s
    HDR InfiniBand per node" -> 200 at 8 GPUs per node; "RoCE 400Gb/s per GPU" -> 400;
    "1600 Gbps node-to-node RoCE" -> 200; "3200 Gbps EFA" -> 400; "50 GB/s per GPU" (bytes,
    :data:`_BYTE_RATE`) -> 400; "200 Gbps InfiniBand" (a bare adapter rate,
    :data:`MAX_PORT_GBPS`) -> 200. ``None`` when the cell says
    it is not stated or gives no rate. Storage NICs ("+2 storage HCAs") are not counted."""
    bits = _bits(_no_thousands(text.strip()))  # "3,200 Gbps"
    t = bits.lower()
    if not t or "not stated" in t or gpus_per_node < 1:
        return None
    stated = " (stated in bytes/s: x8)" if _BYTE_RATE.search(text) else ""
    # InfiniBand generations name their rate: EDR 100, HDR 200, NDR 400, XDR 800 Gb/s
    t = re.sub(r"\b(edr|hdr|ndr|xdr)\s*(\d{3})?\b",
               lambda m: f"{m.group(2) or _IB_RATE[m.group(1)]}g ", t)
    for pattern, scope in NIC_PATTERNS:
        m = re.search(pattern, t)
        if not m:
            continue
        if scope == "count":
            count, rate, unit = int(m.group(1)), float(m.group(2)), m.group(3)
            per_node = count * rate * (1000.0 if unit == "t" else 1.0)
            return per_node / gpus_per_node, (f"network '{m.group(0)}' per node: "
                                              f"{per_node / gpus_per_node:g} Gb/s per GPU"
                                              f"{stated}")
        rate = float(m.group(1)) * (1000.0 if m.group(2) == "t" else 1.0)
        if scope == "port":  # a bare adapter rate: one adapter per GPU (MAX_PORT_GBPS)
            scope = "gpu" if rate <= MAX_PORT_GBPS else "node"
        if scope == "gpu":
            return rate, f"network '{m.group(0)}': {rate:g} Gb/s per GPU{stated}"
        return rate / gpus_per_node, (f"network '{m.group(0)}' per node: "
                                      f"{rate / gpus_per_node:g} Gb/s per GPU{stated}")
    return None


#: a clause of free text that speaks of the scale-out network (the fabric between servers):
#: its technology, adapters or role
_SCALE_OUT_WORDS = re.compile(
    r"\b(?:infiniband|ib|efa|roce(?:v2)?|ethernet|nics?|hcas?|connectx[-\w]*|slingshot|"
    r"[ehnx]dr|inter[- ]?node|scale[- ]?out|between (?:nodes|servers|hosts))\b", re.I)
#: a clause that speaks of the links inside a server or rack instead
_SCALE_UP_WORDS = re.compile(r"nvlink|nvswitch|pcie|xgmi|infinity fabric|\bici\b|c2c|"
                             r"intra[- ]?node", re.I)


def read_network_prose(text: str, gpus_per_node: int) -> tuple[float, str] | None:
    """Scale-out bandwidth per GPU (Gb/s) that free text (a row's notes) states, with the note:
    the first clause (split at ';' and sentence ends) that names the scale-out network
    (:data:`_SCALE_OUT_WORDS`) and not a server's own links (:data:`_SCALE_UP_WORDS`, so an
    NVLink rate is never read as the network), read as a network cell
    (:func:`read_nic_gbps`); a clause naming both is read by its comma-separated parts
    (thousands separators dropped first): "64 p4d.24xlarge; 400 Gbps EFA" -> 50 at 8 GPUs
    per node, "NVLink 600 GB/s, 8x 200Gb/s HDR InfiniBand per node" -> 200."""
    for clause in re.split(r"[;\n]|\.\s", _no_thousands(text)):
        parts = [clause]
        if _SCALE_OUT_WORDS.search(clause) and _SCALE_UP_WORDS.search(clause):
            parts = clause.split(",")
        for part in parts:
            if _SCALE_OUT_WORDS.search(part) and not _SCALE_UP_WORDS.search(part):
                found = read_nic_gbps(part, gpus_per_node)
                if found is not None:
                    return found[0], found[1] + " (read from the notes)"
    return None


__all__ = [
    "DISPATCHER_PATTERNS",
    "EP_OVERLAP_PATTERNS",
    "FP8_RECIPE_PATTERNS",
    "FP8_ROWWISE",
    "NIC_PATTERNS",
    "RECOMPUTE_LAYERS_PATTERNS",
    "RECOMPUTE_MODULE_PATTERNS",
    "RECOMPUTE_PATTERNS",
    "ZERO_PATTERNS",
    "Number",
    "nearby_batches",
    "read_degree",
    "read_dispatcher",
    "read_ep_overlap",
    "read_fp4_high_precision_layers",
    "read_fp8_recipe",
    "read_global_batch",
    "read_gpu_hours_rate",
    "read_grad_reduce_in_fp32",
    "read_interleave",
    "read_lora",
    "read_network_prose",
    "read_nic_gbps",
    "read_number",
    "read_other_metric",
    "read_packing",
    "read_pipeline_schedule",
    "read_precision",
    "read_recompute",
    "read_recompute_layers",
    "read_recompute_modules",
    "read_seconds",
    "read_seq_len",
    "read_switch",
    "read_tp_overlap",
    "read_zero",
    "states_capacity_factor",
]
