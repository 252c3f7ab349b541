"""Command-line interface: output shapes, exit codes and one-line error messages."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from codesign.cli import main
from codesign.report.training import BREAKDOWN_KEYS, MEMORY_KEYS
from codesign.specs.catalog import catalog_names

EXAMPLE = ["simulate", "--model", "gpt3-175b", "--gpu", "h100", "--gpus", "32768", "--tp", "8",
           "--pp", "8", "--vpp", "3", "--micro-batch", "1", "--global-batch", "4096",
           "--format", "json"]

RUN_YAML = """\
model: llama3-8b
gpu: h100
topology:
  kind: two_tier
  name: my-cluster
  scale_up: {domain_size: 8, bandwidth_GBps: 450, latency_us: 3}
  scale_out: {nic_bandwidth_Gbps: 400, latency_us: 5}
num_gpus: 64
parallel:
  tp: 2
  pp: 2
  micro_batch_size: 1
  global_batch_size: 128
  recompute: selective
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run_cli(capsys, *argv, "--format", "json")
    return code, json.loads(out), err


def assert_input_error(code: int, out: str, err: str) -> str:
    """Exit 2, exactly one stderr line starting with 'codesign: ', no traceback."""
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("codesign: ")
    assert "Traceback" not in err and "Traceback" not in out
    return lines[0]


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def check_report_shape(d: dict[str, Any]) -> None:
    """Every top-level key is present; a feasible report has every breakdown/memory key."""
    for key in ("step_time_s", "mfu", "hfu", "tokens_per_s", "tflops_per_gpu", "memory_gib",
                "feasible", "reason", "breakdown_s"):
        assert key in d, key
    if not d["feasible"]:
        return
    assert set(d["memory_gib"]) == {*MEMORY_KEYS, "total"}
    assert set(d["breakdown_s"]) == set(BREAKDOWN_KEYS)
    assert set(BREAKDOWN_KEYS) == {"forward", "backward", "recompute", "optimizer",
                                   "pipeline_bubble", "host_issue", "tp_comm", "cp_comm",
                                   "ep_comm", "dp_comm", "pp_comm"}
    assert set(MEMORY_KEYS) == {"weights", "gradients", "optimizer", "activations",
                                "comm_buffers"}


def check_consistent(d: dict[str, Any]) -> None:
    """A feasible report: breakdown sums to the step time, memory categories to the total."""
    check_report_shape(d)
    assert d["feasible"] is True
    assert d["reason"] == ""
    t = d["step_time_s"]
    assert t > 0
    assert sum(d["breakdown_s"].values()) == pytest.approx(t, rel=1e-9, abs=0)
    assert all(v >= 0 for v in d["breakdown_s"].values())
    mem = d["memory_gib"]
    assert sum(mem[k] for k in MEMORY_KEYS) == pytest.approx(mem["total"], rel=1e-9, abs=0)
    assert 0 < d["mfu"] <= d["hfu"] + 1e-12 and d["hfu"] <= 1
    assert d["tokens_per_s"] > 0 and d["tflops_per_gpu"] > 0


# --- success paths -------------------------------------------------------------------------


def test_default_simulate_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate")
    assert code == 0
    assert err == ""
    assert "step time" in out
    assert "MFU" in out and "HFU" in out
    for key in BREAKDOWN_KEYS:
        assert key in out, key
    for key in (*MEMORY_KEYS, "total"):
        assert key in out, key
    assert "gpt3-175b" in out and "1024" in out


def test_default_simulate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", "--format", "json")
    assert code == 0
    assert err == ""
    d = json.loads(out)  # exactly one JSON document: json.loads rejects trailing data
    assert isinstance(d, dict)
    check_consistent(d)
    assert d["model"] == "gpt3-175b"
    assert d["num_gpus"] == 1024
    assert d["plan"]["tp"] == 8 and d["plan"]["pp"] == 8 and d["plan"]["vpp"] == 3


def test_table_and_json_agree(capsys: pytest.CaptureFixture[str]) -> None:
    _, table, _ = run_cli(capsys, "simulate")
    _, d, _ = run_json(capsys, "simulate")
    assert f"{d['step_time_s']:.4f} s" in table
    assert f"{d['mfu'] * 100:.2f} %" in table


