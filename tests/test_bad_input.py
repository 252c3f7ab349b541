"""The reproducers of issue 14's list: each is exit code 2 with one line naming the problem,
checked before anything is simulated, never a traceback or an absurd number."""

from __future__ import annotations

from pathlib import Path

import pytest

from codesign.api import simulate
from codesign.cli import main
from codesign.errors import SpecError
from codesign.specs.base import evolve
from codesign.specs.catalog import load_gpu


def _one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with_exit = None
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors exit from inside parse_args
        with_exit = exc
        code = int(exc.code or 0)
    _, err = capsys.readouterr()
    assert code == 2, (argv, err, with_exit)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("codesign")
    return lines[0]


def test_long_names_are_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--model", "--gpu", "--topology"):
        msg = _one_line_error(capsys, "simulate", flag, "x" * 300)
        assert "unknown" in msg


def test_non_utf8_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"model: gpt3-175b\n\xff\xfe\n")
    assert "not UTF-8" in _one_line_error(capsys, "simulate", "--run", str(bad))
    csv = tmp_path / "bad.csv"
    csv.write_bytes(b"case_id,source\n\xff,\xfe\n")
    assert "not UTF-8" in _one_line_error(capsys, "validate", str(csv))
    cfg = tmp_path / "config.json"
    cfg.write_bytes(b'{"num_hidden_layers": \xff}')
    assert "not UTF-8" in _one_line_error(capsys, "simulate", "--model", str(cfg))


def test_output_paths_are_checked_before_running(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert "is a directory" in _one_line_error(capsys, "simulate", "--trace", str(tmp_path))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    msg = _one_line_error(capsys, "search", "--csv", str(blocker / "rows.csv"))
    assert "cannot write" in msg
    msg = _one_line_error(capsys, "export", "chakra", "--out", str(blocker / "sub" / "t"))
    assert "is a file" in msg
    assert not list(tmp_path.glob("**/*.et"))


def test_straggler_speed_floor(capsys: pytest.CaptureFixture[str]) -> None:
    msg = _one_line_error(capsys, "simulate", "--model", "gpt3-175b", "--gpus", "64", "--tp",
                          "8", "--pp", "8", "--global-batch", "64", "--straggler", "17:1e-300")
    assert "speed fraction" in msg


def test_fsdp_contradicting_zero_stage(capsys: pytest.CaptureFixture[str]) -> None:
    assert "contradicts zero_stage 1" in _one_line_error(capsys, "simulate", "--fsdp",
                                                         "--zero", "1")


def test_api_wrong_types() -> None:
    with pytest.raises(SpecError, match="gpu must be"):
        simulate(gpu=None)
    with pytest.raises(SpecError, match="topology must be"):
        simulate(topology=5)


def test_infinite_and_huge_values_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="finite"):
        evolve(load_gpu("h100"), {"hbm_bandwidth_TBps": float("inf")})
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 1e12, "hidden_size": 4096, '
                   '"num_attention_heads": 32, "intermediate_size": 11008, '
                   '"vocab_size": 32000, "model_type": "llama"}')
    from codesign.specs.catalog import load_model

    with pytest.raises(SpecError):
        load_model(str(cfg))


def test_argparse_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "see codesign simulate --help" in _one_line_error(capsys, "simulate", "--gpus", "x")


_SERVING = """kind: serving
name: t
engines:
  - {name: e, device: h100, count: 1, models: [{model: llama3-8b, plan: {tp: 1}}],
     scheduler: {name: continuous, max_num_seqs: 8}}
clients:
  - name: c
    model: llama3-8b
    arrival: {process: poisson, rate_rps: RATE}
    num_requests: 5
    START
    input_tokens: {dist: lognormal, mean: 64, sigma: 0.3, min: IMIN, max: 128}
    output_tokens: {dist: fixed, value: 4}
    TYPES
"""


def _serving(tmp_path: Path, rate: str = "5", start: str = "", imin: str = "8",
             types: str = "") -> str:
    path = tmp_path / "s.yaml"
    path.write_text(_SERVING.replace("RATE", rate).replace("START", start)
                    .replace("IMIN", imin).replace("TYPES", types))
    return str(path)


def test_serving_contradictions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "max (128) < min (512)" in _one_line_error(
        capsys, "serve", _serving(tmp_path, imin="512"))
    assert "request_types" in _one_line_error(
        capsys, "serve", _serving(tmp_path, types="request_types: []"))


def test_sparse_arrivals_cost_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    for spec in (_serving(tmp_path, rate="1e-9"), _serving(tmp_path, start="start_s: 1e12")):
        t0 = time.perf_counter()
        assert main(["serve", spec, "--format", "json"]) == 0
        capsys.readouterr()
        assert time.perf_counter() - t0 < 10


def test_huge_sweeps_are_counted_not_enumerated(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import time

    values = ", ".join(str(i + 1) for i in range(50))
    study = tmp_path / "big.yaml"
    study.write_text(f"""name: big
base: {{model: llama3-8b, gpu: h100, num_gpus: 8, plan: {{tp: 1, global_batch_size: 64}}}}
sweep:
  - axes:
      gpu.hbm_bandwidth_TBps: [{values}]
      gpu.hbm_capacity_GB: [{values}]
      gpu.scale_up_bandwidth_GBps: [{values}]
      plan.micro_batch_size: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
metrics: [mfu]
""")
    t0 = time.perf_counter()
    assert main(["experiment", "show", str(study)]) == 0
    out, _ = capsys.readouterr()
    assert "1,250,000" in out and time.perf_counter() - t0 < 5
    msg = _one_line_error(capsys, "experiment", "run", str(study), "--out",
                          str(tmp_path / "r"))
    assert "1,250,000 points" in msg and "--max-points" in msg
    assert "not a Dask scheduler" in _one_line_error(capsys, "experiment", "run", str(study),
                                                     "--scheduler", "notaurl")


def test_calibrate_needs_rows_of_two_sources(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rows = (Path(__file__).parents[1] / "experiments" / "validation" /
            "training_cases.csv").read_text().splitlines()
    header = tmp_path / "header.csv"
    header.write_text(rows[0] + "\n")
    assert "nothing to calibrate" in _one_line_error(capsys, "calibrate", str(header))
    one = tmp_path / "one.csv"
    one.write_text("\n".join([rows[0], *[r for r in rows if r.startswith("T023")]]) + "\n")
    assert "at least 2 sources" in _one_line_error(capsys, "calibrate", str(one))


def test_warnings_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    from codesign.cli import _one_line_warning

    text = _one_line_warning(UserWarning("careful"), UserWarning, "x.py", 3, "code()")
    assert text == "codesign: warning: careful\n"
    assert warnings.formatwarning is not None


def test_a_transfer_far_from_time_zero_finishes() -> None:
    """At t = 1e15 s a float clock cannot advance by a millisecond: a shared channel used to
    reschedule its finishing timer forever (found by benchmarks/fuzz_inputs.py)."""
    import simpy

    from codesign.serving.tiers import FairShareChannel

    env = simpy.Environment(initial_time=1e15)
    ch = FairShareChannel(env, "c", rate=1e9)
    done = ch.transfer(1e6)  # 1 ms of work, below ulp(1e15) = 0.125 s
    env.run(until=done)
    assert ch.done and ch.done[0].remaining == 0.0


def test_a_study_whose_sweep_is_not_a_list(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "s.yaml"
    study.write_text((Path(__file__).parents[1] / "experiments" / "overlap.yaml").read_text()
                     + "\nsmoke: {sweep: 1.0e+308}\n")
    assert "smoke.sweep" in _one_line_error(capsys, "experiment", "show", str(study))
