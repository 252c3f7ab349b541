"""Serving system specs: engines, clients and their request mixes, pipeline stages (RAG,
KV-cache retrieval, reasoning, routing), memory tiers, CPU pools and SLOs.

A :class:`ServingSpec` is what ``codesign serve SPEC.yaml`` reads. Every field carries its
unit in its name (``_s``, ``_GB``, ``_GBps``, ``_us``, ``_rps``); token counts are tokens.
Cross references (a client's model, a stage's engine or tier) are checked when the spec is
validated, so a bad name is reported as one line naming the field and the allowed values.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from codesign.errors import SpecError
from codesign.specs.base import Spec
from codesign.specs.gpu import GpuSpec
from codesign.specs.inference import InferencePlan
from codesign.specs.model import ModelSpec

#: electricity price default, USD per kWh: EIA Electric Power Annual 2023 (released
#: 2024-10-17), average revenue per kWh to commercial customers in Virginia, the largest
#: US data-center market: 8.95 cents/kWh (eia.gov/electricity/annual/secrev-map.php).
DEFAULT_ELECTRICITY_USD_PER_KWH = 0.0895


def model_key(ref: str | ModelSpec) -> str:
    """The name a model is matched by across engines, clients and routes (normalized)."""
    name = ref.name if isinstance(ref, ModelSpec) else ref
    return re.sub(r"[\s_]+", "-", name.strip().lower())


# --- inference plan and step cost override ------------------------------------------------


class FixedStepCostSpec(Spec):
    """Constant step costs instead of the analytical model (hand-computable what-ifs, tests).

    A step with ``p`` new prefill tokens and ``d`` decoding sequences takes
    ``prefill_s_per_token·p + (decode_step_s + decode_s_per_seq·d if d > 0 else 0)``.
    """

    kind: Literal["fixed"] = "fixed"
    prefill_s_per_token: float = Field(ge=0, description="seconds per prefill token")
    decode_step_s: float = Field(ge=0, description="seconds per step that decodes anything")
    decode_s_per_seq: float = Field(default=0.0, ge=0, description="seconds per decoding seq")
    kv_capacity_tokens: int = Field(ge=1, description="KV-cache capacity of one replica")
    kv_bytes_per_token: float = Field(
        default=0.0, ge=0, description="KV bytes of one token, whole model (all layers, GPUs)")


class ModelEntrySpec(Spec):
    """A model an engine serves, with its plan and number of replicas."""

    model: str | ModelSpec = Field(description="catalog name, file path or inline model")
    plan: InferencePlan = Field(default_factory=InferencePlan)
    replicas: int | None = Field(
        default=None, ge=1,
        description="model replicas; None = the engine's devices / (tp·pp·ep) (one model only)")
    step_cost: FixedStepCostSpec | None = Field(
        default=None, description="fixed step costs instead of the analytical model")

    @property
    def key(self) -> str:
        """Normalized model name clients and routes refer to."""
        return model_key(self.model)


# --- schedulers -------------------------------------------------------------------------


class _PagedSettings(Spec):
    block_size_tokens: int = Field(default=16, ge=1, description="tokens per KV block")
    kv_capacity_tokens: int | None = Field(
        default=None, ge=1, description="KV tokens per replica; None = the step-cost model's")
    max_num_seqs: int = Field(default=256, ge=1, description="sequences in flight per replica")


class StaticSchedulerSpec(_PagedSettings):
    """Static batching: a batch is formed when the replica is idle and runs until its longest
    request finishes; prompts are padded to the longest one and KV is reserved up front."""

    name: Literal["static"] = "static"
    max_batch_size: int = Field(default=8, ge=1, description="sequences per batch")
    batch_timeout_s: float = Field(
        default=0.0, ge=0, description="wait this long for a fuller batch once one is waiting")
    pad_to_longest: bool = Field(
        default=True, description="prefill/decode every sequence to the batch's longest")


class ContinuousSchedulerSpec(_PagedSettings):
    """vLLM-style continuous batching: admission by free KV blocks, prefill-first steps,
    preemption by recompute (latest admitted first) when decode needs a block."""

    name: Literal["continuous"] = "continuous"
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, description="prefill tokens per step")
    watermark_fraction: float = Field(
        default=0.01, ge=0, lt=1, description="blocks kept free at admission (vLLM default)")


class ChunkedPrefillSchedulerSpec(_PagedSettings):
    """Sarathi-style chunked prefill: every step decodes all running sequences and fills the
    rest of a token budget with prefill chunks."""

    name: Literal["chunked_prefill"] = "chunked_prefill"
    token_budget: int = Field(default=2048, ge=1, description="tokens per step (decode+prefill)")
    watermark_fraction: float = Field(default=0.01, ge=0, lt=1)


class NetworkKvLink(Spec):
    """KV transfer over the topology's network model (one send per prefill GPU in parallel)."""

    via: Literal["network"] = "network"
    topology: str | None = Field(
        default=None, description="catalog topology; None = the prefill device's default")
    same_domain: bool = Field(
        default=False, description="prefill and decode replicas share a scale-up domain")