def test_issue_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *EXAMPLE)
    assert code == 0, err
    d = json.loads(out)
    check_consistent(d)
    assert d["num_gpus"] == 32768
    assert d["plan"]["dp"] == 512
    assert d["plan"]["global_batch_size"] == 4096


def test_module_entry_point_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "codesign.cli", "simulate", "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    d = json.loads(proc.stdout)
    check_consistent(d)


def test_flags_change_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, d, _ = run_json(capsys, "simulate", "--model", "llama3-8b", "--gpus", "16", "--tp",
                          "2", "--pp", "2", "--global-batch", "64", "--recompute", "full",
                          "--zero", "2", "--sp")
    assert code == 0
    check_consistent(d)
    plan = d["plan"]
    assert (plan["tp"], plan["pp"], plan["dp"]) == (2, 2, 4)
    assert plan["recompute"] == "full" and plan["zero_stage"] == 2
    assert plan["sequence_parallel"] is True
    assert d["breakdown_s"]["recompute"] > 0
    assert d["hfu"] > d["mfu"]


def test_dp_without_gpus_sets_gpu_count(capsys: pytest.CaptureFixture[str]) -> None:
    code, d, err = run_json(capsys, "simulate", "--model", "llama3-8b", "--dp", "4", "--tp",
                            "2", "--global-batch", "16")
    assert code == 0, err
    assert d["num_gpus"] == 8 and d["plan"]["dp"] == 4


def test_hf_config_model_file(capsys: pytest.CaptureFixture[str]) -> None:
    hf = Path(__file__).resolve().parents[1] / "workloads" / "hf" / "llama-3-8b.json"
    assert hf.is_file(), "the Hugging Face fixtures ship in workloads/hf/"
    code, d, err = run_json(capsys, "simulate", "--model", str(hf), "--gpus", "8", "--tp", "8",
                            "--global-batch", "8")
    assert code == 0, err
    check_consistent(d)
    assert d["model"] == "llama-3-8b"


def test_placement_flag_is_split(capsys: pytest.CaptureFixture[str]) -> None:
    code, d, _ = run_json(capsys, "simulate", "--model", "llama3-8b", "--gpus", "16", "--tp",
                          "2", "--global-batch", "64", "--placement", "dp, tp,cp,ep,pp")
    assert code == 0
    assert d["plan"]["placement_order"] == ["dp", "tp", "cp", "ep", "pp"]


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--run", "--model", "--gpu", "--topology", "--gpus", "--tp", "--pp",
                 "--format"):
        assert flag in out
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert "codesign" in capsys.readouterr().out
    assert main([]) == 0  # no command: help, success
    assert "simulate" in capsys.readouterr().out


# --- run files -----------------------------------------------------------------------------


def test_run_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "run.yaml", RUN_YAML)
    code, d, err = run_json(capsys, "simulate", "--run", path)
    assert code == 0, err
    check_consistent(d)
    assert d["model"] == "llama3-8b"
    assert d["gpu"] == "h100-sxm"
    assert d["topology"] == "my-cluster"
    assert d["num_gpus"] == 64
    plan = d["plan"]
    assert (plan["tp"], plan["pp"], plan["dp"]) == (2, 2, 16)
    assert plan["recompute"] == "selective"
    assert plan["global_batch_size"] == 128


def test_flags_override_run_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "run.yaml", RUN_YAML)
    code, d, err = run_json(capsys, "simulate", "--run", path, "--tp", "4", "--gpus", "128",
                            "--recompute", "none", "--gpu", "h200")
    assert code == 0, err
    check_consistent(d)
    assert d["num_gpus"] == 128
    assert d["gpu"] == "h200"
    assert d["topology"] == "my-cluster"  # not overridden: still the file's inline topology
    plan = d["plan"]
    assert (plan["tp"], plan["pp"], plan["dp"]) == (4, 2, 16)
    assert plan["recompute"] == "none"
    assert plan["global_batch_size"] == 128  # from the file


