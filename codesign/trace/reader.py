"""Read Chakra ET files and summarize them (``codesign inspect TRACE``).

``TRACE`` is one ``.et`` file or a prefix: ``PREFIX`` reads every ``PREFIX.<rank>.et`` and, when
present, the communicator groups in ``PREFIX.groups.json``. Every record is decoded with the
standard protobuf runtime against ``et_def.proto`` (:mod:`codesign.trace.schema`); nothing here
relies on how codesign wrote the file.

The summary counts nodes by type, adds up compute FLOPs (``num_ops``), bytes touched
(``tensor_size``) and replay durations, bytes per collective kind (``comm_size``), pipeline
sends and receives, and lists the groups. It also checks the trace: every data dependency names
an earlier node, every collective's ``pg_name`` is a group listing the rank, and (for a whole
prefix) every send has a receive with the same source, destination, tag and size.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codesign.errors import SpecError
from codesign.runtime import progress_bar
from codesign.trace.schema import enum_values, message_class, split_records
from codesign.units import US

_RANK = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")
_MAX_PROBLEMS = 20


@dataclass
class TraceSummary:
    """Totals over the ranks read. FLOPs and bytes are sums over ranks; times in seconds."""

    ranks: int = 0
    nodes: dict[str, int] = field(default_factory=dict)  # NodeType name -> count
    flops: int = 0
    compute_bytes: int = 0
    compute_time_s: float = 0.0  # sum of COMP durations over ranks
    max_rank_compute_time_s: float = 0.0
    collectives: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> count, bytes
    p2p: dict[str, dict[str, int]] = field(default_factory=dict)  # send/recv -> count, bytes
    groups: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "nodes": dict(self.nodes), "flops": self.flops,
                "compute_bytes": self.compute_bytes, "compute_time_s": self.compute_time_s,
                "max_rank_compute_time_s": self.max_rank_compute_time_s,
                "collectives": {k: dict(v) for k, v in self.collectives.items()},
                "p2p": {k: dict(v) for k, v in self.p2p.items()}, "groups": self.groups,
                "metadata": dict(self.metadata), "problems": list(self.problems)}


def trace_files(trace: str | Path) -> tuple[list[tuple[int | None, Path]], Path | None]:
    """The ``(rank, path)`` pairs a TRACE argument names, and its groups file (or None).

    SpecError (one line) when nothing matches.
    """
    path = Path(trace)
    if path.is_file():
        m = _RANK.match(path.name)
        rank = int(m["rank"]) if m else None
        groups = path.with_name(f"{m['prefix']}.groups.json") if m else None
        return [(rank, path)], groups if groups is not None and groups.is_file() else None
    parent = path.parent if str(path.parent) else Path(".")
    found: list[tuple[int | None, Path]] = []
    if parent.is_dir():
        for p in parent.iterdir():
            m = _RANK.match(p.name)
            if m and m["prefix"] == path.name:
                found.append((int(m["rank"]), p))
    if not found:
        raise SpecError(f"trace: no file {path} and no {path}.<rank>.et files")
    found.sort(key=lambda rp: rp[0] if rp[0] is not None else -1)
    groups = path.with_name(f"{path.name}.groups.json")
    return found, groups if groups.is_file() else None


def read_trace(path: Path) -> tuple[Any, list[Any]]:
    """``(GlobalMetadata, [Node, ...])`` of one ET file; SpecError if it does not decode."""
    data = path.read_bytes()
    try:
        records = list(split_records(data))
        if not records:
            raise ValueError("empty file")
        meta = message_class("GlobalMetadata").FromString(bytes(records[0]))
        node_cls = message_class("Node")
        nodes = [node_cls.FromString(bytes(r)) for r in records[1:]]
    except Exception as exc:  # protobuf's DecodeError or a framing error
        raise SpecError(f"trace: {path} is not a Chakra ET file ({exc})") from None
    return meta, nodes


def _attrs(msg: Any) -> dict[str, Any]:
    return {a.name: a for a in msg.attr}


def _value(attr: Any) -> Any:
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    v = getattr(attr, kind)
    return list(v.values) if kind.endswith("_list") else v


def summarize(trace: str | Path, progress: bool = False) -> TraceSummary:
    """Read TRACE (a file or a prefix) and summarize it (see the module docstring);
    ``progress``: a progress bar over the rank files on a terminal."""
    files, groups_path = trace_files(trace)
    bar = progress_bar(len(files), "reading", "rank", progress)
    node_names = {v: k for k, v in enum_values("NodeType").items()}
    comm_names = {v: k.lower() for k, v in enum_values("CollectiveCommType").items()}
    nt = enum_values("NodeType")
    comp, coll_t = nt["COMP_NODE"], nt["COMM_COLL_NODE"]
    send_t, recv_t = nt["COMM_SEND_NODE"], nt["COMM_RECV_NODE"]
    out = TraceSummary()
    nodes: Counter[int] = Counter()
    coll: dict[str, Counter[str]] = {}
    p2p: dict[str, Counter[str]] = {"send": Counter(), "recv": Counter()}
    used: dict[str, set[int]] = {}  # pg_name -> ranks naming it
    sends: Counter[tuple[int, int, int, int]] = Counter()
    recvs: Counter[tuple[int, int, int, int]] = Counter()
    problems: list[str] = []
    for rank, path in files:
        bar(1)
        meta, trace_nodes = read_trace(path)
        if not out.metadata:
            out.metadata = {"version": meta.version,
                            **{a.name: _value(a) for a in meta.attr if a.name != "codesign_spec"}}
        out.ranks += 1
        seen: set[int] = set()
        rank_time_us = 0
        for n in trace_nodes:
            t = n.type
            nodes[t] += 1
            deps = n.data_deps
            if deps and not seen.issuperset(deps):
                bad = next(d for d in deps if d not in seen)
                problems.append(f"{path.name}: node {n.id} depends on {bad}, not an earlier node")
            seen.add(n.id)
            if t == comp:
                rank_time_us += n.duration_micros
                for a in n.attr:
                    name = a.name
                    if name == "num_ops":
                        out.flops += a.int64_val or int(_value(a) or 0)
                    elif name == "tensor_size":
                        out.compute_bytes += a.uint64_val or int(_value(a) or 0)
                continue
            a = _attrs(n)
            if t == coll_t:
                name = (comm_names.get(int(_value(a["comm_type"])), "?") if "comm_type" in a
                        else "?")
                c = coll.setdefault(name, Counter())
                c["count"] += 1
                c["bytes"] += int(_value(a["comm_size"])) if "comm_size" in a else 0
                pg = str(_value(a["pg_name"])) if "pg_name" in a else ""
                used.setdefault(pg, set()).add(rank if rank is not None else -1)
            elif t in (send_t, recv_t):
                side = "send" if t == send_t else "recv"
                size = int(_value(a["comm_size"])) if "comm_size" in a else 0
                p2p[side]["count"] += 1
                p2p[side]["bytes"] += size
                # STAGE writes only the destination on sends and only the source on
                # receives: the missing side is this rank
                src = int(_value(a["comm_src"])) if "comm_src" in a else rank
                dst = int(_value(a["comm_dst"])) if "comm_dst" in a else rank
                tag = int(_value(a["comm_tag"])) if "comm_tag" in a else 0
                key = (-1 if src is None else src, -1 if dst is None else dst, tag, size)
                (sends if side == "send" else recvs)[key] += 1
                me = key[0] if side == "send" else key[1]
                if rank is not None and me != rank:
                    problems.append(f"{path.name}: {side} node {n.id} names rank {me}")
        rank_time = rank_time_us * US
        out.compute_time_s += rank_time
        out.max_rank_compute_time_s = max(out.max_rank_compute_time_s, rank_time)
    out.nodes = dict(sorted((node_names.get(k, str(k)), v) for k, v in nodes.items()))
    out.collectives = {k: dict(v) for k, v in sorted(coll.items())}
    out.p2p = {k: dict(v) for k, v in p2p.items() if v}
    out.groups = _groups(used, groups_path, problems)
    if len(files) > 1 and (sends or recvs):
        unmatched = sum(((sends - recvs) + (recvs - sends)).values())
        if unmatched:
            problems.append(f"{unmatched} sends/receives without a matching partner "
                            "(source, destination, tag, size)")
    if len(problems) > _MAX_PROBLEMS:
        problems = [*problems[:_MAX_PROBLEMS], f"... and {len(problems) - _MAX_PROBLEMS} more"]
    out.problems = problems
    return out


def _groups(used: dict[str, set[int]], groups_path: Path | None,
            problems: list[str]) -> dict[str, Any]:
    """Groups named by collectives, checked against the groups file when there is one."""
    info: dict[str, Any] = {"referenced": len(used), "file": None}
    if groups_path is None:
        return info
    try:
        table = json.loads(groups_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{groups_path.name}: unreadable ({exc})")
        return info
    sizes = Counter(len(v) for v in table.values())
    info.update(file=str(groups_path), count=len(table),
                sizes={str(k): v for k, v in sorted(sizes.items())})
    for pg, ranks in sorted(used.items()):
        if pg not in table:
            problems.append(f"pg_name {pg!r} is not in {groups_path.name}")
            continue
        members = set(table[pg])
        outside = sorted(r for r in ranks if r >= 0 and r not in members)
        if outside:
            problems.append(f"group {pg} does not list rank {outside[0]} that uses it")
    return info


def format_summary(s: TraceSummary) -> str:
    """Human-readable summary table."""
    lines = [f"ranks            {s.ranks}"]
    meta = s.metadata
    if meta:
        lines.append(f"schema           {meta.get('schema', '?')} (version {meta.get('version')})")
        if "codesign_version" in meta:
            lines.append(f"written by       codesign {meta['codesign_version']}")
    lines.append("nodes by type")
    for kind, count in s.nodes.items():
        lines.append(f"  {kind:18s} {count:>14,}")
    lines.append(f"compute FLOPs    {s.flops:.6e}")
    lines.append(f"compute bytes    {s.compute_bytes:.6e}")
    lines.append(f"compute time     {s.max_rank_compute_time_s:.6f} s (busiest rank)")
    if s.collectives:
        lines.append("collectives          count          bytes")
        for kind, c in s.collectives.items():
            lines.append(f"  {kind:16s} {c['count']:>10,} {c['bytes']:>14.6e}")
    for side, c in s.p2p.items():
        lines.append(f"  {side:16s} {c['count']:>10,} {c['bytes']:>14.6e}")
    g = s.groups
    line = f"groups           {g.get('referenced', 0)} named by collectives"
    if g.get("file"):
        sizes = ", ".join(f"{n} of {k}" for k, n in g["sizes"].items())
        line += f"; {g['count']} in {Path(g['file']).name} ({sizes} ranks)"
    lines.append(line)
    if s.problems:
        lines.append(f"problems ({len(s.problems)})")
        lines += [f"  {p}" for p in s.problems]
    else:
        lines.append("problems         none")
    return "\n".join(lines)
