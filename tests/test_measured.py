"""Measured kernel tables: loading, interpolation, fallback to the models, provenance."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ideal_gpu, tiny_model

from codesign.errors import SpecError
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.measured import (
    CollectiveTable,
    GemmRow,
    GemmTable,
    MeasuredKernels,
    MemoryTable,
    read_attention_csv,
    read_collectives_csv,
    read_gemm_csv,
    read_kineto,
    read_memory_csv,
)
from codesign.network import NetworkModel, layout_for
from codesign.network.collectives import flat_collective
from codesign.specs.catalog import gpu_base_dir, load_gpu
from codesign.specs.gpu import GpuSpec, MeasuredTables
from codesign.specs.topology import FullFlatTopology, ScaleOutSpec, ScaleUpSpec, TwoTierTopology
from codesign.units import US

DATA = Path(__file__).parent / "data"
MEASURED = DATA / "measured"
GPU_YAML = MEASURED / "ideal-measured.yaml"


def fullflat(bw: float = 800.0, lat_us: float = 2.0) -> FullFlatTopology:
    return FullFlatTopology(name="ff", bandwidth_GBps=bw, latency_us=lat_us,
                            efficiency_max=1.0, efficiency_half_size_MB=0.0)


def two_tier(domain: int = 8) -> TwoTierTopology:
    return TwoTierTopology(
        name="test",
        scale_up=ScaleUpSpec(domain_size=domain, bandwidth_GBps=450.0, latency_us=3.0),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=400.0, latency_us=6.0, switch_tiers=2,
                               hop_latency_us=0.5),
    )


def gemm_op(m: float, n: float, k: float, dtype: str = "bf16") -> Op:
    return Op(name="g", kind="gemm", category="forward", layer=0, flops=2 * m * n * k,
              bytes=2 * (m * k + k * n + m * n), mnk=(m, n, k), precision=dtype)


def memory_op(nbytes: float) -> Op:
    return Op(name="mem", kind="memory", category="forward", layer=0, bytes=nbytes)


@dataclass(frozen=True)
class Op(Op):
    """A grouped GEMM: ``count`` kernels of shape ``mnk`` (flops and bytes are totals)."""

    count: float = 1.0


@pytest.fixture(scope="module")
def gpu() -> GpuSpec:
    return load_gpu(str(GPU_YAML))


@pytest.fixture(scope="module")
def measured(gpu: GpuSpec) -> ComputeModel:
    return ComputeModel.from_gpu(gpu, base_dir=gpu_base_dir(str(GPU_YAML)))


@pytest.fixture(scope="module")
def roofline(gpu: GpuSpec) -> ComputeModel:
    return ComputeModel(gpu)


def gemm_rows(dtype: str = "bf16") -> dict[tuple[float, float, float], float]:
    return {(r.m, r.n, r.k): r.time_us * US for r in read_gemm_csv(MEASURED / "gemm.csv")
            if r.dtype == dtype}


# --- spec and loading ------------------------------------------------------------------------


def test_spec_backward_compatible_and_paths_relative_to_yaml(gpu: GpuSpec) -> None:
    assert ideal_gpu().measured is None
    assert load_gpu("h100").measured is None
    assert ComputeModel.from_gpu(load_gpu("h100")).tables is None
    # the loader resolves table paths against the YAML's folder: the spec is self-contained
    assert gpu.measured is not None
    assert gpu.measured.gemm_csv == str((MEASURED / "gemm.csv").resolve())
    assert gpu_base_dir(str(GPU_YAML)) == MEASURED.resolve()
    hw = gpu_base_dir("h100")
    assert hw is not None and (hw / "h100-sxm.yaml").is_file()
    assert gpu_base_dir("no-such-gpu") is None


def test_measured_tables_need_a_file_and_a_source() -> None:
    with pytest.raises(SpecError, match="at least one"):
        MeasuredTables.parse({"source": "x"})
    with pytest.raises(SpecError, match="source"):
        MeasuredTables.parse({"gemm_csv": "g.csv"})
    with pytest.raises(SpecError, match="unknown field"):
        MeasuredTables.parse({"gemm_csv": "g.csv", "source": "x", "gemm": "y"})


def test_absolute_paths_and_missing_files(tmp_path: Path) -> None:
    spec = MeasuredTables(memory_csv=str(MEASURED / "memory.csv"), source="abs")
    tables = MeasuredKernels.from_spec(spec, base_dir=tmp_path)  # base ignored: absolute
    assert tables.memory is not None and tables.gemm is None
    with pytest.raises(SpecError, match=r"nothere\.csv"):
        MeasuredKernels.from_spec(MeasuredTables(gemm_csv="nothere.csv", source="x"), tmp_path)


# --- compute model: measured, interpolated, fallback -------------------------------------------


def test_gemm_on_a_row_is_the_measured_time(measured: ComputeModel) -> None:
    for (m, n, k), t in gemm_rows().items():
        op = gemm_op(m, n, k)
        assert measured.time(op) == t
        assert measured.time_and_source(op) == (t, "measured")
        assert measured.source(op) == "measured"


def test_grouped_gemm_counts_its_kernels(measured: ComputeModel) -> None:
    (m, n, k), t = next(iter(gemm_rows().items()))
    one = gemm_op(m, n, k)
    grouped = Op(**{**one.__dict__, "flops": 4 * one.flops, "bytes": 4 * one.bytes,
                           "count": 4.0})
    assert measured.time_and_source(grouped) == (4 * t, "measured")


def test_gemm_interpolated_between_neighbours(measured: ComputeModel) -> None:
    rows = gemm_rows()
    n, k = 4096.0, 4096.0
    lo, hi = (2048.0, n, k), (8192.0, n, k)
    ms = [2048.0 * 1.25**i for i in range(1, 7)]  # strictly between the two rows
    times = []
    for m in ms:
        op = gemm_op(m, n, k)
        assert measured.source(op) == "measured"
        t = measured.time(op)
        # the achieved throughput lies between the neighbours': so does the time, per FLOP
        bounds = sorted(rows[s] * (2 * m * n * k) / (2 * s[0] * s[1] * s[2]) for s in (lo, hi))
        assert bounds[0] * (1 - 1e-12) <= t <= bounds[1] * (1 + 1e-12)
        times.append(t)
    assert rows[lo] < times[0]
    assert all(a < b for a, b in itertools.pairwise(times))
    assert times[-1] < rows[hi]
    # an off-grid shape in all three dimensions is interpolated as well
    off = gemm_op(3000.0, 2000.0, 1500.0)
    assert measured.source(off) == "measured" and measured.time(off) > 0


def test_gemm_outside_coverage_falls_back_to_roofline(measured: ComputeModel,
                                                      roofline: ComputeModel) -> None:
    for op in (gemm_op(16384.0, 4096.0, 4096.0),  # m above the table
               gemm_op(256.0, 1024.0, 1024.0),  # m below
               gemm_op(1024.0, 1024.0, 1024.0, "fp16"),  # no fp16 rows
               gemm_op(512.0, 1024.0, 1024.0, "fp8")):  # below the fp8 rows' m
        assert measured.source(op) == "model"
        assert measured.time(op) == roofline.time(op)
        assert measured.time_and_source(op) == (roofline.time(op), "model")
    assert roofline.source(gemm_op(2048.0, 4096.0, 4096.0)) == "model"


def test_fp8_rows_are_separate(measured: ComputeModel) -> None:
    rows = gemm_rows("fp8")
    (m, n, k), t = next(iter(rows.items()))
    assert measured.time(gemm_op(m, n, k, "fp8")) == t
    assert measured.time(gemm_op(m, n, k, "bf16")) != t


def test_memory_table(measured: ComputeModel, roofline: ComputeModel) -> None:
    assert measured.time(memory_op(1e8)) == 120.0 * US
    # bandwidth is interpolated: 1e9 bytes lies between 1e8 (0.833 TB/s) and 1e10 (0.909 TB/s)
    t = measured.time(memory_op(1e9))
    assert 1e9 / (1e10 / 11000.0 / US) < t < 1e9 / (1e8 / 120.0 / US)
    ts = [measured.time(memory_op(x)) for x in (2e6, 1e7, 1e8, 1e9, 5e9)]
    assert all(a < b for a, b in itertools.pairwise(ts))
    for op in (memory_op(1e3), memory_op(1e11), memory_op(0.0)):
        assert measured.source(op) == "model"
        assert measured.time(op) == roofline.time(op)


def test_attention_table_needs_the_op_shape(measured: ComputeModel,
                                            roofline: ComputeModel) -> None:
    plain = Op(name="attention", kind="attention", category="forward", layer=0,
               flops=4 * 2048 * 2048 * 16 * 128, bytes=1e6, causal=True)
    assert measured.source(plain) == "model"  # no shape: the roofline prices it
    assert measured.time(plain) == roofline.time(plain)
    shaped = Op(**{**plain.__dict__, "attn_shape": (16.0, 2048.0, 128.0)})
    assert measured.time_and_source(shaped) == (150.0 * US, "measured")
    bwd = Op(**{**shaped.__dict__, "backward": True})
    assert measured.time(bwd) == 450.0 * US
    mid = Op(**{**shaped.__dict__, "attn_shape": (16.0, 4096.0, 128.0)})
    # work grows as seq²; the rate lies between the neighbours' rates
    assert 1800.0 * US / 4 < measured.time(mid) < 150.0 * US * 4
    far = Op(**{**shaped.__dict__, "attn_shape": (16.0, 16384.0, 128.0)})
    assert measured.source(far) == "model"
    assert measured.time(far) == roofline.time(far)
    rows = read_attention_csv(MEASURED / "attention.csv")
    assert {(r.causal, r.backward) for r in rows} == {(True, False), (True, True)}


def test_without_tables_results_are_unchanged() -> None:
    gpu = ideal_gpu()
    plain, with_none = ComputeModel(gpu), ComputeModel(gpu, tables=None)
    for op in (gemm_op(1000.0, 3000.0, 500.0), memory_op(1e7)):
        assert plain.time(op) == with_none.time(op) == plain.model_time(op)
        assert plain.source(op) == "model"


# --- CSV errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reader", "text", "match"),
    [
        (read_gemm_csv, "m,n,k,dtype,time_us\n1,2,3,bf16,4\n# c\n1,x,3,bf16,4\n",
         r"bad\.csv:4: column 'n': expected a number, got 'x'"),
        (read_gemm_csv, "m,n,k,dtype,time_us\n1,2,3,int4,4\n", r"bad\.csv:2: column 'dtype'"),
        (read_gemm_csv, "m,n,k,dtype,time_us\n1,2,3,bf16,-4\n",
         r"bad\.csv:2: column 'time_us': expected a positive"),
        (read_gemm_csv, "m,n,k,time_us\n1,2,3,4\n", r"bad\.csv:1: missing column\(s\) dtype"),
        (read_gemm_csv, "m,n,k,dtype,time_us\n\n1,2,3,bf16\n", r"bad\.csv:3: expected 5 fields"),
        (read_gemm_csv, "m,n,k,dtype,time_us\n", r"bad\.csv: .*no data rows"),
        (read_memory_csv, "bytes,time_us\n10,nan\n", r"bad\.csv:2: column 'time_us'"),
        (read_attention_csv,
         "batch,seq_len,heads,head_dim,causal,direction,time_us\n1,2,3,4,true,sideways,5\n",
         r"bad\.csv:2: column 'direction'"),
        (read_collectives_csv,
         "collective,group_size,size_bytes,time_us\nall_reduce,2.5,10,1\n",
         r"bad\.csv:2: column 'group_size': expected a positive integer"),
        (read_collectives_csv,
         "collective,group_size,size_bytes,time_us,tier\nall_reduce,2,10,1,nvlink\n",
         r"bad\.csv:2: column 'tier'"),
        (read_collectives_csv, "collective,group_size,size_bytes,time_us\nallreduce,2,10,1\n",
         r"bad\.csv:2: column 'collective'"),
    ],
)
def test_malformed_csv_names_file_line_and_column(
    tmp_path: Path, reader: Callable[[Path], object], text: str, match: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SpecError, match=match):
        reader(path)


def test_bad_table_reported_when_the_gpu_is_loaded(tmp_path: Path) -> None:
    (tmp_path / "gemm.csv").write_text("m,n,k,dtype,time_us\n1,2,3,bf16,4\n5,6,7,bf16,oops\n")
    spec = MeasuredTables(gemm_csv="gemm.csv", source="x")
    gpu = ideal_gpu(measured=spec)
    with pytest.raises(SpecError, match=r"gemm\.csv:3: column 'time_us'"):
        ComputeModel.from_gpu(gpu, base_dir=tmp_path)


def test_scattered_rows_use_inverse_distance_weighting() -> None:
    rows = [GemmRow(m, n, k, "bf16", 2 * m * n * k / rate * 1e6) for m, n, k, rate in
            ((256, 256, 256, 1e13), (4096, 512, 1024, 4e13), (1024, 4096, 512, 5e13),
             (512, 1024, 4096, 6e13), (4096, 4096, 4096, 8e13))]
    table = GemmTable(rows)
    m, n, k = 1000.0, 1000.0, 1000.0
    t = table.lookup(m, n, k, "bf16")
    assert t is not None
    assert 2 * m * n * k / 8e13 < t < 2 * m * n * k / 1e13  # a convex mix of measured rates
    assert table.lookup(4096, 512, 1024, "bf16") == rows[1].time_us * US
    assert table.lookup(5000, 1000, 1000, "bf16") is None


def test_duplicate_rows_are_averaged() -> None:
    table = GemmTable([GemmRow(64, 64, 64, "bf16", 10.0), GemmRow(64, 64, 64, "bf16", 20.0),
                       GemmRow(128, 128, 128, "bf16", 40.0)])
    assert table.lookup(64, 64, 64, "bf16") == 15.0 * US
    assert table.lookup(64, 64, 64, "fp16") is None
    assert MemoryTable(read_memory_csv(MEASURED / "memory.csv")).lookup(1e6) == 4.0 * US


# --- Kineto ------------------------------------------------------------------------------------


def test_kineto_trace_gives_gemm_and_nccl_rows() -> None:
    rows = read_kineto(DATA / "kineto_trace.json")
    assert rows.gemm == (
        GemmRow(128, 512, 256, "bf16", 12.5),  # aten::mm, linked by External id
        GemmRow(64, 512, 128, "fp16", 10.0),  # aten::addmm: two kernels via correlation
        GemmRow(256, 1024, 512, "fp8", 5.0),  # aten::_scaled_mm
        GemmRow(512, 16, 32, "fp32", 4.0),  # aten::bmm, batch folded into m
    )
    got = {(c.collective, c.group_size, c.size_bytes, c.time_us) for c in rows.collectives}
    assert got == {("all_reduce", 8, 2 * 1048576, 100.0), ("all_gather", 8, 4 * 8192, 40.0)}


def test_kineto_rows_feed_the_tables(tmp_path: Path) -> None:
    spec = MeasuredTables(kineto_trace=str(DATA / "kineto_trace.json"), source="trace")
    tables = MeasuredKernels.from_spec(spec)
    assert tables.gemm is not None and tables.collectives is not None
    model = ComputeModel(ideal_gpu(), tables=tables)
    assert model.time_and_source(gemm_op(128, 512, 256)) == (12.5 * US, "measured")
    assert tables.collectives.lookup("all_reduce", 8, 2 * 1048576) == 100.0 * US
    bad = tmp_path / "t.json"
    bad.write_text('{"schemaVersion": 1}')
    with pytest.raises(SpecError, match="traceEvents"):
        read_kineto(bad)
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not a valid"):
        read_kineto(bad)


# --- network -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def coll(measured: ComputeModel) -> CollectiveTable:
    assert measured.tables is not None and measured.tables.collectives is not None
    return measured.tables.collectives


def test_network_uses_measured_collectives_where_covered(coll: CollectiveTable) -> None:
    topo = fullflat(bw=800.0, lat_us=2.0)
    layout = layout_for(tp=8, cp=1, ep=1, dp=1, pp=1)
    net = NetworkModel(topo, layout, measured=coll)
    plain = NetworkModel(topo, layout)
    hit = net.collective("all_reduce", "tp", 67108864)
    assert (hit.time_s, hit.algorithm, hit.tier) == (400.0 * US, "measured", "fullflat")
    # between rows: piecewise linear in log(size)
    mid = net.collective("all_reduce", "tp", 8 * 1048576).time_s
    assert 20.0 * US < mid < 400.0 * US
    # uncovered: size out of range, no rows for the kind, no rows for the group size
    for kind, group, size in (("all_reduce", "tp", 4e9), ("reduce_scatter", "tp", 67108864),
                              ("all_gather", "tp", 67108864)):  # all_gather rows are tiered
        got = net.collective(kind, group, size)
        assert got == plain.collective(kind, group, size)
        assert got.algorithm != "measured"
    alpha_beta = min(flat_collective("all_reduce", alg, 4e9, 8, 800e9, 2e-6)
                     for alg in ("ring", "tree"))
    assert net.collective("all_reduce", "tp", 4e9).time_s == pytest.approx(alpha_beta)
    net4 = NetworkModel(topo, layout_for(tp=4, cp=1, ep=1, dp=1, pp=1), measured=coll)
    plain4 = NetworkModel(topo, layout_for(tp=4, cp=1, ep=1, dp=1, pp=1))
    assert net4.collective("all_reduce", "tp", 67108864) == plain4.collective("all_reduce", "tp",
                                                                               67108864)
    assert net4.collective("all_reduce", "tp", 67108864).algorithm in ("ring", "tree")


def test_network_measured_tiers_and_p2p(coll: CollectiveTable) -> None:
    topo = two_tier(domain=8)
    inside = NetworkModel(topo, layout_for(tp=8, cp=1, ep=1, dp=2, pp=1), measured=coll)
    across = NetworkModel(topo, layout_for(tp=8, cp=1, ep=1, dp=8, pp=1), measured=coll)
    up = inside.collective("all_gather", "tp", 1073741824)
    assert (up.time_s, up.algorithm, up.tier) == (3000.0 * US, "measured", "scale_up")
    assert inside.collective("all_gather", "dp", 1073741824).algorithm != "measured"  # size 2
    # pipeline neighbours use the group-size-2 p2p rows whatever the pipeline depth
    pp = NetworkModel(topo, layout_for(tp=8, cp=1, ep=1, dp=1, pp=4), measured=coll)
    got = pp.collective("p2p", "pp", 1048576)
    assert (got.time_s, got.algorithm, got.tier) == (10.0 * US, "measured", "scale_out")
    plain = NetworkModel(topo, layout_for(tp=8, cp=1, ep=1, dp=1, pp=4))
    assert pp.collective("p2p", "pp", 1e9) == plain.collective("p2p", "pp", 1e9)
    # a group with one rank per domain is a scale_out group: the scale_out rows apply
    assert across.placement("dp").ranks_per_domain == 1
    out = across.collective("all_gather", "dp", 1048576)
    assert (out.time_s, out.algorithm, out.tier) == (60.0 * US, "measured", "scale_out")


def test_from_parallelism_passes_the_table(coll: CollectiveTable) -> None:
    from codesign.specs.parallel import ParallelismSpec

    net = NetworkModel.from_parallelism(fullflat(), ParallelismSpec(tp=8), dp=1, measured=coll)
    assert net.measured is coll
    assert net.collective("all_reduce", "tp", 1048576).time_s == 20.0 * US


def test_report_names_the_operators_priced_from_measurements() -> None:
    """End to end: a GPU YAML naming measured tables (relative paths) drives a simulation and
    the report lists exactly the operators whose size the memory table covers."""
    from codesign.api import build_run, simulate_run
    from codesign.workload.training import build_training_graph

    here = Path(__file__).parent / "data" / "measured" / "ideal-measured.yaml"
    run = build_run(model=tiny_model(), gpu=str(here), topology=fullflat(), num_gpus=2, tp=2,
                    global_batch_size=4)
    report = simulate_run(run)
    assert report.feasible, report.reason
    graph = build_training_graph(run)
    covered = sorted({o.name for c in graph.chunks for o in (*c.forward, *c.backward)
                      if o.kind == "memory" and 1e6 <= o.bytes <= 1e10})
    assert covered and report.measured_ops == covered


def test_bound_attention_ops_use_measured_attention_rows() -> None:
    """A model whose attention matches a table row (16 heads of 128, sequence 2048, batch 1)
    takes the measured forward and backward times; under CP the roofline prices it."""
    from codesign.api import build_run
    from codesign.workload.training import build_training_graph

    here = Path(__file__).parent / "data" / "measured" / "ideal-measured.yaml"
    model = tiny_model(hidden_size=2048, num_heads=16, ffn_hidden_size=4096, seq_len=2048)
    run = build_run(model=model, gpu=str(here), topology=fullflat(), num_gpus=1,
                    global_batch_size=1)
    compute = ComputeModel.from_gpu(run.gpu)
    chunk = build_training_graph(run).chunks[0]
    fwd = next(o for o in chunk.forward if o.name == "attention")
    bwd = next(o for o in chunk.backward if o.name == "attention.bwd")
    assert fwd.attn_shape == (16.0, 2048.0, 128.0)
    assert compute.time_and_source(fwd) == (pytest.approx(150e-6), "measured")
    assert compute.time_and_source(bwd) == (pytest.approx(450e-6), "measured")
    cp_run = build_run(model=model, gpu=str(here), topology=fullflat(), num_gpus=2, cp=2,
                       global_batch_size=1)
    cp_fwd = next(o for o in build_training_graph(cp_run).chunks[0].forward
                  if o.name == "attention")
    assert cp_fwd.attn_shape is None and compute.source(cp_fwd) == "model"
