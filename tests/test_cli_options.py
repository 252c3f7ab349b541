"""One run loader, one path language, plan flags derived from the plan spec, and options with
one meaning across commands."""

from __future__ import annotations

import argparse
import json
import re
import textwrap
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import Field

from codesign.api import build_run
from codesign.cli import _parser, main
from codesign.cli.plan_flags import add_plan_flags, flag_of, plan_flags, plan_from_args
from codesign.errors import SpecError
from codesign.experiments.spec import ExperimentSpec
from codesign.specs import evolve
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run_file import load_run_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "run-gpt3-175b.yaml"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("codesign: "), err
    return lines[0]


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# --- one run loader ------------------------------------------------------------------------


def test_example_run_file_is_the_default_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", "--run", str(EXAMPLE), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["feasible"]
    assert (d["model"], d["gpu"], d["topology"], d["num_gpus"]) == \
        ("gpt3-175b", "h100-sxm", "dgx-h100", 1024)
    p = d["plan"]
    assert (p["tp"], p["pp"], p["vpp"], p["dp"], p["global_batch_size"]) == (8, 8, 3, 16, 1024)
    assert p["sequence_parallel"] is True and p["schedule"] == "interleaved"
    code, out_default, _ = run_cli(capsys, "simulate", "--format", "json")
    assert code == 0
    assert d["step_time_s"] == json.loads(out_default)["step_time_s"]


def test_plan_and_its_alias_parallel_load_the_same_run(tmp_path: Path) -> None:
    body = "model: llama3-8b\nnum_gpus: 16\n{key}:\n  tp: 4\n  global_batch_size: 32\n"
    a = load_run_file(write(tmp_path, "a.yaml", body.format(key="plan")))
    b = load_run_file(write(tmp_path, "b.yaml", body.format(key="parallel")))
    assert a == b and a.plan == {"tp": 4, "global_batch_size": 32}
    assert a.build_args() == {"model": "llama3-8b", "num_gpus": 16}


def test_plan_and_parallel_together_are_one_line_error(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    path = write(tmp_path, "both.yaml", "model: llama3-8b\nplan: {tp: 2}\nparallel: {tp: 4}\n")
    line = one_line_error(*run_cli(capsys, "simulate", "--run", path))
    assert "'plan'" in line and "'parallel'" in line and "both.yaml" in line


def test_unknown_run_file_field_lists_the_canonical_fields(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "model: llama3-8b\nplans: {tp: 2}\n")
    line = one_line_error(*run_cli(capsys, "simulate", "--run", path))
    assert "'plans'" in line
    assert "model, gpu, topology, num_gpus, plan" in line


def test_study_base_takes_the_same_run_file_and_alias() -> None:
    base = {"model": "llama3-8b", "gpu": "h100", "num_gpus": 8}
    plan = {"tp": 2, "global_batch_size": 16}
    a = ExperimentSpec.parse({"name": "t", "base": {**base, "plan": plan}})
    b = ExperimentSpec.parse({"name": "t", "base": {**base, "parallel": plan}})
    assert a.base.plan == b.base.plan == plan
    assert a.results_hash() == b.results_hash()
    with pytest.raises(SpecError, match="num_gpus"):
        ExperimentSpec.parse({"name": "t", "base": {**base, "num_gpus": True}})


# --- one path language ---------------------------------------------------------------------


def test_evolve_walks_fields_and_mapping_keys() -> None:
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=8)
    new = evolve(run, {"gpu.peak_tflops.bf16": 500.0, "topology.scale_up.domain_size": 4})
    assert new.gpu.peak_tflops["bf16"] == 500.0
    assert new.topology.scale_up.domain_size == 4  # type: ignore[union-attr]
    assert run.gpu.peak_tflops["bf16"] != 500.0  # the original is unchanged


@pytest.mark.parametrize(("path", "parts"), [
    ("gpu.hbm_bw_TBps", ["'gpu.hbm_bw_TBps'", "no field 'hbm_bw_TBps'", "hbm_bandwidth_TBps"]),
    ("gpu.peak_tflops.bf17", ["'gpu.peak_tflops.bf17'", "no entry 'bf17'", "bf16, fp16"]),
    ("parallel.tp.x", ["'parallel.tp.x'", "'parallel.tp'", "is a value"]),
    ("model.moe.num_experts", ["'model.moe' is not set"]),
    ("bogus", ["'bogus'", "model, gpu, topology, parallel, num_gpus"]),
])
def test_evolve_rejects_a_bad_path_naming_it_and_the_allowed_names(path: str,
                                                                     parts: list[str]) -> None:
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=8)
    with pytest.raises(SpecError) as exc:
        evolve(run, {path: 1})
    msg = str(exc.value)
    assert "\n" not in msg
    for part in parts:
        assert part in msg, msg


# --- plan flags derived from the plan spec ---------------------------------------------------


README_FLAGS = re.search(r"Every plan\s+setting has a flag: (.*?), derived from",
                         (ROOT / "README.md").read_text(), re.S)


def test_every_plan_field_has_its_flag_and_the_readme_flags_exist() -> None:
    flags = {f.flag: f.field for f in plan_flags()}
    assert set(flags.values()) == set(ParallelismSpec.model_fields)
    assert README_FLAGS is not None
    listed = re.findall(r"--[a-z0-9-]+", README_FLAGS.group(1))
    assert len(listed) >= 20
    assert set(listed) <= set(flags), set(listed) - set(flags)
    assert (flags["--sp"], flags["--zero"], flags["--micro-batch"], flags["--placement"]) == \
        ("sequence_parallel", "zero_stage", "micro_batch_size", "placement_order")


