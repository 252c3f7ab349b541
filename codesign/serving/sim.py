"""Request-level discrete-event simulation of a serving system (SimPy).

``simulate_serving(spec)`` builds the engines (one step-loop process per model replica), the
memory tiers, CPU pools and KV links, draws every client's requests from its seed, and runs
each request through its stages (route, RAG, KV retrieval) and generate calls (one, or one
per reasoning round) until every request has finished (or ``horizon_s``). The result keeps a
record per request (arrival, stage times, queueing, first token, token times, finish) and the
per-step series of every replica; :mod:`codesign.serving.metrics` turns them into TTFT, TPOT,
throughput, goodput, utilization, KV occupancy and cost.

The parts live by job: :mod:`codesign.serving.system` builds the engines, tiers and links,
:mod:`codesign.serving.requests` draws and runs the requests, :mod:`codesign.serving.records`
holds what happened; this module runs a spec and re-exports their public names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simpy

from codesign.errors import SpecError
from codesign.runtime import no_cyclic_gc
from codesign.serving.records import KvTransferRecord, RequestRecord
from codesign.serving.replica import Instance
from codesign.serving.requests import (
    ClientDraws,
    arrival_process,
    draw_client,
    generate,
    request_process,
)
from codesign.serving.system import (
    CostFactory,
    ReplicaGroup,
    System,
    aggregate_pricer,
    build_system,
    default_cost,
    engine_gpu,
)
from codesign.serving.tiers import MemoryTier
from codesign.specs.catalog import read_data_file
from codesign.specs.gpu import GpuSpec
from codesign.specs.serving import ServingSpec

__all__ = ["ClientDraws", "CostFactory", "KvTransferRecord", "ReplicaGroup", "RequestRecord",
           "ServingResult", "System", "aggregate_pricer", "arrival_process", "build_system",
           "default_cost", "draw_client", "engine_gpu", "generate", "load_serving_spec",
           "request_process", "simulate_serving", "with_overrides"]


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
    # every object the run creates lives until the result is dropped, so the cyclic
    # collector's passes over them during the run only cost time (a third of it at 30,000
    # requests)
    with no_cyclic_gc():
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
