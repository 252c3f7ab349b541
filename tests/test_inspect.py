"""``codesign inspect`` reads any Chakra ET: hand-built traces in the style of each producer
(STAGE, Chakra's PyTorch converter, codesign), written here with classes built from
``protoc``'s own descriptor of the schema (tests/data/chakra_et_def.desc), and codesign's
exports against the reader before the digest (benchmarks/inspect_reference.py, frozen).

Expected totals are the sums of the values written, computed here as the files are built.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_model
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from codesign.api import build_run
from codesign.cli import main
from codesign.errors import SpecError
from codesign.trace.chakra import export_chakra
from codesign.trace.reader import _Templates, summarize

DESC = Path(__file__).parent / "data" / "chakra_et_def.desc"
ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location(
    "inspect_reference", ROOT / "benchmarks" / "inspect_reference.py")
assert _SPEC is not None and _SPEC.loader is not None
reference = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference)

# NodeType and CollectiveCommType numbers (Chakra's et_def.proto)
META, MEM_LOAD, COMP, SEND, RECV, COLL = 1, 2, 4, 5, 6, 7
ALL_REDUCE, ALL_GATHER, ALL_TO_ALL = 0, 2, 6


def _classes() -> dict[str, Any]:
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(DESC.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fds.file[0].SerializeToString())
    return {m: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{m}"))
            for m in ("Node", "GlobalMetadata", "AttributeProto", "BoolList", "IOInfo")}


PB = _classes()


def attr(name: str, **value: Any) -> Any:
    return PB["AttributeProto"](name=name, **value)


def frame(msg: Any) -> bytes:
    """``[varint length][message]`` (protobuf's own varint writer, via a length field)."""
    payload = msg.SerializeToString()
    size = bytearray()
    n = len(payload)
    while n > 0x7F:
        size.append((n & 0x7F) | 0x80)
        n >>= 7
    size.append(n)
    return bytes(size) + payload


def write(path: Path, meta: Any, nodes: list[Any]) -> None:
    path.write_bytes(frame(meta) + b"".join(frame(n) for n in nodes))


# --- STAGE --------------------------------------------------------------------------------


def stage_rank(rank: int, world: int, flops: int | None = None) -> tuple[Any, list[Any]]:
    """A rank as STAGE's Chakra 0.0.4 backend writes it: metadata with only ``schema``; no
    durations; uint64 ``num_ops``/``tensor_size``/``comm_size``; collectives without
    ``pg_name``; sends with only ``comm_dst``, receives with only ``comm_src`` (uint32)."""
    node = PB["Node"]
    meta = PB["GlobalMetadata"](attr=[attr("schema", string_val="symbolic_tensor_network")])
    nodes = [
        node(id=0, name="load", type=MEM_LOAD, attr=[attr("tensor_size", uint64_val=64)]),
        node(id=1, name="mm", type=COMP, data_deps=[0], attr=[
            attr("num_ops", uint64_val=flops or 1000 * (rank + 1)),
            attr("tensor_size", uint64_val=10)]),
        node(id=2, name="ar", type=COLL, data_deps=[1], attr=[
            attr("comm_size", uint64_val=4096), attr("comm_type", int64_val=ALL_REDUCE),
            attr("involved_dim", bool_list=PB["BoolList"](values=[True] * 3))]),
        node(id=3, name="send", type=SEND, ctrl_deps=[2], attr=[
            attr("comm_size", uint64_val=512), attr("comm_tag", uint32_val=9),
            attr("comm_dst", uint32_val=(rank + 1) % world)]),
        node(id=4, name="recv", type=RECV, data_deps=[2], attr=[
            attr("comm_size", uint64_val=512), attr("comm_tag", uint32_val=9),
            attr("comm_src", uint32_val=(rank - 1) % world)]),
    ]
    return meta, nodes


def test_stage_style_ring_reads_with_every_send_matched(tmp_path: Path) -> None:
    world = 4
    for r in range(world):
        write(tmp_path / f"stg.{r}.et", *stage_rank(r, world))
    s = summarize(tmp_path / "stg")
    assert s.ranks == world and s.problems == []
    assert s.nodes == {"COMM_COLL_NODE": 4, "COMM_RECV_NODE": 4, "COMM_SEND_NODE": 4,
                       "COMP_NODE": 4, "MEM_LOAD_NODE": 4}
    assert s.flops == 1000 * (1 + 2 + 3 + 4) and s.compute_bytes == 10 * world
    assert s.compute_time_s == 0.0
    assert s.collectives == {"all_reduce": {"count": 4, "bytes": 4 * 4096}}
    assert s.p2p == {"send": {"count": 4, "bytes": 2048}, "recv": {"count": 4, "bytes": 2048}}
    assert s.metadata == {"version": "", "schema": "symbolic_tensor_network"}
    assert s.groups["referenced"] == 0  # no pg_name: the collectives span every rank


def test_stage_style_send_to_the_wrong_rank_is_reported(tmp_path: Path) -> None:
    """Ranks 1-3 differ from rank 0 only in their peer bytes (they share its digest); rank 3
    sends to rank 1 instead of 0: its send and rank 0's receive lose their partners."""
    world = 4
    files = []
    for r in range(world):
        meta, nodes = stage_rank(r, world, flops=500)
        if r == 3:
            nodes[3].attr[2].uint32_val = 1
        write(tmp_path / f"stg.{r}.et", meta, nodes)
        files.append((tmp_path / f"stg.{r}.et").read_bytes())
    s = summarize(tmp_path / "stg")
    assert s.problems == ["2 sends/receives without a matching partner "
                          "(source, destination, tag, size)"]
    assert s.flops == 4 * 500
    t = _Templates()
    for r, data in enumerate(files):
        t.read(data, str(r))
    assert t.decoded == 1


def test_a_malformed_peer_byte_is_decoded_on_its_own(tmp_path: Path) -> None:
    """Rank 1's comm_dst byte given a continuation bit: the same length as rank 0's file and
    equal outside that byte, but no varint of that width there, so the file is decoded by
    itself, and its varint then runs past its attribute."""
    for r in range(2):
        write(tmp_path / f"stg.{r}.et", *stage_rank(r, 2, flops=500))
    data = bytearray((tmp_path / "stg.1.et").read_bytes())
    at = data.index(b"comm_dst") + len(b"comm_dst") + 1  # name, then the uint32_val tag
    assert data[at] == 0  # rank 1 sends to rank 0
    data[at] = 0x81
    (tmp_path / "stg.1.et").write_bytes(bytes(data))
    with pytest.raises(SpecError, match=r"stg\.1\.et is not a Chakra ET file"):
        summarize(tmp_path / "stg")


def _group_rank(pg: bytes) -> bytes:
    node = PB["Node"](id=0, name="ar", type=COLL, attr=[
        attr("comm_type", int64_val=ALL_TO_ALL), attr("comm_size", int64_val=64),
        attr("pg_name", string_val="@" * len(pg))])
    data = frame(PB["GlobalMetadata"](version="0.0.4")) + frame(node)
    return data.replace(b"@" * len(pg), pg)


def test_each_rank_s_group_is_read_from_its_own_file(tmp_path: Path) -> None:
    """Four ranks equal but for their pg_name bytes share one digest; rank 3 names group 11,
    which does not list it."""
    for r, pg in enumerate((b"10", b"10", b"11", b"11")):
        (tmp_path / f"g.{r}.et").write_bytes(_group_rank(pg))
    (tmp_path / "g.groups.json").write_text(json.dumps({"10": [0, 1], "11": [2]}))
    s = summarize(tmp_path / "g")
    assert s.groups["referenced"] == 2
    assert s.problems == ["group 11 does not list rank 3 that uses it"]
    assert s.collectives == {"all_to_all": {"count": 4, "bytes": 256}}
    (tmp_path / "g.3.et").write_bytes(_group_rank(b"1\xff"))  # not UTF-8
    with pytest.raises(SpecError, match=r"g\.3\.et is not a Chakra ET file"):
        summarize(tmp_path / "g")


# --- Chakra's PyTorch converter -----------------------------------------------------------


def pytorch_rank(rank: int) -> tuple[Any, list[Any], dict[str, int]]:
    """A rank as Chakra's PyTorch converter writes it: metadata without ``version``; nodes
    sorted by id whose data dependencies may name later ids; compute nodes with the
    profiler's attributes (``rf_id``, ``op_schema``, ``is_cpu_op``, ``stream``, ...) and no
    ``num_ops``; inputs/outputs; collectives with ``pg_name``; sends and receives with only
    ``comm_size`` and ``pg_name``. Returns the expected durations and sizes too."""
    node, io = PB["Node"], PB["IOInfo"]
    meta = PB["GlobalMetadata"](attr=[
        attr("schema", string_val="1.0.2-chakra.0.0.4"), attr("pid", uint64_val=4242),
        attr("time", string_val="2024-05-01 10:00:00"), attr("start_ts", uint64_val=1),
        attr("finish_ts", uint64_val=99)])

    def prof(i: int, cpu: bool) -> list[Any]:
        return [attr("rf_id", int64_val=i), attr("fw_parent", int64_val=0),
                attr("seq_id", int64_val=-1), attr("scope", int64_val=0),
                attr("tid", int64_val=1), attr("fw_tid", int64_val=0),
                attr("op_schema", string_val="aten::mm(Tensor self, Tensor mat2) -> Tensor"),
                attr("is_cpu_op", bool_val=cpu), attr("stream", int64_val=7)]

    ios = dict(inputs=io(values="[[1, 2]]", shapes="[[4, 4]]", types="['Tensor(float)']"),
               outputs=io(values="[]", shapes="[]", types="[]"))
    nodes = [
        node(id=2, name="[pytorch|profiler|execution_trace|thread]", type=META,
             attr=prof(2, True)),
        node(id=5, name="aten::mm", type=COMP, ctrl_deps=[2], data_deps=[2],
             duration_micros=120 + rank, attr=prof(5, True), **ios),
        node(id=6, name="ampere_sgemm", type=COMP, ctrl_deps=[5], data_deps=[5, 9],
             duration_micros=300, attr=prof(6, False), **ios),
        node(id=7, name="ncclDevKernel_AllGather_RING_LL", type=COLL, ctrl_deps=[5],
             data_deps=[6], duration_micros=40, attr=[
                 *prof(7, False), attr("comm_type", int64_val=ALL_GATHER),
                 attr("comm_size", int64_val=8192), attr("pg_name", string_val="0")]),
        node(id=8, name="ncclDevKernel_SendRecv", type=SEND if rank == 0 else RECV,
             ctrl_deps=[5], data_deps=[7], duration_micros=10, attr=[
                 *prof(8, False), attr("comm_size", int64_val=1024),
                 attr("pg_name", string_val="3")]),
        node(id=9, name="aten::add", type=COMP, ctrl_deps=[2], data_deps=[2],
             duration_micros=5, attr=prof(9, True)),
    ]
    return meta, nodes, {"time_us": 120 + rank + 300 + 5}


def test_pytorch_converter_style_reads_without_problems(tmp_path: Path) -> None:
    want_us = []
    for r in range(2):
        meta, nodes, want = pytorch_rank(r)
        write(tmp_path / f"pt.{r}.et", meta, nodes)
        want_us.append(want["time_us"])
    (tmp_path / "pt.groups.json").write_text(json.dumps({"3": [0, 1]}))
    s = summarize(tmp_path / "pt")
    assert s.problems == []  # forward data dependency, no peers written, pg_name "0"
    assert s.nodes == {"COMM_COLL_NODE": 2, "COMM_RECV_NODE": 1, "COMM_SEND_NODE": 1,
                       "COMP_NODE": 6, "METADATA_NODE": 2}
    assert s.flops == 0 and s.compute_bytes == 0
    assert s.compute_time_s == pytest.approx(sum(want_us) * 1e-6, rel=1e-12)
    assert s.max_rank_compute_time_s == pytest.approx(max(want_us) * 1e-6, rel=1e-12)
    assert s.collectives == {"all_gather": {"count": 2, "bytes": 2 * 8192}}
    assert s.p2p == {"send": {"count": 1, "bytes": 1024}, "recv": {"count": 1, "bytes": 1024}}
    assert s.metadata["version"] == "" and s.metadata["pid"] == 4242
    assert s.groups["referenced"] == 0 and s.groups["count"] == 1


def test_a_dependency_on_no_node_of_the_file_is_reported(tmp_path: Path) -> None:
    meta, nodes, _ = pytorch_rank(0)
    nodes[2].data_deps.append(77)
    write(tmp_path / "pt.0.et", meta, nodes)
    s = summarize(tmp_path / "pt.0.et")
    assert s.problems == ["pt.0.et: node 6 depends on 77, not a node of the file"]


# --- codesign's exports -------------------------------------------------------------------

PLANS = {
    "tp_pp_sp": dict(model=tiny_model(), num_gpus=16, tp=2, pp=2, micro_batch_size=1,
                     global_batch_size=16, sequence_parallel=True),
    "zero3_vpp": dict(model=tiny_model(), num_gpus=16, tp=2, cp=2, pp=2, vpp=2,
                      micro_batch_size=1, global_batch_size=8, zero_stage=3),
}


@pytest.fixture(scope="module", params=list(PLANS))
def codesign_export(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp(request.param) / "trace"
    export_chakra(build_run(gpu="h100", topology="dgx-h100", **PLANS[request.param]), prefix)
    return prefix


def test_codesign_exports_read_as_the_old_reader_read_them(codesign_export: Path) -> None:
    new = summarize(codesign_export).to_dict()
    assert new == reference.summarize(codesign_export).to_dict()
    assert new == summarize(codesign_export, share=False).to_dict()
    assert new["problems"] == [] and new["ranks"] == 16


def test_ranks_of_one_stage_share_one_digest(codesign_export: Path) -> None:
    """16 ranks, 2 pipeline stages: each stage's ranks differ only in pg_name and peer bytes
    (ranks < 128, one varint byte), so two files are decoded and 14 take a digest."""
    t = _Templates()
    for r in range(16):
        t.read(Path(f"{codesign_export}.{r}.et").read_bytes(), str(r))
    assert t.decoded == 2


def test_a_change_outside_the_holes_is_decoded_on_its_own(codesign_export: Path,
                                                          tmp_path: Path) -> None:
    """Rank 1's file with one compute duration changed (the same length, so it is matched
    against rank 0's digest and must not take it)."""
    files = {}
    for r in range(16):
        files[r] = Path(f"{codesign_export}.{r}.et").read_bytes()
    for r, data in files.items():
        (tmp_path / f"t.{r}.et").write_bytes(data)
    before = summarize(tmp_path / "t")
    meta, nodes = _decode(files[1])
    comp = next(n for n in nodes if n.type == COMP and 0 < n.duration_micros < 127)
    comp.duration_micros ^= 1  # same varint width: same length
    write(tmp_path / "t.1.et", meta, nodes)
    assert len((tmp_path / "t.1.et").read_bytes()) == len(files[1])
    after = summarize(tmp_path / "t")
    delta = (1 if comp.duration_micros & 1 else -1) * 1e-6
    assert after.compute_time_s == pytest.approx(before.compute_time_s + delta, abs=1e-12)
    assert after.to_dict() == reference.summarize(tmp_path / "t").to_dict()


def _record_ends(data: bytes) -> set[int]:
    """Offsets where a length-delimited record of ``data`` ends."""
    from google.protobuf.internal.decoder import _DecodeVarint32

    pos, ends = 0, set()
    while pos < len(data):
        size, pos = _DecodeVarint32(data, pos)
        pos += size
        ends.add(pos)
    return ends


def _decode(data: bytes) -> tuple[Any, list[Any]]:
    from google.protobuf.internal.decoder import _DecodeVarint32

    pos, records = 0, []
    while pos < len(data):
        size, pos = _DecodeVarint32(data, pos)
        records.append(data[pos:pos + size])
        pos += size
    return (PB["GlobalMetadata"].FromString(records[0]),
            [PB["Node"].FromString(r) for r in records[1:]])


# --- bad input ----------------------------------------------------------------------------


def test_truncated_and_corrupt_files_are_one_line_errors(codesign_export: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    data = Path(f"{codesign_export}.0.et").read_bytes()
    for r in range(2):
        (tmp_path / f"t.{r}.et").write_bytes(data)
    # cut inside a record (half way may fall on a record boundary: a shorter valid file)
    cut = len(data) // 2
    while cut in _record_ends(data):
        cut -= 1
    (tmp_path / "t.1.et").write_bytes(data[:cut])
    with pytest.raises(SpecError, match=r"t\.1\.et is not a Chakra ET file"):
        summarize(tmp_path / "t")
    # the same length as rank 0's file, garbage where rank 0's has a record length
    bad = bytearray(data)
    bad[0] = 0xFF
    (tmp_path / "t.1.et").write_bytes(bytes(bad))
    assert main(["inspect", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "t.1.et is not a Chakra ET file" in err


def test_a_malformed_groups_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    for r in range(2):
        write(tmp_path / f"stg.{r}.et", *stage_rank(r, 2))
    (tmp_path / "stg.groups.json").write_text("[1, 2]")
    s = summarize(tmp_path / "stg")
    assert len(s.problems) == 1 and "stg.groups.json: unreadable" in s.problems[0]
