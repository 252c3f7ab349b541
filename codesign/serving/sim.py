"""Request-level discrete-event simulation of a serving system (SimPy).

``simulate_serving(spec)`` builds the engines (one step-loop process per model replica), the
memory tiers, CPU pools and KV links, draws every client's requests from its seed, and runs
each request through its stages (route, RAG, KV retrieval) and generate calls (one, or one
per reasoning round) until every request has finished (or ``horizon_s``). The result keeps a
record per request (arrival, stage times, queueing, first token, token times, finish) and the
per-step series of every replica; :mod:`codesign.serving.metrics` turns them into TTFT, TPOT,
throughput, goodput, utilization, KV occupancy and cost.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import simpy

from codesign.errors import InfeasiblePlan, SpecError
from codesign.serving.arrivals import (
    arrival_times,
    client_generators,
    load_client_trace,
    sample_lengths,
)
from codesign.serving.engine import REJECTED, Instance, Seq
from codesign.serving.fixed_cost import AggregateCost, FixedStepCost, StepCost
from codesign.serving.schedulers import DisaggregatedScheduler, make_scheduler
from codesign.serving.stages import choose_route, run_kv_retrieval, run_rag
from codesign.serving.tiers import FairShareChannel, MemoryTier
from codesign.serving.traces import Trace
from codesign.specs.catalog import load_gpu, load_model, load_topology, read_data_file
from codesign.specs.gpu import GpuSpec
from codesign.specs.serving import (
    ClientSpec,
    DirectKvLink,
    DisaggregatedSchedulerSpec,
    EngineSpec,
    KvRetrievalStageSpec,
    ModelEntrySpec,
    NetworkKvLink,
    RagStageSpec,
    ReasoningStageSpec,
    RouteStageSpec,
    ServingSpec,
    TraceArrival,
    model_key,
)
from codesign.units import GB, us_to_s

CostFactory = Callable[[EngineSpec, ModelEntrySpec, str], StepCost]


class RequestRecord:
    """What happened to one request. Times in seconds from the start of the simulation.

    ``stages`` holds ``(name, start_s, end_s)`` of the pre-generation stages and reasoning
    gaps; ``seqs`` the engine sequences it ran (embedding, then one per generate round), whose
    queue, prefill, decode and KV-transfer times and token segments the metrics and the
    timeline read.
    """

    __slots__ = ("arrival_s", "cached_tokens", "client", "engine", "finish_s", "id",
                 "index", "input_tokens", "kv_hit", "model", "output_tokens", "prompt_tokens",
                 "rejected", "request_type", "seqs", "stages", "tier_bytes")

    def __init__(self, rid: int, client: str, index: int, request_type: str, model: str,
                 arrival_s: float, input_tokens: int, output_tokens: int) -> None:
        self.id = rid
        self.client = client
        self.index = index
        self.request_type = request_type
        self.model = model
        self.engine: str | None = None
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.prompt_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cached_tokens = 0
        self.kv_hit = False
        self.tier_bytes = 0.0
        self.stages: list[tuple[str, float, float]] = []
        self.seqs: list[Seq] = []
        self.finish_s: float | None = None
        self.rejected: str | None = None

    @property
    def first_token_s(self) -> float | None:
        """Time of the first generated token (any generate call), or ``None``."""
        for s in self.seqs:
            if s.first_token_s is not None and s.out > 0:
                return s.first_token_s
        return None

    @property
    def generated_tokens(self) -> int:
        """Tokens generated over all generate calls (thinking and answer)."""
        return sum(s.gen for s in self.seqs if s.out > 0)

    @property
    def queue_s(self) -> float:
        """Time spent waiting in engine queues (incl. after preemptions and handoffs)."""
        return sum(s.queue_s for s in self.seqs)

    @property
    def preemptions(self) -> int:
        """Times any of its sequences was preempted."""
        return sum(s.preemptions for s in self.seqs)

    @property
    def kv_transfer_bytes(self) -> float:
        """KV bytes sent from a prefill to a decode engine for this request."""
        return sum(s.transfer[2] for s in self.seqs if s.transfer is not None)

    def token_times(self) -> list[float]:
        """Every generated token's time, in order."""
        out: list[float] = []
        for s in self.seqs:
            if s.out > 0:
                out.extend(s.token_times())
        return out

    @property
    def completed(self) -> bool:
        """Finished without rejection."""
        return self.finish_s is not None and self.rejected is None

    def to_dict(self, token_times: bool = False) -> dict[str, Any]:
        """Plain-data record (JSON-ready)."""
        ft = self.first_token_s
        d: dict[str, Any] = {
            "id": self.id, "client": self.client, "request_type": self.request_type,
            "model": self.model, "arrival_s": self.arrival_s,
            "input_tokens": self.input_tokens, "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens, "generated_tokens": self.generated_tokens,
            "cached_tokens": self.cached_tokens, "kv_hit": self.kv_hit,
            "queue_s": self.queue_s, "first_token_s": ft, "finish_s": self.finish_s,
            "ttft_s": None if ft is None else ft - self.arrival_s,
            "e2e_s": None if self.finish_s is None else self.finish_s - self.arrival_s,
            "preemptions": self.preemptions, "kv_transfer_bytes": self.kv_transfer_bytes,
            "stages": [{"name": n, "start_s": a, "end_s": b} for n, a, b in self.stages],
            "rejected": self.rejected,
        }
        if token_times:
            d["token_times_s"] = self.token_times()
        return d