class DirectKvLink(Spec):
    """KV transfer over a dedicated link per prefill replica."""

    via: Literal["link"] = "link"
    bandwidth_GBps: float = Field(gt=0, description="link bandwidth per prefill replica, GB/s")
    latency_us: float = Field(default=0.0, ge=0, description="per transfer, us")


KvLinkSpec = Annotated[NetworkKvLink | DirectKvLink, Field(discriminator="via")]


class DisaggregatedSchedulerSpec(_PagedSettings):
    """Prefill on this engine, decode on ``decode_engine``: after prefill the request's KV is
    sent over ``kv_link`` to a decode replica that has reserved blocks for it."""

    name: Literal["disaggregated"] = "disaggregated"
    decode_engine: str = Field(description="engine that decodes (its own scheduler batches)")
    max_num_batched_tokens: int = Field(default=8192, ge=1, description="prefill tokens/step")
    kv_link: KvLinkSpec = Field(default_factory=NetworkKvLink)


SchedulerSpec = Annotated[
    StaticSchedulerSpec | ContinuousSchedulerSpec | ChunkedPrefillSchedulerSpec
    | DisaggregatedSchedulerSpec,
    Field(discriminator="name"),
]


# --- engines, CPU pools, memory tiers -------------------------------------------------------


class EngineSpec(Spec):
    """A group of devices running one or more models, each replica with its own step loop."""

    name: str = Field(min_length=1)
    device: str | GpuSpec = Field(description="catalog GPU/accelerator name, path, or inline")
    count: int = Field(ge=1, description="devices in the engine")
    topology: str | None = Field(
        default=None, description="catalog topology for TP/EP/PP traffic; None = device's")
    models: list[ModelEntrySpec] = Field(min_length=1)
    scheduler: SchedulerSpec = Field(default_factory=ContinuousSchedulerSpec)
    load_balance: Literal["least_loaded", "round_robin"] = Field(
        default="least_loaded", description="how requests pick a replica of a model")
    price_usd_per_hour: float | None = Field(
        default=None, ge=0, description="per device; None = the catalog's price")

    def replicas_of(self, entry: ModelEntrySpec) -> int:
        """Replicas of one model entry (explicit, or all devices for a single model)."""
        if entry.replicas is not None:
            return entry.replicas
        return self.count // entry.plan.num_gpus


class CpuPoolSpec(Spec):
    """CPU nodes running vector search; each node runs ``slots_per_node`` queries at once."""

    name: str = Field(min_length=1)
    nodes: int = Field(default=1, ge=1)
    slots_per_node: int = Field(default=1, ge=1, description="concurrent queries per node")
    price_usd_per_hour: float = Field(default=0.0, ge=0, description="per node")
    power_W: float = Field(default=0.0, ge=0, description="per node")