def test_json_run_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = {"model": "llama3-8b", "gpu": "h100", "topology": "dgx-h100", "num_gpus": 16,
            "parallel": {"tp": 4, "global_batch_size": 32}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    code, d, err = run_json(capsys, "simulate", "--run", str(path))
    assert code == 0, err
    assert d["topology"] == "dgx-h100" and d["plan"]["dp"] == 4


# --- invalid input: exit 2 and one line ------------------------------------------------------


def test_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_input_error(*run_cli(capsys, "simulate", "--model", "gpt-17"))
    assert "gpt-17" in line
    for name in catalog_names("workloads"):
        assert name in line


def test_unknown_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_input_error(*run_cli(capsys, "simulate", "--gpu", "tpu-v9"))
    assert "tpu-v9" in line
    for name in catalog_names("hardware"):
        assert name in line


def test_unknown_topology(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_input_error(*run_cli(capsys, "simulate", "--topology", "torus-9d"))
    for name in catalog_names("topologies"):
        assert name in line


def test_tp_not_dividing_heads(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_input_error(*run_cli(capsys, "simulate", "--tp", "7"))
    assert "tp 7 does not divide num_heads 96" in line


def test_out_of_memory(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_input_error(*run_cli(capsys, "simulate", "--model", "gpt3-175b", "--gpus",
                                       "8", "--tp", "8", "--pp", "1", "--global-batch", "8"))
    assert "out of memory" in line


def test_fp8_on_a100(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_input_error(*run_cli(capsys, "simulate", "--dtype", "fp8", "--gpu", "a100"))
    assert "fp8" in line and "infeasible" in line


def test_infeasible_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", "--model", "gpt3-175b", "--gpus", "8", "--tp",
                             "8", "--pp", "1", "--global-batch", "8", "--format", "json")
    assert_input_error(code, out, err)
    d = json.loads(out)
    check_report_shape(d)
    assert d["feasible"] is False
    assert "out of memory" in d["reason"]
    assert d["step_time_s"] is None and d["mfu"] is None
    assert d["memory_gib"]["total"] > d["memory_capacity_gib"]


def test_infeasible_json_plan_problem(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", "--tp", "7", "--format", "json")
    assert_input_error(code, out, err)
    d = json.loads(out)
    assert d["feasible"] is False and d["reason"]


@pytest.mark.parametrize("argv", [
    ["simulate", "--recompute", "bogus"],
    ["simulate", "--tp", "two"],
    ["simulate", "--zero", "4"],
    ["simulate", "--format", "xml"],
    ["simulate", "--no-such-flag"],
    ["frobnicate"],
])
def test_argparse_errors(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "error:" in err


@pytest.mark.parametrize("flag,value", [("--gpus", "0"), ("--tp", "0"), ("--micro-batch", "0"),
                                        ("--vpp", "0"), ("--global-batch", "-1")])
def test_non_positive_sizes(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    assert_input_error(*run_cli(capsys, "simulate", "--model", "llama3-8b", flag, value))


def test_bad_placement(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_input_error(*run_cli(capsys, "simulate", "--placement", "tp,dp"))
    assert "placement_order" in line


def test_run_file_bad_field_value(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", """\
        model: llama3-8b
        parallel:
          tp: 2
          recompute: sometimes
        """)
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert "recompute" in line
    assert "'none'" in line and "'selective'" in line and "'full'" in line


def test_run_file_unknown_plan_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", """\
        model: llama3-8b
        parallel:
          tensor_parallel: 2
        """)
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert "tensor_parallel" in line and "unknown field" in line


def test_run_file_unknown_top_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "model: llama3-8b\nbogus: 1\n")
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert "bogus" in line and "parallel" in line


def test_run_file_bad_nested_topology(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", RUN_YAML.replace("bandwidth_GBps: 450",
                                                        "bandwidth_GBps: -450"))
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert "scale_up.bandwidth_GBps" in line
    assert "bad.yaml" in line


@pytest.mark.parametrize("body,field", [
    ("model: llama3-8b\nnum_gpus: lots\n", "num_gpus"),
    ("model: llama3-8b\nnum_gpus: 3.5\n", "num_gpus"),
    ("model: 123\n", "model"),
    ("model: llama3-8b\ngpu: [h100, h200]\n", "gpu"),
    ("model: llama3-8b\ntopology: 5\n", "topology"),
], ids=["num_gpus-str", "num_gpus-float", "model-int", "gpu-list", "topology-int"])
def test_run_file_wrong_types(capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str,
                              field: str) -> None:
    """A wrongly typed top-level run-file field is an input error naming the field."""
    path = write(tmp_path, "bad.yaml", body)
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert field in line


def test_run_file_malformed_yaml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "model: llama3-8b\nparallel: {tp: 2\n")
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert "bad.yaml" in line and "YAML" in line


def test_run_file_not_a_mapping(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "- llama3-8b\n- h100\n")
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert "mapping" in line


def test_run_file_missing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    line = assert_input_error(*run_cli(capsys, "simulate", "--run", path))
    assert "nope.yaml" in line


def test_topology_file_bad_enum(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "topo.yaml", """\
        kind: three_tier
        name: t
        scale_up: {domain_size: 8, bandwidth_GBps: 450, latency_us: 3}
        scale_out: {nic_bandwidth_Gbps: 400, latency_us: 5}
        """)
    line = assert_input_error(*run_cli(capsys, "simulate", "--model", "llama3-8b",
                                       "--topology", path))
    assert "kind" in line and "three_tier" in line
    assert "two_tier" in line and "fullflat" in line


def test_topology_file_bad_nested_type(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    path = write(tmp_path, "topo.yaml", """\
        kind: two_tier
        name: t
        scale_up: {domain_size: 8, bandwidth_GBps: 450, latency_us: 3}
        scale_out: {nic_bandwidth_Gbps: 400, latency_us: 5, switch_tiers: 9}
        """)
    line = assert_input_error(*run_cli(capsys, "simulate", "--model", "llama3-8b",
                                       "--topology", path))
    assert "scale_out.switch_tiers" in line


# --- list ------------------------------------------------------------------------------------


def test_list_all(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "list")
    assert code == 0 and err == ""
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    for kind in ("hardware", "topologies", "workloads"):
        names = catalog_names(kind)  # type: ignore[arg-type]
        assert names
        assert set(names) <= listed, kind
    for title in ("gpus:", "topologies:", "models:"):
        assert title in out.splitlines()


@pytest.mark.parametrize("kind,catalog", [("gpus", "hardware"), ("topologies", "topologies"),
                                          ("models", "workloads")])
def test_list_one(capsys: pytest.CaptureFixture[str], kind: str, catalog: str) -> None:
    code, out, _ = run_cli(capsys, "list", kind)
    assert code == 0
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert sorted(listed) == catalog_names(catalog)  # type: ignore[arg-type]


def test_every_listed_gpu_simulates(capsys: pytest.CaptureFixture[str]) -> None:
    """Each catalog GPU runs a small plan on its default system from the CLI."""
    for gpu in catalog_names("hardware"):
        code, d, err = run_json(capsys, "simulate", "--model", "llama3-8b", "--gpu", gpu,
                                "--gpus", "16", "--tp", "4", "--global-batch", "32",
                                "--recompute", "full", "--zero", "3")  # fits 16 GB parts
        assert code == 0, (gpu, err)
        check_consistent(d)


def test_flags_without_a_layout_get_a_chosen_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """Naming a model, GPU and count without TP/PP/... chooses the fastest feasible plan
    (issue 14: any flag used to drop the default plan and fall back to TP1 PP1)."""
    code, d, err = run_json(capsys, "simulate", "--model", "llama3-8b", "--gpus", "16",
                            "--global-batch", "64", "--zero", "1")
    assert code == 0 and d["feasible"]
    assert "plan not stated" in err and "fastest feasible" in err
    assert d["plan"]["zero_stage"] == 1 and d["plan"]["global_batch_size"] == 64
    # a plan with the layout given is simulated as given
    code, d2, err2 = run_json(capsys, "simulate", "--model", "llama3-8b", "--gpus", "16",
                              "--global-batch", "64", "--zero", "1", "--tp", "2")
    assert code == 0 and "plan not stated" not in err2 and d2["plan"]["tp"] == 2