@dataclass
class ReplicaGroup:
    """The replicas of one model on one engine (they share one step-cost model)."""

    engine: EngineSpec
    entry: ModelEntrySpec
    cost: StepCost
    gpu: GpuSpec
    instances: list[Instance] = field(default_factory=list)
    _rr: int = 0

    @property
    def key(self) -> str:
        """Normalized model name."""
        return self.entry.key

    def pick(self) -> Instance:
        """A replica for the next sequence (least loaded, or round robin)."""
        inst = self.instances
        if len(inst) == 1:
            return inst[0]
        if self.engine.load_balance == "round_robin":
            self._rr = (self._rr + 1) % len(inst)
            return inst[self._rr]
        return min(inst, key=lambda i: i.load)

    @property
    def load(self) -> int:
        """Least load among the replicas."""
        return min(i.load for i in self.instances)


@dataclass
class KvTransferRecord:
    """One KV transfer from a prefill to a decode replica."""

    request_id: int
    src: str
    dst: str
    bytes: float
    start_s: float
    end_s: float


class System:
    """The built serving system inside one SimPy environment."""

    def __init__(self, env: simpy.Environment, spec: ServingSpec) -> None:
        self.env = env
        self.spec = spec
        self.groups: dict[str, dict[str, ReplicaGroup]] = {}  # engine -> model key -> group
        self.entry_groups: dict[str, list[ReplicaGroup]] = {}  # model key -> entry groups
        self.instances: list[Instance] = []
        self.tiers: dict[str, MemoryTier] = {}
        self.pools: dict[str, simpy.Resource] = {}
        self.kv_channels: dict[str, FairShareChannel] = {}
        self.kv_transfers: list[KvTransferRecord] = []
        self.gpu_of: dict[str, GpuSpec | None] = {}

    def group_for(self, model: str | None, engine: str | None = None) -> ReplicaGroup:
        """The replica group serving ``model`` (on ``engine`` if given; else the least
        loaded engine that takes requests for it). ``model=None``: the engine's first."""
        if engine is not None:
            groups = self.groups[engine]
            if model is None:
                return next(iter(groups.values()))
            return groups[model_key(model)]
        assert model is not None
        cands = self.entry_groups[model_key(model)]
        return cands[0] if len(cands) == 1 else min(cands, key=lambda g: g.load)


# --- building -----------------------------------------------------------------------------


def _resolve(where: str, fn: Callable[[str], Any], ref: str) -> Any:
    try:
        return fn(ref)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def engine_gpu(engine: EngineSpec, where: str) -> GpuSpec:
    """The engine's device spec (catalog name or inline)."""
    if isinstance(engine.device, GpuSpec):
        return engine.device
    gpu: GpuSpec = _resolve(f"{where}.device", load_gpu, engine.device)
    return gpu