class MemoryTierSpec(Spec):
    """A memory/storage tier holding KV caches. Concurrent reads share ``bandwidth_GBps``
    fairly (processor sharing), each capped at ``per_read_bandwidth_GBps``; ``latency_us`` is
    paid by every read and is not shared."""

    name: str = Field(min_length=1)
    kind: Literal["hbm", "host_dram", "cxl", "local_ssd", "remote_memory", "storage"]
    capacity_GB: float = Field(gt=0, description="decimal GB")
    bandwidth_GBps: float = Field(gt=0, description="aggregate read bandwidth, GB/s")
    latency_us: float = Field(default=0.0, ge=0, description="per read, us")
    per_read_bandwidth_GBps: float | None = Field(
        default=None, gt=0, description="cap of one read, GB/s (e.g. a PCIe or NIC link)")


# --- stages -------------------------------------------------------------------------------


class FixedLength(Spec):
    """Always ``value`` tokens."""

    dist: Literal["fixed"] = "fixed"
    value: int = Field(ge=0)


class UniformLength(Spec):
    """Uniform integer in ``[low, high]``."""

    dist: Literal["uniform"] = "uniform"
    low: int = Field(ge=0)
    high: int = Field(ge=0)

    @model_validator(mode="after")
    def _check(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) < low ({self.low})")
        return self


class LognormalLength(Spec):
    """Lognormal with the given mean (tokens) and log-space ``sigma``, rounded, clipped."""

    dist: Literal["lognormal"] = "lognormal"
    mean: float = Field(gt=0, description="mean tokens")
    sigma: float = Field(ge=0, description="standard deviation of log(length)")
    min: int = Field(default=1, ge=0)
    max: int | None = Field(default=None, ge=1)


class TraceLength(Spec):
    """The length the trace file gives for each request."""

    dist: Literal["trace"] = "trace"


LengthSpec = Annotated[FixedLength | UniformLength | LognormalLength | TraceLength,
                       Field(discriminator="dist")]


class RagStageSpec(Spec):
    """Retrieval-augmented generation: embed the query on an engine, search a vector index on
    a CPU pool, add ``top_k × tokens_per_document`` tokens to the prompt.

    Search time per query: ``base_ms + per_million_vectors_ms · index_vectors/1e6 ·
    scan_fraction + per_result_ms · top_k`` (an IVF/flat index scans ``scan_fraction`` of it).
    """

    kind: Literal["rag"] = "rag"
    embedding_engine: str
    embedding_model: str | None = Field(default=None, description="None = engine's first")
    query_tokens: int | None = Field(
        default=None, ge=1, description="tokens embedded; None = the request's prompt")
    cpu_pool: str
    index_vectors: int = Field(ge=1, description="vectors in the index")
    scan_fraction: float = Field(default=1.0, gt=0, le=1, description="share scanned/query")
    base_ms: float = Field(ge=0)
    per_million_vectors_ms: float = Field(ge=0)
    per_result_ms: float = Field(default=0.0, ge=0)
    top_k: int = Field(ge=0, description="documents retrieved")
    tokens_per_document: int = Field(ge=0)


class KvRetrievalStageSpec(Spec):
    """Fetch a cached KV prefix from a memory tier. A hit (probability ``hit_fraction``,
    scaled down when ``distinct_prefixes`` of them do not fit in the tier) reads the
    prefix's KV bytes from the tier and skips computing those prefill tokens."""

    kind: Literal["kv_retrieval"] = "kv_retrieval"
    tier: str
    hit_fraction: float = Field(ge=0, le=1)
    prefix_tokens: int = Field(ge=1, description="cached prefix length (capped by the prompt)")
    distinct_prefixes: int | None = Field(
        default=None, ge=1, description="prefixes competing for the tier's capacity")


