"""``codesign astra``: running exported traces through an ASTRA-sim binary (issue 15 item 2).

The plumbing runs everywhere against a stand-in binary (a script printing ASTRA-sim's
``sys[i] finished, N cycles`` lines); the agreement test runs when a real ASTRA-sim
analytical binary is named by ``ASTRA_SIM_BIN`` and skips with that reason otherwise (CI has
none; docs/astra-sim.md says how to build one).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from codesign.api import build_run
from codesign.trace.astra_config import MATCHED_LOCAL_MEM_GBPS, astra_matched, system_json
from codesign.trace.astra_run import (
    AstraError,
    AstraRun,
    astra_command,
    compare,
    find_binary,
    parse_finished,
)

SMALL = ["--model", "llama3-8b", "--gpu", "h100", "--topology", "dgx-h100", "--gpus", "16",
         "--tp", "8", "--pp", "2", "--global-batch", "16"]


def test_parse_finished_reads_every_rank() -> None:
    text = ("[info] sys[1] finished, 200 cycles, exposed communication 5 cycles.\n"
            "[info] sys[0] finished, 1786821796 cycles, exposed communication 6 cycles.\n"
            "noise sys[2] started\n")
    assert parse_finished(text) == {0: 1786821796, 1: 200}


def test_compare_takes_the_slowest_rank_of_each_stage() -> None:
    run = AstraRun({0: 1_000_000_000, 1: 1_200_000_000, 2: 900_000_000, 3: 800_000_000},
                   1.0, (), "")
    rows = compare([1.0, 0.9], [0, 0, 1, 1], run)
    assert [r.stage for r in rows] == [0, 1]
    assert [r.astra_s for r in rows] == pytest.approx([1.2, 0.9])
    assert rows[0].diff_pct == pytest.approx(20.0)
    assert run.step_time_s == pytest.approx(1.2)


def test_command_line_is_the_one_build_md_gives(tmp_path: Path) -> None:
    cmd = astra_command(Path("/bin/astra"), tmp_path / "t", tmp_path / "log")
    assert cmd[1:] == [f"--workload-configuration={tmp_path}/t",
                       f"--comm-group-configuration={tmp_path}/t.groups.json",
                       f"--system-configuration={tmp_path}/t.system.json",
                       f"--remote-memory-configuration={tmp_path}/t.memory.json",
                       f"--network-configuration={tmp_path}/t.network.yml",
                       f"--logging-folder={tmp_path}/log"]


def test_a_missing_or_unusable_binary_is_one_clear_error(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASTRA_SIM_BIN", raising=False)
    with pytest.raises(AstraError, match="ASTRA_SIM_BIN"):
        find_binary(None)
    plain = tmp_path / "not-exec"
    plain.write_text("x")
    with pytest.raises(AstraError, match="not an executable"):
        find_binary(str(plain))
    out = subprocess.run([sys.executable, "-m", "codesign.cli", "astra", *SMALL],
                         capture_output=True, text=True, env={**os.environ, "ASTRA_SIM_BIN": ""},
                         check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "ASTRA_SIM_BIN" in out.stderr


def test_system_file_runs_collectives_in_one_chunk_and_matched_drops_memory_time() -> None:
    run = build_run(model="llama3-8b", gpu="h100", topology="dgx-h100", num_gpus=16, tp=8,
                    pp=2, global_batch_size=16)
    sysf = system_json(run, 16)
    assert sysf["preferred-dataset-splits"] == 1
    assert sysf["local-mem-bw"] == pytest.approx(3350.0)  # the H100's HBM, GB/s
    assert system_json(run, 16, matched=True)["local-mem-bw"] == MATCHED_LOCAL_MEM_GBPS
    m = astra_matched(run)
    up = m.topology.scale_up  # type: ignore[union-attr]
    assert (up.efficiency_max, up.efficiency_half_size_MB, up.in_network_reduction) == \
        (1.0, 0.0, False)
    # 16 GPUs over two 8-GPU domains: ASTRA-sim runs a group over the dimensions it involves
    assert m.parallel.collective_algorithm == "hierarchical"
    one_domain = build_run(model="llama3-8b", gpu="h100", topology="dgx-h100", num_gpus=8,
                           tp=8, pp=1, global_batch_size=8)
    assert astra_matched(one_domain).parallel.collective_algorithm == "ring"


def _fake_astra(tmp_path: Path, cycles: int) -> Path:
    """A stand-in binary: reads the workload prefix and prints a finish line per trace."""
    script = tmp_path / "fake-astra"
    script.write_text(f"""#!{sys.executable}
import glob, sys
prefix = [a for a in sys.argv if a.startswith("--workload-configuration=")][0].split("=", 1)[1]
n = len(glob.glob(prefix + ".*.et"))
for i in range(n):
    print(f"[info] sys[{{i}}] finished, {{{cycles} + i}} cycles, exposed communication 0 cycles.")
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_astra_command_end_to_end_with_a_stand_in_binary(tmp_path: Path) -> None:
    fake = _fake_astra(tmp_path, 2_000_000_000)
    out = subprocess.run([sys.executable, "-m", "codesign.cli", "astra", *SMALL, "--bin",
                          str(fake), "--format", "json", "--quiet", "--out",
                          str(tmp_path / "exp" / "t")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ranks"] == 16 and data["astra_step_s"] == pytest.approx(2.000000015)
    # stage 0 = ranks 0-7, stage 1 = ranks 8-15 (PP outermost): the slowest rank of each
    assert [s["astra_s"] for s in data["stages"]] == pytest.approx([2.000000007, 2.000000015])
    assert data["codesign_step_s"] > 0 and len(data["differences"]) >= 4
    assert (tmp_path / "exp" / "t.0.et").is_file()  # --out keeps the export


@pytest.mark.skipif(not os.environ.get("ASTRA_SIM_BIN"),
                    reason="no ASTRA-sim binary: set ASTRA_SIM_BIN (docs/astra-sim.md)")
def test_astra_sim_agrees_within_two_percent_on_a_matched_network() -> None:
    out = subprocess.run([sys.executable, "-m", "codesign.cli", "astra", *SMALL,
                          "--match-network", "--format", "json", "--quiet"],
                         capture_output=True, text=True, check=False, timeout=600)
    assert out.returncode == 0, out.stderr
    assert abs(json.loads(out.stdout)["diff_pct"]) < 2.0