def default_cost(engine: EngineSpec, entry: ModelEntrySpec, where: str) -> StepCost:
    """Fixed costs where the spec gives them, else the analytical step-cost model."""
    if entry.step_cost is not None:
        return FixedStepCost.from_spec(entry.step_cost)
    model = entry.model if not isinstance(entry.model, str) else \
        _resolve(f"{where}.model", load_model, entry.model)
    gpu = engine_gpu(engine, where.rsplit(".models", 1)[0])
    topo_ref = engine.topology or gpu.default_topology
    topology = _resolve(f"{where.rsplit('.models', 1)[0]}.topology", load_topology, topo_ref)
    try:
        from codesign.serving.step_cost import StepCostModel
    except ImportError:
        raise SpecError(f"{where}: the analytical step-cost model (codesign.serving.step_cost) "
                        "is not available; give step_cost: {kind: fixed, ...}") from None
    try:
        return StepCostModel.build(model, gpu, topology, entry.plan)
    except (InfeasiblePlan, ValueError, KeyError) as exc:
        raise SpecError(f"{where}: {exc}") from None


def aggregate_pricer(cost: StepCost) -> AggregateCost | None:
    """A fast ``(prefill, decoding count, context sum) -> s`` pricer equal to
    ``cost.step_time_s``, when the cost model prices from aggregates (else ``None``)."""
    fast = getattr(cost, "step_time_agg_s", None)
    if fast is not None:
        return cast(AggregateCost, fast)
    shape_time = getattr(cost, "shape_time_s", None)
    if shape_time is None:
        return None
    try:
        from codesign.workload.inference import StepShape
    except ImportError:
        return None
    of, dec = StepShape.of, StepShape.decode_batch

    def agg(prefill: Sequence[tuple[int, int]], n_decode: int, ctx_sum: float) -> float:
        shape = of(prefill, ())
        if n_decode:
            # decode_batch(n, mean context) has the same sums as the n contexts
            shape = shape + dec(n_decode, ctx_sum / n_decode)
        return float(shape_time(shape))

    return agg


def _kv_link_amount(link: NetworkKvLink | DirectKvLink, gpu: GpuSpec | None,
                    senders: int, where: str) -> tuple[Callable[[float], float], float, float]:
    """(bytes -> channel units, channel rate, fixed latency s) of a disaggregated KV link."""
    if isinstance(link, DirectKvLink):
        return (lambda nbytes: nbytes), link.bandwidth_GBps * GB, us_to_s(link.latency_us)
    from codesign.network.model import NetworkModel
    from codesign.network.placement import layout_for
    from codesign.specs.topology import FullFlatTopology

    ref = link.topology or (gpu.default_topology if gpu is not None else None)
    if ref is None:
        raise SpecError(f"{where}.kv_link.topology: give a topology (the device has none)")
    topo = _resolve(f"{where}.kv_link.topology", load_topology, ref)
    domain = 1 if (link.same_domain or isinstance(topo, FullFlatTopology)) \
        else topo.scale_up.domain_size
    net = NetworkModel(topo, layout_for(tp=domain, cp=1, ep=1, dp=1, pp=2))

    def seconds(nbytes: float) -> float:
        return net.collective("p2p", "pp", nbytes / senders).time_s

    return seconds, 1.0, 0.0


