"""Ranks and communicator groups of a Chakra export.

Every rank's coordinates in the placement layout, the pipeline peers of a stage's ranks, and
the ids of the communicator groups the trace's collectives name (``pg_name`` and ASTRA-sim's
``--comm-group-configuration`` file). Group ids are numbered from 1, kind by kind, and
zero-padded to one width, so that a rank's ids can be patched into a shared serialized stage.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from codesign.groups import GROUP_NAMES, group_dims
from codesign.network.model import NetworkModel
from codesign.trace.astra_config import network_dims, torus_rings

#: order in which group kinds get their ids: the group table's
GROUP_ORDER = GROUP_NAMES


class Ranks:
    """Rank coordinates of a layout and the ids of the communicator groups in use."""

    def __init__(self, network: NetworkModel) -> None:
        layout = network.layout
        self.network = network
        self.layout = layout
        self.world = layout.world
        ranks = np.arange(self.world, dtype=np.int64)
        self.coord = {d: (ranks // layout.stride(d)) % layout.size(d) for d in layout.order}
        self.keys: dict[tuple[str, ...], str] = {}  # group dims -> first group name using it
        self.base: dict[tuple[str, ...], int] = {}
        self.index: dict[tuple[str, ...], np.ndarray] = {}
        self.width = 1
        self.num_groups = 0

    def key(self, group: str) -> tuple[str, ...]:
        """The layout dims (size > 1) a group varies over: equal keys = the same groups."""
        dims = group_dims(group)
        return tuple(d for d in self.layout.order if d in dims and self.layout.size(d) > 1)

    def use(self, group: str) -> tuple[str, ...]:
        k = self.key(group)
        if not k:
            raise ValueError(f"collective on a group of one rank ({group})")
        self.keys.setdefault(k, group)
        return k

    def assign_ids(self) -> None:
        """Number every group of every key in use, from 1, kind by kind."""
        rank_of = {g: i for i, g in enumerate(GROUP_ORDER)}
        keys = sorted(self.keys, key=lambda k: (rank_of.get(self.keys[k], 99), k))
        total = 0
        counts = {}
        for k in keys:
            idx = np.zeros(self.world, dtype=np.int64)
            mult = 1
            for d in self.layout.order:
                if d not in k:
                    idx += self.coord[d] * mult
                    mult *= self.layout.size(d)
            self.index[k] = idx
            counts[k] = mult
            total += mult
        # ids 1..total, zero-padded to one width so a rank's bytes can be patched in place;
        # ASTRA-sim reads them with std::stoi (group ids must be > 0), so "0042" is group 42
        self.width = len(str(total))
        self.num_groups = total
        start = 1
        for k in keys:
            self.base[k] = start
            start += counts[k]

    def label(self, gid: int) -> bytes:
        """A group id as written in ``pg_name`` and the groups file."""
        return b"%0*d" % (self.width, gid)

    def group_id(self, k: tuple[str, ...]) -> np.ndarray:
        """Group id of every rank for key ``k``."""
        return self.base[k] + self.index[k]

    def groups(self) -> Iterator[tuple[int, np.ndarray]]:
        """(group id, member ranks ascending) for every group in use."""
        for k in sorted(self.base, key=self.base.__getitem__):
            idx = self.index[k]
            size = int(np.prod([self.layout.size(d) for d in k]))
            members = np.argsort(idx, kind="stable").reshape(-1, size)
            for j, row in enumerate(members):
                yield self.base[k] + j, row

    def stage_ranks(self, stage: int) -> np.ndarray:
        return np.nonzero(self.coord["pp"] == stage)[0]

    def peer(self, ranks: np.ndarray, stage: int, step: int) -> np.ndarray:
        pp = self.layout.size("pp")
        return ranks + ((stage + step) % pp - stage) * self.layout.stride("pp")

    def group_size(self, group: str) -> int:
        """Ranks in each group of kind ``group``."""
        return self.network.group_size(group)

    def involved_dims(self, group: str) -> list[bool]:
        """Which dimensions of the exported network file a group's collectives use."""
        topo = self.network.topology
        place = self.network.placement(group)
        rings = torus_rings(topo, self.world)
        if rings:
            shape = self.network.torus_shape
            assert shape is not None
            spanned = set(self.network.geometry(group).axes)
            dims = [j in spanned for j, n in enumerate(shape) if n > 1]
            if network_dims(topo, self.world) > len(rings):
                return [*dims, place.num_domains > 1]
            return dims
        if network_dims(topo, self.world) == 1:
            return [True]
        return [place.ranks_per_domain > 1, place.num_domains > 1]
