"""Request stages before generation: routing, RAG retrieval and KV-cache retrieval.

Each runner is a SimPy process body (a generator) working on one request; the pure parts
(route choice, search time, effective hit fraction) are plain functions so they can be
checked by hand. Reasoning is not a stage of its own here: it shapes the generate calls
(rounds, thinking tokens), see :func:`codesign.serving.requests.generate`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from codesign.serving.replica import REJECTED, Seq
from codesign.specs.serving import (
    KvRetrievalStageSpec,
    RagStageSpec,
    RouteStageSpec,
    model_key,
)

if TYPE_CHECKING:
    from codesign.serving.records import RequestRecord
    from codesign.serving.system import System


def choose_route(stage: RouteStageSpec, input_tokens: int,
                 u: float) -> tuple[str, str | None] | None:
    """(model key, engine or None) for a request, or ``None`` to keep the client's model.

    The first rule whose token bounds hold wins; otherwise the uniform draw ``u`` in [0, 1)
    picks a split in proportion to the weights.
    """
    for rule in stage.rules:
        if rule.min_input_tokens is not None and input_tokens < rule.min_input_tokens:
            continue
        if rule.max_input_tokens is not None and input_tokens > rule.max_input_tokens:
            continue
        return model_key(rule.model), rule.engine
    if stage.split:
        total = sum(s.weight for s in stage.split)
        acc = 0.0
        for s in stage.split:
            acc += s.weight / total
            if u < acc:
                return model_key(s.model), s.engine
        last = stage.split[-1]
        return model_key(last.model), last.engine
    return None


def search_time_s(stage: RagStageSpec) -> float:
    """Vector-search time of one query on one CPU slot, seconds:
    ``base + per_million_vectors · index/1e6 · scan_fraction + per_result · top_k`` (ms)."""
    ms = (stage.base_ms
          + stage.per_million_vectors_ms * stage.index_vectors / 1e6 * stage.scan_fraction
          + stage.per_result_ms * stage.top_k)
    return ms * 1e-3


def effective_hit_fraction(stage: KvRetrievalStageSpec, capacity_bytes: float,
                           prefix_bytes: float) -> float:
    """``hit_fraction``, scaled by the share of ``distinct_prefixes`` the tier can hold."""
    if stage.distinct_prefixes is None or prefix_bytes <= 0:
        return stage.hit_fraction
    fits = capacity_bytes / (stage.distinct_prefixes * prefix_bytes)
    return stage.hit_fraction * min(1.0, fits)


def run_rag(system: System, req: RequestRecord, name: str,
            stage: RagStageSpec) -> Generator[Any, Any, bool]:
    """Embed the query, search the index, add the documents to the prompt. ``False`` if
    the embedding engine rejected the query."""
    env = system.env
    t0 = env.now
    group = system.group_for(stage.embedding_model, stage.embedding_engine)
    seq = Seq(env, stage.query_tokens or req.prompt_tokens, 0, 0, req, f"{name}.embed")
    req.seqs.append(seq)
    group.pick().submit(seq)
    yield seq.done
    req.stages.append((f"{name}.embed", t0, env.now))
    if seq.state == REJECTED:
        req.rejected = seq.reason
        return False
    t1 = env.now
    pool = system.pools[stage.cpu_pool]
    with pool.request() as slot:
        yield slot
        yield env.timeout(search_time_s(stage))
    req.stages.append((f"{name}.search", t1, env.now))
    req.prompt_tokens += stage.top_k * stage.tokens_per_document
    return True


def run_kv_retrieval(system: System, req: RequestRecord, name: str, stage: KvRetrievalStageSpec,
                     u: float) -> Generator[Any, Any, None]:
    """On a hit (draw ``u`` below the effective hit fraction) read the prefix's KV from the
    tier (latency, then a fair share of its bandwidth); the prefix then needs no compute."""
    env = system.env
    t0 = env.now
    prefix = min(stage.prefix_tokens, max(req.prompt_tokens - 1, 0))
    group = system.group_for(req.model, req.engine)
    nbytes = group.cost.kv_transfer_bytes(prefix)
    tier = system.tiers[stage.tier]
    if prefix <= 0 or u >= effective_hit_fraction(stage, tier.capacity_bytes, nbytes):
        req.stages.append((f"{name}.miss", t0, t0))
        return
    yield from tier.read(nbytes, req.id)
    req.kv_hit = True
    req.cached_tokens = prefix
    req.tier_bytes += nbytes
    req.stages.append((name, t0, env.now))