def build_system(spec: ServingSpec, env: simpy.Environment,
                 cost_factory: CostFactory = default_cost) -> System:
    """Engines, replicas with their schedulers, tiers, pools and KV links."""
    system = System(env, spec)
    decode_only = {e.scheduler.decode_engine for e in spec.engines
                   if isinstance(e.scheduler, DisaggregatedSchedulerSpec)}
    for i, eng in enumerate(spec.engines):
        where = f"engines.{i}"
        gpu = engine_gpu(eng, where)
        system.groups[eng.name] = {}
        sch = eng.scheduler
        for j, entry in enumerate(eng.models):
            w = f"{where}.models.{j}"
            cost = cost_factory(eng, entry, w)
            agg = aggregate_pricer(cost)
            kv_tokens = sch.kv_capacity_tokens or int(cost.kv_capacity_tokens)
            if kv_tokens < sch.block_size_tokens:
                raise SpecError(f"{w}: no room for the KV cache ({kv_tokens} tokens) with "
                                f"plan tp={entry.plan.tp} pp={entry.plan.pp} on "
                                f"{gpu.name}")
            group = ReplicaGroup(eng, entry, cost, gpu)
            for r in range(eng.replicas_of(entry)):
                inst = Instance(env, eng.name, r, entry.key, cost, entry.plan.num_gpus,
                                sch.block_size_tokens, kv_tokens, sch.max_num_seqs, agg)
                make_scheduler(inst, sch)
                group.instances.append(inst)
                system.instances.append(inst)
                system.gpu_of[inst.name] = gpu
            system.groups[eng.name][entry.key] = group
            if eng.name not in decode_only:
                system.entry_groups.setdefault(entry.key, []).append(group)
    for i, eng in enumerate(spec.engines):
        sch = eng.scheduler
        if not isinstance(sch, DisaggregatedSchedulerSpec):
            continue
        _wire_disaggregated(system, eng, sch, f"engines.{i}.scheduler")
    for t in spec.memory_tiers:
        system.tiers[t.name] = MemoryTier(env, t)
    for p in spec.cpu_pools:
        system.pools[p.name] = simpy.Resource(env, capacity=p.nodes * p.slots_per_node)
    for inst in system.instances:
        env.process(inst.run())
    return system


def _wire_disaggregated(system: System, eng: EngineSpec, sch: DisaggregatedSchedulerSpec,
                        where: str) -> None:
    env = system.env
    dec_groups = system.groups[sch.decode_engine]
    for key, group in system.groups[eng.name].items():
        dgroup = dec_groups[key]
        to_units, rate, latency_s = _kv_link_amount(sch.kv_link, group.gpu,
                                                    group.entry.plan.num_gpus, where)
        for inst in group.instances:
            channel = FairShareChannel(env, f"kv:{inst.name}", rate)
            system.kv_channels[inst.name] = channel
            scheduler = inst.scheduler
            assert isinstance(scheduler, DisaggregatedScheduler)
            scheduler.pick_decode = lambda _seq, g=dgroup: g.pick()
        for dinst in dgroup.instances:
            dinst.receiver = _make_receiver(system, to_units, latency_s)


def _make_receiver(system: System, to_units: Callable[[float], float],
                   latency_s: float) -> Callable[[Seq, Instance], None]:
    env = system.env

    def transfer(seq: Seq, dst: Instance) -> Generator[Any, Any, None]:
        src = seq.kv_src
        assert src is not None
        nbytes = float(src.cost.kv_transfer_bytes(seq.pf_total))
        t0 = env.now
        if latency_s > 0:
            yield env.timeout(latency_s)
        yield system.kv_channels[src.name].transfer(to_units(nbytes), nbytes, seq)
        src.release(seq.kv_src_blocks)
        seq.kv_src_blocks = 0
        src.kick()
        seq.transfer = (t0, env.now, nbytes)
        rid = seq.req.id if seq.req is not None else -1
        system.kv_transfers.append(KvTransferRecord(rid, src.name, dst.name, nbytes, t0,
                                                    env.now))
        seq.remote_kv = False
        dst.join_decode(seq)
        dst.kick()

    def receive(seq: Seq, dst: Instance) -> None:
        env.process(transfer(seq, dst))

    return receive


# --- requests -----------------------------------------------------------------------------


@dataclass
class ClientDraws:
    """Everything random about one client's requests, drawn up front."""

    client: ClientSpec
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    type_index: np.ndarray
    uniforms: dict[str, np.ndarray]  # stage name -> one draw per request
    thinking: dict[str, np.ndarray]  # reasoning stage -> (requests, rounds) tokens