class ReasoningStageSpec(Spec):
    """Thinking before answering: ``rounds`` generate calls, each emitting thinking tokens
    (the last also the answer), with ``tool_tokens`` appended and ``round_gap_s`` spent
    (e.g. a tool call) between rounds. With ``prefix_cache`` a round's prompt reuses the
    previous rounds' KV (only new tokens are computed)."""

    kind: Literal["reasoning"] = "reasoning"
    thinking_tokens: LengthSpec = Field(description="per round")
    rounds: int = Field(default=1, ge=1)
    tool_tokens: int = Field(default=0, ge=0)
    round_gap_s: float = Field(default=0.0, ge=0)
    prefix_cache: bool = True


class RouteRule(Spec):
    """Send matching requests to ``model`` (optionally a specific ``engine``)."""

    min_input_tokens: int | None = Field(default=None, ge=0)
    max_input_tokens: int | None = Field(default=None, ge=0)
    model: str
    engine: str | None = None


class RouteSplit(Spec):
    """Send a share ``weight`` of requests (relative to the other splits) to ``model``."""

    weight: float = Field(gt=0)
    model: str
    engine: str | None = None


class RouteStageSpec(Spec):
    """Routing between models: the first matching rule wins, else a weighted random split,
    else the client's model."""

    kind: Literal["route"] = "route"
    rules: list[RouteRule] = Field(default_factory=list)
    split: list[RouteSplit] = Field(default_factory=list)


StageSpec = Annotated[RagStageSpec | KvRetrievalStageSpec | ReasoningStageSpec | RouteStageSpec,
                      Field(discriminator="kind")]


# --- clients --------------------------------------------------------------------------------


class ConstantArrival(Spec):
    """Deterministic arrivals every ``1/rate_rps`` seconds (first at ``start_s``)."""

    process: Literal["constant"] = "constant"
    rate_rps: float = Field(gt=0)


class PoissonArrival(Spec):
    """Poisson process: exponential gaps with mean ``1/rate_rps``."""

    process: Literal["poisson"] = "poisson"
    rate_rps: float = Field(gt=0)


class GammaArrival(Spec):
    """Bursty renewal process: gamma gaps with mean ``1/rate_rps`` and coefficient of
    variation ``cv`` (1 = Poisson, > 1 bursty)."""

    process: Literal["gamma"] = "gamma"
    rate_rps: float = Field(gt=0)
    cv: float = Field(gt=0)


class TraceArrival(Spec):
    """Replay a CSV or JSONL trace with arrival times and (optionally) lengths."""

    process: Literal["trace"] = "trace"
    path: str = Field(min_length=1, description="relative paths resolve against the spec file")
    format: Literal["csv", "jsonl"] | None = Field(default=None, description="None = suffix")
    time_unit: Literal["s", "ms", "us"] = "s"
    speedup: float = Field(default=1.0, gt=0, description="divide inter-arrival times by this")


ArrivalSpec = Annotated[ConstantArrival | PoissonArrival | GammaArrival | TraceArrival,
                        Field(discriminator="process")]


class RequestTypeSpec(Spec):
    """A kind of request: the stages it goes through before generating (in order)."""

    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0, description="share of the client's requests")
    stages: list[str] = Field(default_factory=list, description="names in ServingSpec.stages")


class ClientSpec(Spec):
    """A source of requests for one model."""

    name: str = Field(min_length=1)
    model: str
    arrival: ArrivalSpec
    num_requests: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0, description="arrivals in [0, this)")
    start_s: float = Field(default=0.0, ge=0, description="time of the client's first arrival")
    input_tokens: LengthSpec | None = Field(default=None, description="None = from the trace")
    output_tokens: LengthSpec | None = Field(default=None, description="None = from the trace")
    request_types: list[RequestTypeSpec] = Field(
        default_factory=lambda: [RequestTypeSpec(name="plain")])
    seed: int | None = Field(default=None, ge=0,
                             description="None = derived from ServingSpec.seed")

    @model_validator(mode="after")
    def _check(self) -> ClientSpec:
        trace = isinstance(self.arrival, TraceArrival)
        if not trace and self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        for field in ("input_tokens", "output_tokens"):
            value = getattr(self, field)
            if not trace and (value is None or isinstance(value, TraceLength)):
                raise ValueError(f"{field}: a length distribution is needed without a trace "
                                 "(fixed, uniform or lognormal)")
        names = [t.name for t in self.request_types]
        if len(set(names)) != len(names):
            raise ValueError("request_types: names must be unique")
        return self


