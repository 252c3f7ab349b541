"""Serving traffic specs: request length distributions, per-request stages (RAG, KV-cache
retrieval, reasoning, routing), arrival processes, clients and SLOs. Part of
:mod:`codesign.specs.serving`, which re-exports every name."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from codesign.specs.base import Spec

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
    sigma: float = Field(ge=0, le=10, description="standard deviation of log(length), at most "
                                                  "10 (the mean's log-space offset "
                                                  "sigma^2/2 already spans e^50 there)")
    min: int = Field(default=1, ge=0)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check_bounds(self) -> LognormalLength:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) < min ({self.min})")
        return self


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


#: most thinking rounds one request may take: every request's rounds are drawn up front
#: (requests x rounds lengths), so an unbounded count exhausts memory before a clear error;
#: agentic traces run tens of tool-call rounds, not thousands
MAX_REASONING_ROUNDS = 1024


class ReasoningStageSpec(Spec):
    """Thinking before answering: ``rounds`` generate calls, each emitting thinking tokens
    (the last also the answer), with ``tool_tokens`` appended and ``round_gap_s`` spent
    (e.g. a tool call) between rounds. With ``prefix_cache`` a round's prompt reuses the
    previous rounds' KV (only new tokens are computed)."""

    kind: Literal["reasoning"] = "reasoning"
    thinking_tokens: LengthSpec = Field(description="per round")
    rounds: int = Field(default=1, ge=1, le=MAX_REASONING_ROUNDS,
                        description="generate calls per request (thinking rounds)")
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


#: bounds of a mean arrival rate, requests/s: the mean gap 1/rate stays a finite number of
#: seconds (a subnormal rate made every arrival time infinite and every latency NaN)
MIN_RATE_RPS, MAX_RATE_RPS = 1e-9, 1e9
#: a mean arrival rate field, requests/s
RateRps = Annotated[float, Field(ge=MIN_RATE_RPS, le=MAX_RATE_RPS,
                                 description="mean arrival rate, requests/s, [1e-9, 1e9]")]


class ConstantArrival(Spec):
    """Deterministic arrivals every ``1/rate_rps`` seconds (first at ``start_s``)."""

    process: Literal["constant"] = "constant"
    rate_rps: RateRps


class PoissonArrival(Spec):
    """Poisson process: exponential gaps with mean ``1/rate_rps``."""

    process: Literal["poisson"] = "poisson"
    rate_rps: RateRps


class GammaArrival(Spec):
    """Bursty renewal process: gamma gaps with mean ``1/rate_rps`` and coefficient of
    variation ``cv`` (1 = Poisson, > 1 bursty)."""

    process: Literal["gamma"] = "gamma"
    rate_rps: RateRps
    cv: float = Field(gt=0, le=100.0,
                      description="coefficient of variation of the gaps, (0, 100]: 1 = Poisson, "
                                  "> 1 bursty (the gamma shape is 1/cv^2)")


class TraceArrival(Spec):
    """Replay a CSV or JSONL trace with arrival times and (optionally) lengths."""

    process: Literal["trace"] = "trace"
    path: str = Field(min_length=1, description="relative paths resolve against the spec file")
    format: Literal["csv", "jsonl"] | None = Field(default=None, description="None = suffix")
    time_unit: Literal["s", "ms", "us"] = "s"
    speedup: float = Field(default=1.0, gt=0, description="divide inter-arrival times by this")


class BurstArrival(Spec):
    """Every request at ``start_s`` at once (an offline benchmark: requests at an infinite
    rate, as trtllm-bench ``throughput`` and vLLM ``benchmark_throughput`` issue them). Needs
    ``num_requests``."""

    process: Literal["burst"] = "burst"


class ClosedLoopArrival(Spec):
    """Closed-loop clients: ``concurrency`` users, each sending its next request when its
    previous one finishes (plus ``think_time_s``), as vLLM's ``benchmark_serving
    --max-concurrency`` (at an unlimited request rate) and genai-perf's ``--concurrency``
    load a server. Needs ``num_requests``; a request's arrival is the moment it is sent."""

    process: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(ge=1, description="users (requests in flight)")
    think_time_s: float = Field(default=0.0, ge=0, description="pause between a user's "
                                "response and its next request, s")


ArrivalSpec = Annotated[ConstantArrival | PoissonArrival | GammaArrival | BurstArrival
                        | TraceArrival | ClosedLoopArrival, Field(discriminator="process")]


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
        default_factory=lambda: [RequestTypeSpec(name="plain")], min_length=1,
        description="at least one; default one plain type")
    seed: int | None = Field(default=None, ge=0,
                             description="None = derived from ServingSpec.seed")

    @model_validator(mode="after")
    def _check(self) -> ClientSpec:
        trace = isinstance(self.arrival, TraceArrival)
        if not trace and self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        if isinstance(self.arrival, BurstArrival | ClosedLoopArrival) \
                and self.num_requests is None:
            raise ValueError(f"a {self.arrival.process} arrival needs num_requests")
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