def draw_client(spec: ServingSpec, index: int, base_dir: Path | None,
                problems: list[str]) -> ClientDraws:
    """Sample one client's requests from its seed (see :mod:`codesign.serving.arrivals`)."""
    c = spec.clients[index]
    seed: int | tuple[int, ...] = c.seed if c.seed is not None else (spec.seed, index)
    stage_names = list(spec.stages)
    rngs = client_generators(seed, 4 + len(stage_names))
    trace: Trace | None = None
    if isinstance(c.arrival, TraceArrival):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = load_client_trace(c.arrival, base_dir)
        problems.extend(str(w.message) for w in caught)
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    times = arrival_times(c.arrival, rngs[0], c.num_requests, c.duration_s, base_dir, trace)
    n = len(times)
    where = f"clients.{index}"
    lengths = []
    for field_name, column in (("input_tokens", trace.input_tokens if trace else None),
                               ("output_tokens", trace.output_tokens if trace else None)):
        dist = getattr(c, field_name)
        if dist is None:
            if column is None:
                raise SpecError(f"{where}.{field_name}: the trace has no {field_name} column; "
                                "give a length distribution")
            lengths.append(np.asarray(column[:n], dtype=np.int64))
        else:
            rng = rngs[1] if field_name == "input_tokens" else rngs[2]
            try:
                lengths.append(sample_lengths(dist, n, rng, column))
            except SpecError as exc:
                raise SpecError(f"{where}.{field_name}: {exc}") from None
    weights = np.array([t.weight for t in c.request_types], dtype=float)
    types = rngs[3].choice(len(weights), size=n, p=weights / weights.sum()) \
        if len(weights) > 1 else np.zeros(n, dtype=np.int64)
    uniforms: dict[str, np.ndarray] = {}
    thinking: dict[str, np.ndarray] = {}
    for k, name in enumerate(stage_names):
        st = spec.stages[name]
        rng = rngs[4 + k]
        if isinstance(st, ReasoningStageSpec):
            draws = sample_lengths(st.thinking_tokens, n * st.rounds, rng)
            thinking[name] = draws.reshape(n, st.rounds)
        else:
            uniforms[name] = rng.random(n)
    return ClientDraws(c, times + c.start_s, lengths[0], lengths[1], types, uniforms, thinking)


def generate(system: System, req: RequestRecord,
             reasoning: ReasoningStageSpec | None, thinking: np.ndarray | None
             ) -> Generator[Any, Any, None]:
    """Run the request's generate call(s) on the engine serving its model."""
    env = system.env
    rounds = reasoning.rounds if reasoning is not None else 1
    ctx = req.prompt_tokens
    cached = req.cached_tokens
    for r in range(rounds):
        last = r == rounds - 1
        out = int(thinking[r]) if thinking is not None else 0
        if last:
            out += req.output_tokens
        seq = Seq(env, ctx, out, cached, req, f"generate.{r}" if rounds > 1 else "generate")
        req.seqs.append(seq)
        group = system.group_for(req.model, req.engine)
        group.pick().submit(seq)
        yield seq.done
        if seq.state == REJECTED:
            req.rejected = seq.reason
            return
        if not last:
            assert reasoning is not None
            ctx += out
            cached = ctx if reasoning.prefix_cache else 0
            ctx += reasoning.tool_tokens
            if reasoning.round_gap_s > 0:
                t0 = env.now
                yield env.timeout(reasoning.round_gap_s)
                req.stages.append((f"gap.{r}", t0, env.now))


def request_process(system: System, req: RequestRecord, draws: ClientDraws,
                    stage_names: list[str]) -> Generator[Any, Any, None]:
    """One request through its stages and generate calls."""
    env = system.env
    spec = system.spec
    reasoning: ReasoningStageSpec | None = None
    thinking: np.ndarray | None = None
    i = req.index
    for name in stage_names:
        st = spec.stages[name]
        if isinstance(st, RouteStageSpec):
            choice = choose_route(st, req.prompt_tokens, float(draws.uniforms[name][i]))
            if choice is not None:
                req.model, req.engine = choice
            req.stages.append((name, env.now, env.now))
        elif isinstance(st, RagStageSpec):
            ok = yield from run_rag(system, req, name, st)
            if not ok:
                req.finish_s = env.now
                return
        elif isinstance(st, KvRetrievalStageSpec):
            yield from run_kv_retrieval(system, req, name, st, float(draws.uniforms[name][i]))
        elif isinstance(st, ReasoningStageSpec):
            reasoning = st
            thinking = draws.thinking[name][i]
    yield from generate(system, req, reasoning, thinking)
    req.finish_s = env.now