class SloSpec(Spec):
    """Service-level objectives for goodput: a request meets them when both hold."""

    ttft_s: float | None = Field(default=None, gt=0, description="time to first token")
    tpot_s: float | None = Field(default=None, gt=0, description="time per output token")
    e2e_s: float | None = Field(default=None, gt=0, description="end-to-end latency")


class ServingSpec(Spec):
    """A serving system and the traffic it receives."""

    kind: Literal["serving"] = "serving"
    name: str = "serving"
    description: str = ""
    seed: int = Field(default=0, ge=0, description="seeds every client without its own seed")
    engines: list[EngineSpec] = Field(min_length=1)
    clients: list[ClientSpec] = Field(min_length=1)
    stages: dict[str, StageSpec] = Field(default_factory=dict)
    memory_tiers: list[MemoryTierSpec] = Field(default_factory=list)
    cpu_pools: list[CpuPoolSpec] = Field(default_factory=list)
    slo: SloSpec = Field(default_factory=SloSpec)
    electricity_usd_per_kWh: float = Field(default=DEFAULT_ELECTRICITY_USD_PER_KWH, ge=0)
    horizon_s: float | None = Field(
        default=None, gt=0, description="stop the simulation here; None = run until drained")
    record_token_times: bool = Field(
        default=False, description="keep every token's time per request (memory: O(tokens))")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> citation")

    @classmethod
    def parse(cls, data: Any, origin: str = "") -> ServingSpec:
        """Validate ``data``; cross-reference errors name their field like the others."""
        try:
            return super().parse(data, origin)
        except SpecError as exc:
            raise SpecError(str(exc).replace("ServingSpec.(root): Value error, ",
                                             "ServingSpec.")) from None

    @model_validator(mode="after")
    def _check_references(self) -> ServingSpec:
        _check_unique("engines", [e.name for e in self.engines])
        _check_unique("clients", [c.name for c in self.clients])
        _check_unique("memory_tiers", [t.name for t in self.memory_tiers])
        _check_unique("cpu_pools", [p.name for p in self.cpu_pools])
        engines = {e.name: e for e in self.engines}
        decode_only = {e.scheduler.decode_engine for e in self.engines
                       if isinstance(e.scheduler, DisaggregatedSchedulerSpec)}
        served: dict[str, list[str]] = {}
        for i, e in enumerate(self.engines):
            _check_engine(i, e, engines)
            if e.name not in decode_only:
                for m in e.models:
                    served.setdefault(m.key, []).append(e.name)

        def need_model(where: str, model: str, engine: str | None) -> None:
            key = model_key(model)
            if engine is not None:
                if engine not in engines:
                    raise ValueError(f"{where}.engine: unknown engine '{engine}'; allowed: "
                                     f"{', '.join(engines)}")
                if engine in decode_only:
                    raise ValueError(f"{where}.engine: '{engine}' only decodes for a "
                                     "disaggregated engine; name the prefill engine")
                if key not in {m.key for m in engines[engine].models}:
                    raise ValueError(f"{where}: engine '{engine}' does not serve '{model}'")
                return
            if key not in served:
                allowed = ", ".join(sorted(served)) or "(none)"
                raise ValueError(f"{where}.model: no engine serves '{model}'; served: {allowed}")

        tiers = {t.name for t in self.memory_tiers}
        pools = {p.name for p in self.cpu_pools}
        for name, st in self.stages.items():
            where = f"stages.{name}"
            if isinstance(st, RagStageSpec):
                if st.embedding_engine not in engines:
                    raise ValueError(f"{where}.embedding_engine: unknown engine "
                                     f"'{st.embedding_engine}'; allowed: {', '.join(engines)}")
                if st.embedding_model is not None:
                    need_model(where, st.embedding_model, st.embedding_engine)
                if st.cpu_pool not in pools:
                    raise ValueError(f"{where}.cpu_pool: unknown pool '{st.cpu_pool}'; "
                                     f"allowed: {', '.join(sorted(pools)) or '(none defined)'}")
            elif isinstance(st, KvRetrievalStageSpec):
                if st.tier not in tiers:
                    raise ValueError(f"{where}.tier: unknown memory tier '{st.tier}'; allowed: "
                                     f"{', '.join(sorted(tiers)) or '(none defined)'}")
            elif isinstance(st, RouteStageSpec):
                for j, rule in enumerate(st.rules):
                    need_model(f"{where}.rules.{j}", rule.model, rule.engine)
                for j, sp in enumerate(st.split):
                    need_model(f"{where}.split.{j}", sp.model, sp.engine)
        for i, c in enumerate(self.clients):
            for t in c.request_types:
                for s in t.stages:
                    if s not in self.stages:
                        allowed = ", ".join(self.stages) or "(none defined)"
                        raise ValueError(f"clients.{i}.request_types.{t.name}.stages: unknown "
                                         f"stage '{s}'; allowed: {allowed}")
                kinds = [self.stages[s].kind for s in t.stages]
                if kinds.count("reasoning") > 1 or kinds.count("route") > 1:
                    raise ValueError(f"clients.{i}.request_types.{t.name}: at most one "
                                     "reasoning and one route stage")
            if model_key(c.model) not in served:
                allowed = ", ".join(sorted(served)) or "(none)"
                raise ValueError(f"clients.{i}.model: no engine serves '{c.model}'; "
                                 f"served: {allowed}")
        return self


