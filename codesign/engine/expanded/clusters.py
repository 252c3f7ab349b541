"""Clusters of the per-rank engine: which clusters a perturbation touches, the chunk passes of
healthy clusters (the symmetric engine's, or contended ones) and of perturbed ones (member by
member, vectorized), replica classes, and the priced cluster of every class at every stage
(:class:`ClusterUnit`) that the pipeline level wires together."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from codesign.engine.expanded.batch import BatchPrices, batch_pass
from codesign.engine.expanded.fluid import fluid_pass
from codesign.engine.expanded.geometry import RankGeometry
from codesign.engine.expanded.link_factors import LinkFactors
from codesign.engine.expanded.values import PassTiming, Perturbations, from_chunk_timing
from codesign.engine.training import step_shape, time_chunks
from codesign.hardware.compute import ComputeModel
from codesign.network.model import NetworkModel
from codesign.workload.dims import pipeline_message
from codesign.workload.schedules import SPLIT_BACKWARD
from codesign.workload.step_program import optimizer_op, pass_ops
from codesign.workload.training import (
    ChunkGraph,
    TrainingGraph,
)


@dataclass
class ClusterUnit:
    """One simulated cluster: a replica class's cluster at one stage."""

    passes: dict[tuple[int, str], PassTiming]
    member_opt: np.ndarray | float  # optimizer seconds per member
    opt_time: float
    send_fwd: float  # to the next stage
    send_bwd: float  # to the previous stage
    send_fwd_pid: int = 0
    send_bwd_pid: int = 0


@dataclass
class Clusters:
    """Everything the pipeline level needs about the job's clusters.

    ``units[k][s]`` is replica class ``k``'s cluster at stage ``s``; ``classes[k]`` the
    replicas of class ``k``; ``healthy_pass`` the chunk passes of a healthy cluster by
    (virtual stage, phase); ``batches[s]`` a replica holding each distinct perturbed cluster
    of stage ``s``. ``act_bytes`` is a pipeline send per sending rank, ``gather_s`` the
    receiver's TP all-gather of a scatter/gathered send (0 when none), ``blocking`` whether a
    send holds the sending stage's compute stream."""

    geo: RankGeometry
    faults: LinkFactors
    by_v: dict[int, ChunkGraph]
    healthy_pass: dict[tuple[int, str], PassTiming]
    batches: dict[int, list[int]]
    classes: list[list[int]]
    units: list[list[ClusterUnit]]
    act_bytes: float
    gather_s: float
    blocking: bool