def arrival_process(system: System, draws: ClientDraws, records: list[RequestRecord],
                    first_id: int) -> Generator[Any, Any, None]:
    """Release the client's requests at their arrival times."""
    env = system.env
    c = draws.client
    key = model_key(c.model)
    type_stages = [list(t.stages) for t in c.request_types]
    type_names = [t.name for t in c.request_types]
    times = draws.arrival_s.tolist()
    ins = draws.input_tokens.tolist()
    outs = draws.output_tokens.tolist()
    tix = draws.type_index.tolist()
    for i, t in enumerate(times):
        if t > env.now:
            yield env.timeout(t - env.now)
        req = RequestRecord(first_id + i, c.name, i, type_names[tix[i]], key, t, ins[i],
                            outs[i])
        records.append(req)
        env.process(request_process(system, req, draws, type_stages[tix[i]]))


# --- entry points ---------------------------------------------------------------------------


@dataclass
class ServingResult:
    """Outcome of one simulation; :meth:`metrics` summarizes it."""

    spec: ServingSpec
    requests: list[RequestRecord]
    instances: list[Instance]
    gpus: dict[str, GpuSpec | None]
    kv_transfers: list[KvTransferRecord]
    tiers: dict[str, MemoryTier]
    end_s: float
    wall_s: float
    problems: list[str] = field(default_factory=list)
    _metrics: dict[str, Any] | None = None

    def metrics(self) -> dict[str, Any]:
        """Latency percentiles, throughput, goodput, utilization, KV occupancy, cost."""
        if self._metrics is None:
            from codesign.serving.metrics import compute_metrics

            self._metrics = compute_metrics(self)
        return self._metrics

    def to_dict(self, requests: bool = False) -> dict[str, Any]:
        """Metrics (and optionally every request record) as plain data."""
        d: dict[str, Any] = {"name": self.spec.name, **self.metrics()}
        if self.problems:
            d["warnings"] = list(self.problems)
        if requests:
            d["requests"] = [r.to_dict(self.spec.record_token_times) for r in self.requests]
        return d


def with_overrides(spec: ServingSpec, num_requests: int | None = None,
                   seed: int | None = None) -> ServingSpec:
    """``spec`` with every client issuing ``num_requests`` and/or a new base ``seed``
    (which replaces the clients' own seeds)."""
    if num_requests is None and seed is None:
        return spec
    data = spec.model_dump()
    if seed is not None:
        data["seed"] = seed
    for c in data["clients"]:
        if num_requests is not None:
            c["num_requests"] = num_requests
            c["duration_s"] = None
        if seed is not None:
            c["seed"] = None
    return ServingSpec.parse(data)


def simulate_serving(spec: ServingSpec, *, base_dir: Path | str | None = None,
                     cost_factory: CostFactory = default_cost) -> ServingResult:
    """Simulate ``spec``; relative trace paths resolve against ``base_dir``."""
    wall0 = time.perf_counter()
    env = simpy.Environment()
    system = build_system(spec, env, cost_factory)
    problems: list[str] = []
    bdir = Path(base_dir) if base_dir is not None else None
    records: list[RequestRecord] = []
    first = 0
    for i in range(len(spec.clients)):
        draws = draw_client(spec, i, bdir, problems)
        env.process(arrival_process(system, draws, records, first))
        first += len(draws.arrival_s)
    if spec.horizon_s is not None:
        env.run(until=spec.horizon_s)
    else:
        env.run()
    records.sort(key=lambda r: r.id)
    return ServingResult(spec=spec, requests=records, instances=system.instances,
                         gpus=system.gpu_of, kv_transfers=system.kv_transfers,
                         tiers=system.tiers, end_s=float(env.now),
                         wall_s=time.perf_counter() - wall0, problems=problems)


def load_serving_spec(path: Path | str) -> ServingSpec:
    """Read and validate a serving spec file (YAML or JSON)."""
    path = Path(path)
    data = read_data_file(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a serving spec is a mapping (engines, clients, ...)")
    return ServingSpec.parse(data, str(path))