def _check_unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"{what}: name '{n}' is used twice")
        seen.add(n)


def _check_engine(i: int, e: EngineSpec, engines: dict[str, EngineSpec]) -> None:
    where = f"engines.{i}"
    keys = [m.key for m in e.models]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{where}.models: a model is listed twice")
    if len(e.models) > 1 and any(m.replicas is None for m in e.models):
        raise ValueError(f"{where}.models: with several models give each one's replicas")
    used = 0
    for j, m in enumerate(e.models):
        reps = e.replicas_of(m)
        if reps < 1:
            raise ValueError(f"{where}.models.{j}: tp·pp·ep = {m.plan.num_gpus} exceeds the "
                             f"engine's {e.count} devices")
        used += reps * m.plan.num_gpus
    if used > e.count:
        raise ValueError(f"{where}.models: replicas need {used} devices, the engine has "
                         f"{e.count}")
    sch = e.scheduler
    if isinstance(sch, DisaggregatedSchedulerSpec):
        dec = engines.get(sch.decode_engine)
        if dec is None or dec.name == e.name:
            allowed = ", ".join(n for n in engines if n != e.name) or "(none)"
            raise ValueError(f"{where}.scheduler.decode_engine: unknown engine "
                             f"'{sch.decode_engine}'; allowed: {allowed}")
        if isinstance(dec.scheduler, DisaggregatedSchedulerSpec | StaticSchedulerSpec):
            raise ValueError(f"{where}.scheduler.decode_engine: engine '{dec.name}' must use "
                             "the continuous or chunked_prefill scheduler")
        missing = set(keys) - {m.key for m in dec.models}
        if missing:
            raise ValueError(f"{where}.scheduler.decode_engine: engine '{dec.name}' does not "
                             f"serve {', '.join(sorted(missing))}")