def test_literal_choices_come_from_the_spec_type() -> None:
    tp = ParallelismSpec.model_fields["schedule"].annotation
    literal = next(a for a in typing.get_args(tp) if typing.get_origin(a) is Literal)
    assert flag_of("schedule").kwargs["choices"] == list(typing.get_args(literal))

    class WithZeroBubble(ParallelismSpec):
        schedule: Literal["gpipe", "1f1b", "interleaved", "zb-h1"] | None = None

    assert "zb-h1" in flag_of("schedule", WithZeroBubble).kwargs["choices"]


def test_a_new_plan_field_gets_its_flag_without_cli_changes() -> None:
    class MyPlan(ParallelismSpec):
        chunk_tokens: int = Field(default=4096, ge=1, description="tokens per chunk")
        offload: Literal["none", "cpu", "nvme"] = Field(
            default="none", description="where optimizer states live",
            json_schema_extra={"flag": "--offload-to"})
        fused_adam: bool = Field(default=False, description="fused optimizer kernel")
        layers_per_stage: tuple[int, ...] = Field(default=(), description="uneven stages")

    ap = argparse.ArgumentParser()
    add_plan_flags(ap, MyPlan)
    args = ap.parse_args(["--chunk-tokens", "8192", "--offload-to", "cpu", "--fused-adam",
                          "--layers-per-stage", "3, 5", "--tp", "2"])
    plan = plan_from_args(args, MyPlan)
    assert plan == {"chunk_tokens": 8192, "offload": "cpu", "fused_adam": True,
                    "layers_per_stage": (3, 5), "tp": 2}
    parsed = MyPlan.parse(plan)
    assert parsed.chunk_tokens == 8192 and parsed.layers_per_stage == (3, 5)
    help_text = ap.format_help()
    assert "tokens per chunk (default: 4096)" in help_text
    assert "--no-fused-adam" in help_text
    with pytest.raises(SystemExit) as exc:
        ap.parse_args(["--offload-to", "disk"])
    assert exc.value.code == 2
    assert plan_from_args(ap.parse_args([]), MyPlan) == {}


def test_search_value_flags_follow_the_plan_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = capsys.readouterr().out
    for stem in ("tp", "micro-batch", "zero", "sp", "recompute", "overlap-grad-reduce"):
        assert f"--{stem}-values" in out


# --- options with one meaning across commands -------------------------------------------------


def _commands(ap: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{prefix}{name}"] = sub
                out.update(_commands(sub, f"{prefix}{name} "))
    return out


def _signature(action: argparse.Action) -> tuple[Any, ...]:
    kind = type(action).__name__
    return (kind, action.dest, action.type, tuple(action.choices or ()), action.nargs)


def test_shared_options_mean_the_same_in_every_command() -> None:
    commands = _commands(_parser())
    assert {"simulate", "validate", "calibrate", "list", "experiment run", "sweep", "plot",
            "search", "serve", "export chakra", "inspect"} <= set(commands)
    seen: dict[str, set[tuple[Any, ...]]] = {}
    for sub in commands.values():
        for action in sub._actions:
            for opt in action.option_strings:
                if opt in ("--format", "--out", "--jobs", "--trace", "--progress", "--csv",
                           "--output"):
                    seen.setdefault(opt, set()).add(_signature(action))
    for opt, signatures in seen.items():
        assert len(signatures) == 1, (opt, signatures)
    assert {"--format", "--out", "--jobs", "--trace", "--progress"} <= set(seen)
    jobs = {sub.get_default("jobs") for sub in commands.values()
            if any("--jobs" in a.option_strings for a in sub._actions)}
    assert jobs == {None}  # one default: every core (codesign.cli.common.default_jobs)


def test_sweep_is_experiment_run() -> None:
    ap = _parser()
    argv = ["x.yaml", "--jobs", "2", "--out", "o", "--smoke", "--no-progress"]
    a = vars(ap.parse_args(["sweep", *argv]))
    b = vars(ap.parse_args(["experiment", "run", *argv]))
    a.pop("command"), b.pop("command"), b.pop("experiment_command")
    assert a == b


@pytest.mark.parametrize("argv", [
    ["search", "--model", "llama3-8b", "--gpus", "8", "--jobs", "0"],
    ["calibrate", "missing.csv", "--jobs", "0"],
    ["sweep", "missing.yaml", "--jobs", "0"],
])
def test_jobs_below_one_is_one_line_error(capsys: pytest.CaptureFixture[str],
                                          argv: list[str]) -> None:
    line = one_line_error(*run_cli(capsys, *argv))
    assert "--jobs must be >= 1, got 0" in line


def test_export_out_and_its_deprecated_alias(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    run = ["export", "chakra", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--pp", "2",
           "--global-batch", "4", "--format", "json"]
    code, out, err = run_cli(capsys, *run, "--out", str(tmp_path / "new" / "t"))
    assert code == 0 and not err
    assert json.loads(out)["num_ranks"] == 8
    code, out, err = run_cli(capsys, *run, "--output", str(tmp_path / "old" / "t"))
    assert code == 0 and json.loads(out)["num_ranks"] == 8
    assert "--output is deprecated; use --out" in err
    assert len(list((tmp_path / "old").glob("t.*.et"))) == 8
    line = one_line_error(*run_cli(capsys, *run))
    assert "--out PREFIX is required" in line


def test_search_summary_labels_every_breakdown_key() -> None:
    """The search table prints each breakdown share under a short label: a key the engine
    reports (host_issue of a host-bound MoE plan) must not stop the print."""
    from codesign.cli.search_cmd import _SHORT
    from codesign.report.training import BREAKDOWN_KEYS

    assert set(BREAKDOWN_KEYS) <= set(_SHORT)
