"""Rank geometry of the per-rank engine: ranks arranged by pipeline stage, replica and cluster
member, and the group instances inside a cluster."""

from __future__ import annotations

from math import prod

import numpy as np

from codesign.network.flows import rank_grid
from codesign.network.model import NetworkModel
from codesign.network.placement import group_dims
from codesign.workload.training import TrainingGraph


class RankGeometry:
    """Ranks arranged as ``table[stage, replica, *member]`` (member axes: the cluster dims,
    outermost first)."""

    def __init__(self, graph: TrainingGraph, network: NetworkModel) -> None:
        layout = network.layout
        self.layout = layout
        self.pp = graph.run.parallel.pp
        grid, dims = rank_grid(layout)
        groups = {o.group or "dp" for c in graph.chunks for o in (*c.forward, *c.backward)
                  if o.kind == "comm"}
        cd = {d for g in groups for d in group_dims(g) if d != "pp" and layout.size(d) > 1}
        self.cdims = [d for d in dims if d in cd]
        odims = [d for d in dims if d not in cd and d != "pp"]
        axes = [dims.index("pp")] + [dims.index(d) for d in odims] + \
            [dims.index(d) for d in self.cdims]
        self.c_shape = tuple(layout.size(d) for d in self.cdims)
        self.members = prod(self.c_shape)
        self.world = layout.world
        self.n_rep = self.world // (self.pp * self.members)
        self.table = grid.transpose(axes).reshape(self.pp, self.n_rep, *self.c_shape)

    def group_axes(self, group: str) -> tuple[int, ...]:
        """Axes of a ``(batch, *member)`` array that ``group`` spans."""
        gd = set(group_dims(group))
        return tuple(1 + i for i, d in enumerate(self.cdims) if d in gd)

    def instances(self, stage: int, group: str) -> tuple[np.ndarray, tuple[int, ...]]:
        """Instances of chunk group ``group`` at ``stage``: ranks shaped (replica, instance,
        member of the instance), and the shape of a per-instance array (replica, *member with
        the group's axes of size 1)."""
        axes = self.group_axes(group)
        t = self.table[stage]
        keep = [a for a in range(1, t.ndim) if a not in axes]
        moved = t.transpose([0, *keep, *axes])
        gsize = prod(t.shape[a] for a in axes)
        red = tuple(1 if a in axes else t.shape[a] for a in range(t.ndim))
        return moved.reshape(self.n_rep, -1, gsize), red