def perturbed_clusters(geo: RankGeometry, faults: LinkFactors, speed_t: np.ndarray,
                       gtype_t: np.ndarray, by_v: Mapping[int, ChunkGraph]
                       ) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Which clusters differ from a healthy one: ``cluster_id[stage, replica]`` (-1:
    healthy, else an index into the stage's distinct perturbed clusters) and, per stage, a
    replica holding each distinct one."""
    pp = geo.pp
    vpp = len(by_v) // pp
    member_axes = tuple(range(1, 1 + len(geo.c_shape)))
    cluster_id = np.full((pp, geo.n_rep), -1, dtype=np.int64)
    batches: dict[int, list[int]] = {}
    for s in range(pp):
        keys: set[tuple[str, str]] = set()
        for c in range(vpp):
            ch = by_v[c * pp + s]
            for op in (*ch.forward, *ch.backward):
                if op.kind == "comm":
                    g = op.group or "dp"
                    keys.add((g, faults.dec(op.comm or "none", g, op.size)))
        chunk_keys = sorted(keys)
        fids = {k: faults.chunk(s, *k) for k in chunk_keys}
        bad = (speed_t[s] != 1.0).any(axis=member_axes) | (gtype_t[s] != 0).any(
            axis=member_axes)
        for arr in fids.values():
            bad = bad | (arr != 0).reshape(geo.n_rep, -1).any(axis=1)
        seen: dict[tuple[bytes, ...], int] = {}
        reps: list[int] = []
        for r in (int(x) for x in np.flatnonzero(bad)):
            key = (speed_t[s, r].tobytes(), gtype_t[s, r].tobytes(),
                   *(fids[k][r].tobytes() for k in chunk_keys))
            if key not in seen:
                seen[key] = len(reps)
                reps.append(r)
            cluster_id[s, r] = seen[key]
        batches[s] = reps
    return cluster_id, batches



def price_clusters(graph: TrainingGraph, computes: Sequence[ComputeModel],
                   network: NetworkModel, perturbations: Perturbations,
                   contention: bool) -> Clusters:
    """Price every cluster of the job: healthy ones once, perturbed ones member by member,
    grouped into replica classes (``computes[1]`` prices the ranks of
    ``perturbations.mix_ranks``)."""
    run = graph.run
    p = run.parallel
    pp = p.pp
    geo = RankGeometry(graph, network)
    world = geo.world
    faults = LinkFactors(geo, network, perturbations.link_faults)
    compute = computes[0]

    speed = np.ones(world)
    gtype = np.zeros(world, dtype=np.int64)
    for rank, frac in perturbations.stragglers:
        speed[rank] = frac
    if perturbations.mix_ranks is not None:
        lo, hi = perturbations.mix_ranks
        gtype[lo:hi] = 1
    speed_t = speed[geo.table]
    gtype_t = gtype[geo.table]

    by_v = {c.virtual_stage: c for c in graph.chunks}
    healthy_pass, stretch = _healthy_passes(graph, compute, network, faults, by_v, contention)
    cluster_id, batches = perturbed_clusters(geo, faults, speed_t, gtype_t, by_v)
    n_types = 2 if perturbations.mix_ranks is not None else 1
    models = list(computes[:n_types])
    perturbed = _perturbed_passes(geo, faults, batches, models, speed_t, gtype_t, by_v,
                                  healthy_pass, stretch)
    opt_op = [optimizer_op(b) for b in step_shape(graph, network).opt_bytes]

    # per sending rank; a scatter/gathered send ends with a TP all-gather at the receiver
    # (priced on the healthy network: link faults are modelled on the pipeline links)
    act_bytes, gathered = pipeline_message(run)
    gather_s = network.collective("all_gather", "tp", gathered).time_s if gathered else 0.0
    # a blocking send holds the sending stage's compute stream (overlap_p2p off)
    blocking = not p.overlap_p2p

    # replica classes
    rep_keys: dict[tuple[int, ...], list[int]] = defaultdict(list)
    # interleaved schedules also send from the last stage to stage 0 (forward) and back
    wrap = p.vpp > 1 and pp > 1
    fwd_ids = [faults.p2p(s, (s + 1) % pp) for s in range(pp if wrap else pp - 1)]
    bwd_ids = [faults.p2p(s, (s - 1) % pp) for s in range(0 if wrap else 1, pp)]
    for rep in range(geo.n_rep):
        rkey = (*(int(cluster_id[s, rep]) for s in range(pp)),
                *(int(a[rep]) for a in fwd_ids), *(int(a[rep]) for a in bwd_ids))
        rep_keys[rkey].append(rep)
    classes = list(rep_keys.values())
    units: list[list[ClusterUnit]] = []
    for reps in classes:
        rep = reps[0]
        row: list[ClusterUnit] = []
        for s in range(pp):
            cid = int(cluster_id[s, rep])
            if cid < 0:
                passes = healthy_pass
                t_opt = compute.time(opt_op[s])
                member_opt: np.ndarray | float = t_opt
            else:
                passes = perturbed[s][cid]
                base = np.array([m.time(opt_op[s]) for m in models])
                mo = (base[gtype_t[s, rep]] / speed_t[s, rep]).reshape(-1)
                member_opt = mo
                t_opt = float(mo.max())
            fpid = int(fwd_ids[s][rep]) if s < len(fwd_ids) else 0
            bpid = int(bwd_ids[s if wrap else s - 1][rep]) if wrap or s > 0 else 0
            fwd = faults.cost("p2p", "pp", act_bytes, fpid) if pp > 1 else 0.0
            bwd = faults.cost("p2p", "pp", act_bytes, bpid) if pp > 1 else 0.0
            row.append(ClusterUnit(passes, member_opt, t_opt, fwd, bwd, fpid, bpid))
        units.append(row)
    return Clusters(geo, faults, by_v, healthy_pass, batches, classes, units, act_bytes,
                    gather_s, blocking)


def _healthy_passes(graph: TrainingGraph, compute: ComputeModel, network: NetworkModel,
                    faults: LinkFactors, by_v: Mapping[int, ChunkGraph], contention: bool
                    ) -> tuple[dict[tuple[int, str], PassTiming],
                               dict[tuple[int, str], dict[int, float]]]:
    """Chunk passes of healthy clusters: the symmetric engine's, or contended ones (with the
    stretch of each contended collective, by op index)."""
    sym = time_chunks(graph, compute, network)
    split = graph.run.parallel.pipeline_schedule in SPLIT_BACKWARD
    healthy_pass: dict[tuple[int, str], PassTiming] = {}
    stretch: dict[tuple[int, str], dict[int, float]] = {}
    for (v, ph), t in sym.items():
        if contention:
            ops = pass_ops(by_v[v].forward, by_v[v].backward, ph, split)
            healthy_pass[(v, ph)], stretch[(v, ph)] = fluid_pass(ops, compute, faults)
        else:
            healthy_pass[(v, ph)] = from_chunk_timing(t)
    return healthy_pass, stretch


def _perturbed_passes(geo: RankGeometry, faults: LinkFactors, batches: Mapping[int, list[int]],
                      models: Sequence[ComputeModel], speed_t: np.ndarray, gtype_t: np.ndarray,
                      by_v: Mapping[int, ChunkGraph],
                      healthy_pass: Mapping[tuple[int, str], PassTiming],
                      stretch: Mapping[tuple[int, str], Mapping[int, float]]
                      ) -> dict[int, list[dict[tuple[int, str], PassTiming]]]:
    """Member-by-member chunk passes of the perturbed clusters: per stage, one dict of passes
    per distinct perturbed cluster."""
    pp = geo.pp
    vpp = len(by_v) // pp
    split = any(ph == "W" for _, ph in healthy_pass)
    perturbed: dict[int, list[dict[tuple[int, str], PassTiming]]] = {}
    for s, reps in batches.items():
        if not reps:
            continue
        idx = np.asarray(reps)
        out: list[dict[tuple[int, str], PassTiming]] = [{} for _ in reps]
        for c in range(vpp):
            v = c * pp + s
            for ph in ("F", "B", "W") if split else ("F", "B"):
                ops = pass_ops(by_v[v].forward, by_v[v].backward, ph, split)
                prices = BatchPrices(models, faults, s, idx, stretch.get((v, ph), {}))
                results = batch_pass(ops, speed_t[s][idx], gtype_t[s][idx], prices.compute,
                                     prices.comm, geo.group_axes, models[0].host_time)
                hp = healthy_pass[(v, ph)]
                for j, pr in enumerate(results):
                    out[j][(v, ph)] = PassTiming(pr.compute_time, pr.breakdown, pr.layer_done,
                                                 pr.tail, pr.busy, hp.background)
        perturbed[s] = out
    return perturbed
