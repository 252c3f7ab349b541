"""Experiment specs, sweep expansion, execution (in process, process pool, Dask), result storage
with resume, and the experiment CLI."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from codesign.api import build_run, simulate_run
from codesign.cli import main
from codesign.errors import SpecError
from codesign.experiments.axes import expand_points, point_id, resolve_point
from codesign.experiments.point import evaluate_point
from codesign.experiments.runner import run_experiment
from codesign.experiments.spec import ExperimentSpec, list_experiments, load_experiment
from codesign.experiments.store import (
    JOURNAL,
    RESULTS,
    ResultStore,
    load_manifest,
    load_results,
)
from codesign.specs.catalog import load_gpu, load_topology
from codesign.units import GB

DATA = Path(__file__).parent / "data"
SMALL = DATA / "experiment_small.yaml"
BASE: dict[str, Any] = {"model": "llama3-8b", "gpu": "h100", "num_gpus": 8,
                        "plan": {"tp": 2, "pp": 2, "global_batch_size": 16}}


def spec_of(**over: Any) -> ExperimentSpec:
    data: dict[str, Any] = {"name": "t", "base": BASE, "sweep": []}
    data.update(over)
    return ExperimentSpec.parse(data)


def raw_rows(out: Path) -> pd.DataFrame:
    """Every row in every Parquet part, duplicates kept (to count evaluations)."""
    parts = sorted((out / RESULTS).glob("part-*.parquet"))
    return pd.concat([pq.read_table(p).to_pandas() for p in parts], ignore_index=True)


# ---- specs and axes ---------------------------------------------------------------------------

def test_product_and_zip_expansion_in_order() -> None:
    spec = spec_of(sweep=[
        {"axes": {"gpu.hbm_bandwidth_TBps": [2, 4], "plan.tp": [1, 2, 4]}},
        {"mode": "zip", "axes": {"topology": ["fullflat-h100"] * 3,
                                 "topology.bandwidth_GBps": [100, 200, 400]}},
        {"axes": {"plan.tp": [4], "gpu.hbm_bandwidth_TBps": [4]}},  # repeats a block-0 point
    ])
    points = expand_points(spec)
    got = [(p.index, p.block, p.overrides) for p in points]
    product = [{"gpu.hbm_bandwidth_TBps": b, "plan.tp": t} for b in (2, 4) for t in (1, 2, 4)]
    zipped = [{"topology": "fullflat-h100", "topology.bandwidth_GBps": bw}
              for bw in (100, 200, 400)]
    assert got == [(i, 0, o) for i, o in enumerate(product)] + \
        [(6 + i, 1, o) for i, o in enumerate(zipped)]
    assert len({p.point_id for p in points}) == 9
    # ids hash the values only: the same point has the same id in any spec or key order
    assert points[0].point_id == point_id({"plan.tp": 1, "gpu.hbm_bandwidth_TBps": 2})
    assert spec.num_points == 10 and spec.axis_paths == [
        "gpu.hbm_bandwidth_TBps", "plan.tp", "topology", "topology.bandwidth_GBps"]


def test_no_sweep_is_the_base_point() -> None:
    points = expand_points(spec_of())
    assert [(p.index, p.overrides) for p in points] == [(0, {})]


def test_resolve_point_applies_entries_then_fields() -> None:
    spec = spec_of(base={**BASE, "overrides": {"gpu.hbm_capacity_GB": 100.0}})
    run = resolve_point(spec, {"topology": "gb200-nvl72", "topology.scale_up.domain_size": 144,
                               "gpu.hbm_bandwidth_TBps": 8, "plan.tp": 4, "num_gpus": 16})
    nvl72 = load_topology("gb200-nvl72")
    h100 = load_gpu("h100")
    assert run.topology.name == nvl72.name
    assert run.topology.scale_up.domain_size == 144  # type: ignore[union-attr]
    assert run.topology.scale_up.bandwidth_GBps == nvl72.scale_up.bandwidth_GBps  # type: ignore[union-attr]
    assert run.gpu.hbm_bandwidth_TBps == 8 and h100.hbm_bandwidth_TBps != 8
    assert run.gpu.peak_tflops == h100.peak_tflops
    # a swept datasheet capacity is the capacity used (the measured device total is dropped)
    assert h100.hbm_total_MiB is not None and run.gpu.memory_bytes == 100.0 * GB
    assert (run.parallel.tp, run.parallel.pp, run.parallel.global_batch_size) == (4, 2, 16)
    assert run.num_gpus == 16 and run.dp == 2


@pytest.mark.parametrize(("axes", "expected"), [
    ({"gpu.hbm_bw_TBps": [1]},
     ["'gpu.hbm_bw_TBps'", "gpu 'h100' has no field 'hbm_bw_TBps'", "hbm_bandwidth_TBps"]),
    ({"topology.scale_up.size": [8]},
     ["'topology.scale_up.size'", "'topology.scale_up'", "no field 'size'", "domain_size"]),
    ({"plan.tensor_parallel": [2]},
     ["'plan.tensor_parallel'", "ParallelismSpec has no field", "tp, pp, dp"]),
    ({"network.bandwidth": [2]}, ["'network.bandwidth'", "model, gpu, topology, num_gpus"]),
    ({"model.moe.num_experts": [8]}, ["'model.moe' is not set", "llama3-8b"]),
    ({"gpu.hbm_bandwidth_TBps.x": [8]}, ["'gpu.hbm_bandwidth_TBps' of gpu 'h100' is a value"]),
    ({"topology": ["fullflat-h100"], "topology.scale_up.domain_size": [8]},
     ["topology 'fullflat-h100' has no field 'scale_up'", "bandwidth_GBps"]),
    ({"topology": ["no-such-net"]}, ["unknown topology 'no-such-net'", "dgx-h100"]),
    ({"plan.tp": [[1, 2]]}, ["axis 'plan.tp'", "numbers, booleans or strings"]),
    ({"plan.tp": []}, ["axis 'plan.tp' has no values"]),
])
def test_invalid_axis_rejected_with_a_clear_message(axes: dict[str, Any],
                                                     expected: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        spec_of(sweep={"axes": axes})
    msg = str(err.value)
    assert "\n" not in msg
    for part in expected:
        assert part in msg, msg


def test_path_checked_against_every_entry_of_the_block() -> None:
    ok = spec_of(sweep={"axes": {"topology": ["dgx-h100", "gb200-nvl72"],
                                 "topology.scale_up.domain_size": [8, 72]}})
    assert ok.num_points == 4
    with pytest.raises(SpecError, match="'fullflat-gb200' has no field 'scale_up'"):
        spec_of(sweep={"axes": {"topology": ["dgx-h100", "fullflat-gb200"],
                                "topology.scale_up.domain_size": [8]}})


def test_zip_needs_equal_lengths_and_other_spec_errors() -> None:
    with pytest.raises(SpecError, match=r"zip.*same length.*plan.tp: 2, plan.pp: 3"):
        spec_of(sweep={"mode": "zip", "axes": {"plan.tp": [1, 2], "plan.pp": [1, 2, 4]}})
    with pytest.raises(SpecError, match="unknown metric 'mfuu'"):
        spec_of(metrics=["mfuu"])
    with pytest.raises(SpecError, match=r"ExperimentSpec.sweep.0.mode"):
        spec_of(sweep={"mode": "grid", "axes": {"plan.tp": [1]}})
    with pytest.raises(SpecError, match=r"plots.0.kind"):
        spec_of(plots=[{"kind": "pie", "x": "plan.tp", "y": "mfu", "file": "a"}])
    with pytest.raises(SpecError, match="unknown field"):
        spec_of(swep={"axes": {}})
    with pytest.raises(SpecError, match=r"base.plan.*tp"):
        spec_of(base={**BASE, "plan": {"tp": 0}})


def test_smoke_spec_takes_two_values_per_axis_and_base_overrides() -> None:
    spec = load_experiment(SMALL)
    smoke = spec.smoke_spec()
    assert smoke.base.plan["global_batch_size"] == 8 and smoke.base.plan["tp"] == 2
    assert smoke.sweep[0].axes == {"gpu.hbm_bandwidth_TBps": [2, 4], "plan.tp": [1, 2]}
    assert len(expand_points(smoke)) == 4 + 2
    assert smoke.results_hash() != spec.results_hash()
    # presentation does not change the results hash
    assert spec.model_copy(update={"title": "other"}).results_hash() == spec.results_hash()


def test_load_experiment_by_path_and_catalog(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model = {"name": "tiny", "num_layers": 4, "hidden_size": 256, "num_heads": 4,
             "ffn_hidden_size": 1024, "vocab_size": 1000, "seq_len": 128}
    (tmp_path / "tiny.yaml").write_text(json.dumps(model))
    (tmp_path / "study.yaml").write_text(json.dumps(
        {"name": "study", "base": {"model": "tiny.yaml", "gpu": "h100", "num_gpus": 2},
         "sweep": {"axes": {"model.hidden_size": [256, 512]}}}))
    monkeypatch.chdir(DATA)  # entry files resolve next to the spec, not the working directory
    spec = load_experiment(tmp_path / "study.yaml")
    assert spec.base.model == str((tmp_path / "tiny.yaml").resolve())
    assert resolve_point(spec, {"model.hidden_size": 512}).model.hidden_size == 512
    names = [n for n, _ in list_experiments()]
    with pytest.raises(SpecError, match="unknown experiment 'no-such-study'; allowed: "):
        load_experiment("no-such-study")
    for name in names:  # every catalog study validates
        assert load_experiment(name).name == name


# ---- points -----------------------------------------------------------------------------------

def test_point_rows_match_independent_simulation() -> None:
    spec = load_experiment(SMALL)
    points = {tuple(sorted(p.overrides.items())): p for p in expand_points(spec)}
    row = evaluate_point(spec, points[(("gpu.hbm_bandwidth_TBps", 8), ("plan.tp", 1))])
    gpu = load_gpu("h100").model_copy(update={"hbm_bandwidth_TBps": 8.0})
    ref = simulate_run(build_run(model="llama3-8b", gpu=gpu, num_gpus=8, tp=1, pp=2,
                                 micro_batch_size=1, global_batch_size=16))
    assert row["status"] == "ok" and row["reason"] == ""
    assert row["mfu"] == ref.mfu and row["step_time_s"] == ref.step_time_s
    assert row["tokens_per_s"] == ref.tokens_per_s
    assert row["memory_GiB"] == ref.memory_gib["total"]
    assert row["plan.dp"] == 4 and row["plan.tp"] == 1 and row["gpu"] == ref.gpu
    assert row["topology"] == "dgx-h100" and row["num_gpus"] == 8
    assert sum(row[f"breakdown_s.{k}"] for k in ref.breakdown_s) == \
        pytest.approx(ref.step_time_s, rel=1e-9)

    bad = evaluate_point(spec, points[(("gpu.hbm_bandwidth_TBps", 2), ("plan.tp", 3))])
    assert bad["status"] == "infeasible" and "tp 3" in bad["reason"]
    assert math.isnan(bad["mfu"]) and math.isnan(bad["step_time_s"])


def test_failing_points_are_rows_and_the_sweep_finishes(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import codesign.experiments.point as point_mod

    real = point_mod.simulate_run

    def flaky(run: Any) -> Any:  # an unexpected error inside one point
        if run.gpu.hbm_bandwidth_TBps == 4 and run.parallel.tp == 1:
            raise RuntimeError("boom\nsecond line")
        return real(run)

    monkeypatch.setattr(point_mod, "simulate_run", flaky)
    spec = load_experiment(SMALL)
    summary = run_experiment(spec, tmp_path / "out", jobs=1, progress=False, plots=False)
    assert (summary.ok, summary.infeasible, summary.failed) == (6, 3, 2)
    assert summary.evaluated == summary.points_total == 11
    df = load_results(tmp_path / "out")
    assert list(df["index"]) == list(range(11))
    failed = df[df["status"] == "failed"].set_index("index")
    assert failed.loc[3, "reason"] == "RuntimeError: boom"
    assert failed.loc[10, "reason"].startswith("SpecError: ")
    assert "bandwidth_GBps" in failed.loc[10, "reason"]
    assert failed["mfu"].isna().all()
    assert (failed["plan.tp"] == [1, 2]).all()  # the plan asked for is kept
    assert set(df[df["status"] == "infeasible"]["plan.tp"]) == {3}
    assert summary.best is not None and summary.best["mfu"] == df["mfu"].max()


# ---- storage and resume -----------------------------------------------------------------------

def test_resume_skips_finished_points_and_refuses_another_spec(tmp_path: Path) -> None:
    spec = load_experiment(SMALL)
    out = tmp_path / "out"
    first = run_experiment(spec, out, jobs=1, progress=False, plots=False)
    again = run_experiment(spec.model_copy(update={"title": "renamed"}), out, jobs=1,
                           progress=False, plots=False)
    assert (first.evaluated, again.evaluated, again.skipped) == (11, 0, 11)
    assert len(raw_rows(out)) == 11
    manifest = load_manifest(out)
    assert manifest["spec"]["title"] == "renamed" and manifest["points_total"] == 11
    assert manifest["spec_hash"] == spec.results_hash() and manifest["codesign_version"]

    retried = run_experiment(spec, out, jobs=1, progress=False, plots=False, retry_failed=True)
    assert retried.evaluated == 1 and len(load_results(out)) == 11

    other = spec.smoke_spec()
    with pytest.raises(SpecError, match=r"different spec.*choose another --out or pass "
                                        r"--overwrite"):
        run_experiment(other, out, jobs=1, progress=False, plots=False)
    replaced = run_experiment(other, out, jobs=1, progress=False, plots=False, overwrite=True)
    assert replaced.evaluated == replaced.points_total == 6
    assert len(raw_rows(out)) == 6


def test_journal_of_a_killed_run_is_recovered(tmp_path: Path) -> None:
    """Rows journaled but not yet in a part (and a torn last line) survive a kill."""
    spec = load_experiment(SMALL)
    points = expand_points(spec)
    store = ResultStore(tmp_path, spec, len(points), flush_interval_s=3600)
    rows = [evaluate_point(spec, p) for p in points[:3]]
    for r in rows:
        store.add(r)
    journal = tmp_path / RESULTS / JOURNAL
    with journal.open("a") as f:
        f.write('{"point_id": "torn", "ind')  # what a kill mid-write leaves
    assert not list((tmp_path / RESULTS).glob("part-*"))
    assert list(load_results(tmp_path)["point_id"]) == [r["point_id"] for r in rows]
    del store  # never closed: as if killed
    reopened = ResultStore(tmp_path, spec, len(points))
    assert not journal.exists() and len(list((tmp_path / RESULTS).glob("part-*"))) == 1
    assert set(reopened.finished()) == {r["point_id"] for r in rows}


def test_a_directory_another_live_run_writes_is_refused(tmp_path: Path) -> None:
    spec = load_experiment(SMALL)
    lock = tmp_path / ".lock"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lock.write_text(str(other.pid))
        with pytest.raises(SpecError, match=rf"another run \(process {other.pid}\)"):
            ResultStore(tmp_path, spec, 11)
    finally:
        other.kill()
        other.wait()
    # the writer is gone (killed): its lock is taken over, and released at the end
    assert run_experiment(spec, tmp_path, jobs=1, progress=False, plots=False).evaluated == 11
    assert not lock.exists()


_KILL_SCRIPT = """
import sys
from codesign.experiments.runner import run_experiment
from codesign.experiments.spec import ExperimentSpec
spec = ExperimentSpec.parse({spec!r})
run_experiment(spec, sys.argv[1], jobs=1, progress=False, plots=False, flush_interval_s=0.05)
"""


def test_resume_after_kill_loses_and_recomputes_nothing(tmp_path: Path) -> None:
    n = 60
    data = {"name": "kill", "base": BASE, "metrics": ["mfu"],
            "sweep": {"axes": {"gpu.hbm_bandwidth_TBps": [1 + i / 10 for i in range(n)]}}}
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT.format(spec=data), str(out)],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list((out / RESULTS).glob("part-*.parquet"))) >= 3:
                break
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    before = load_results(out)  # parts and journal lines the killed run left
    assert 0 < len(before) < n

    spec = ExperimentSpec.parse(data)
    summary = run_experiment(spec, out, jobs=1, progress=False, plots=False)
    assert summary.skipped == len(before) and summary.evaluated == n - len(before)
    rows = raw_rows(out)
    assert rows["point_id"].is_unique and len(rows) == n  # each point evaluated exactly once
    after = load_results(out).set_index("point_id")
    kept = before.set_index("point_id")
    # the rows finished before the kill are still there, unchanged (not recomputed)
    assert (after.loc[kept.index, "sim_wall_s"] == kept["sim_wall_s"]).all()
    assert (after.loc[kept.index, "mfu"] == kept["mfu"]).all()
    assert (after["status"] == "ok").all()


def test_interrupt_stores_finished_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import codesign.experiments.runner as runner_mod

    calls = []

    def interrupted(spec: ExperimentSpec, point: Any) -> dict[str, Any]:
        calls.append(point.index)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return evaluate_point(spec, point)

    monkeypatch.setattr(runner_mod, "evaluate_point", interrupted)
    spec = load_experiment(SMALL)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(spec, tmp_path, jobs=1, progress=False, plots=False,
                       flush_interval_s=3600)
    assert not (tmp_path / RESULTS / JOURNAL).exists()  # flushed into a part
    assert list(raw_rows(tmp_path)["index"]) == [0, 1, 2]
    monkeypatch.undo()
    assert run_experiment(spec, tmp_path, jobs=1, progress=False, plots=False).evaluated == 8


# ---- executors --------------------------------------------------------------------------------

def _comparable(out: Path) -> pd.DataFrame:
    df = load_results(out).drop(columns=["sim_wall_s"])
    return df.sort_values("point_id").reset_index(drop=True)


def test_pool_and_dask_local_cluster_equal_local_execution(tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    spec = load_experiment(SMALL)
    local = run_experiment(spec, tmp_path / "local", jobs=1, progress=False, plots=False)
    pool = run_experiment(spec, tmp_path / "pool", jobs=2, progress=False, plots=False)
    with distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        dask = run_experiment(spec, tmp_path / "dask", scheduler=cluster, progress=False,
                              plots=False)
    expected = _comparable(tmp_path / "local")
    assert len(expected) == 11 and (local.ok, local.failed) == (7, 1)
    for other, summary in (("pool", pool), ("dask", dask)):
        assert summary.evaluated == 11
        pd.testing.assert_frame_equal(_comparable(tmp_path / other), expected)


def test_dask_missing_gives_an_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import fails
    rc = main(["sweep", str(SMALL), "--out", str(tmp_path), "--scheduler", "tcp://x:1",
               "--no-progress"])
    assert rc == 2
    assert 'pip install "codesign[dask]"' in capsys.readouterr().err
    assert not (tmp_path / "manifest.json").exists()  # refused before anything is written


# ---- per-point search (through the search API of the contract) -----------------------------

def test_search_per_point_pins_set_fields_except_searched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import BaseModel, ConfigDict

    class FakeSpace(BaseModel):
        model_config = ConfigDict(extra="forbid")
        tp: list[int] | None = None
        pp: list[int] | None = None
        micro_batch_size: list[int] | None = None

        @classmethod
        def parse(cls, data: Any, origin: str = "") -> FakeSpace:
            return cls.model_validate(data)

    calls: list[dict[str, Any]] = []

    def fake_search(run: Any, space: Any, *, fixed: Any = None, objective: str = "mfu",
                    top_n: int = 10, confirm: int = 3, jobs: int = 1) -> Any:
        calls.append({"fixed": fixed, "space": space, "objective": objective, "top_n": top_n})
        if run.gpu.hbm_bandwidth_TBps == 2:
            return types.SimpleNamespace(best=None, evaluated=7, feasible=0,
                                         infeasible={"out of memory": 5, "divisibility": 2})
        best = simulate_run(run.model_copy(update={
            "parallel": run.parallel.model_copy(update={"tp": 4, **(fixed or {})})}))
        return types.SimpleNamespace(best=best, evaluated=7, feasible=3, infeasible={})

    monkeypatch.setitem(sys.modules, "codesign.search.space",
                        types.SimpleNamespace(SearchSpace=FakeSpace))
    monkeypatch.setitem(sys.modules, "codesign.search.search",
                        types.SimpleNamespace(search=fake_search))
    spec = spec_of(sweep={"axes": {"gpu.hbm_bandwidth_TBps": [2, 4], "plan.pp": [1]}},
                   search={"objective": "tokens_per_s", "space": {"tp": [1, 2, 4]},
                           "top_n": 4})
    run_experiment(spec, tmp_path, jobs=1, progress=False, plots=False)
    # base tp=2 is searched (listed in space); pp is pinned by the axis; gbs is not a field
    with pytest.raises(SpecError, match=r"'plan\.tp' is also searched"):
        spec_of(sweep={"axes": {"plan.tp": [1, 2]}}, search={"space": {"tp": [1, 2]}})
    assert [c["fixed"] for c in calls] == [{"pp": 1}, {"pp": 1}]
    assert calls[0]["objective"] == "tokens_per_s" and calls[0]["top_n"] == 4
    df = load_results(tmp_path).set_index("gpu.hbm_bandwidth_TBps")
    assert df.loc[2, "status"] == "infeasible"
    assert df.loc[2, "reason"] == ("no feasible plan among 7 searched (out of memory: 5, "
                                   "divisibility: 2)")
    ok = df.loc[4]
    assert ok["status"] == "ok" and ok["plan.tp"] == 4 and ok["plan.dp"] == 2
    assert ok["search.evaluated"] == 7 and ok["search.feasible"] == 3
    run = resolve_point(spec, {"gpu.hbm_bandwidth_TBps": 4, "plan.pp": 1})
    ref = simulate_run(run.model_copy(update={"parallel": run.parallel.model_copy(
        update={"tp": 4})}))
    assert ok["mfu"] == ref.mfu


# ---- CLI --------------------------------------------------------------------------------------

def test_cli_show_sweep_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "show", str(SMALL)]) == 0
    shown = capsys.readouterr().out
    assert "points: 11 (smoke: 6)" in shown
    assert "gpu.hbm_bandwidth_TBps: [2, 4, 8] (3)" in shown and "mfu-vs-hbm: line" in shown

    out = tmp_path / "res"
    assert main(["sweep", str(SMALL), "--out", str(out), "--jobs", "1", "--no-progress",
                 "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "11 points: 7 ok, 3 infeasible, 1 failed" in text
    df = load_results(out)
    best = df.loc[df["mfu"].idxmax()]
    assert f"best mfu: {best['mfu']:.4g} at gpu.hbm_bandwidth_TBps=" \
           f"{int(best['gpu.hbm_bandwidth_TBps'])}, plan.tp={int(best['plan.tp'])}" in text

    assert main(["plot", str(out), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "mfu-vs-hbm.png").is_file()
    assert "2 files from 11 rows (7 ok)" in capsys.readouterr().out


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        name: bad
        base: {model: llama3-8b, gpu: h100, num_gpus: 8}
        sweep: {axes: {gpu.hbm_bw: [1, 2]}}
        """))
    assert main(["sweep", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "gpu.hbm_bw" in err and "hbm_bandwidth_TBps" in err
    assert main(["plot", str(tmp_path)]) == 2
    assert "not a results directory" in capsys.readouterr().err
    assert main(["experiment", "run", "no-such-study"]) == 2
    assert "unknown experiment 'no-such-study'" in capsys.readouterr().err
    assert main(["experiment", "list"]) == 0


def test_cli_sweep_on_a_dask_cluster_of_processes(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    distributed = pytest.importorskip("dask.distributed")
    assert main(["sweep", str(SMALL), "--out", str(tmp_path / "local"), "--jobs", "1",
                 "--no-progress", "--no-plots"]) == 0
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        assert main(["sweep", str(SMALL), "--out", str(tmp_path / "dask"), "--no-progress",
                     "--no-plots", "--scheduler", cluster.scheduler_address]) == 0
    assert "11 points: 7 ok, 3 infeasible, 1 failed" in capsys.readouterr().out
    pd.testing.assert_frame_equal(_comparable(tmp_path / "dask"),
                                  _comparable(tmp_path / "local"))


def test_search_per_point_with_the_search_package(tmp_path: Path) -> None:
    pytest.importorskip("codesign.search.search")
    plan = {"global_batch_size": 32, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "recompute": "none",
            "zero_stage": 1, "sequence_parallel": True, "tp_comm_overlap": False,
            "overlap_grad_reduce": True, "overlap_param_gather": True, "micro_batch_size": 1}
    spec = spec_of(base={"model": "llama3-8b", "gpu": "h100", "num_gpus": 16, "plan": plan},
                   sweep={"axes": {"gpu.hbm_bandwidth_TBps": [4]}},
                   search={"space": {"tp": [1, 2, 4]}, "top_n": 3, "confirm": 3})
    run_experiment(spec, tmp_path, jobs=1, progress=False, plots=False)
    row = load_results(tmp_path).iloc[0]
    assert row["status"] == "ok" and row["search.evaluated"] >= 1
    assert row["plan.tp"] in (1, 2, 4) and row["plan.pp"] == 1
    gpu = load_gpu("h100").model_copy(update={"hbm_bandwidth_TBps": 4.0})
    # the winner is the best of the three plans, and its row is what the engine gives for it
    mfus = {tp: simulate_run(build_run(model="llama3-8b", gpu=gpu, num_gpus=16,
                                       **{**plan, "tp": tp})).mfu for tp in (1, 2, 4)}
    assert row["mfu"] == mfus[int(row["plan.tp"])] == max(m for m in mfus.values() if m)
