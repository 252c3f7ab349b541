"""`codesign validate`: row mapping, metric conversion and error arithmetic, checked against
independent computations; the calibration fit recovers a known parameter."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import tiny_model, tiny_run

from codesign.api import simulate_run
from codesign.catalogs import catalog_root
from codesign.cli import main
from codesign.specs.base import evolve
from codesign.specs.catalog import fitted_fractions, fraction_owner, load_gpu, nearest_part
from codesign.validation.calibrate import FixedCase, fit_fraction, sibling_fraction, with_fraction
from codesign.validation.runner import run_csv, summarize
from codesign.validation.training_cases import (
    MappedCase,
    Measurement,
    Unsupported,
    _interleaving_allowed,
    iter_cases,
    map_row,
    read_rows,
)

SMALL = Path(__file__).parent / "data" / "validation_small.csv"
#: the published runs shipped with codesign (copies of the shared validation set)
SHARED = Path(__file__).resolve().parents[1] / "experiments" / "validation" / "training_cases.csv"


def _mapped() -> dict[str, MappedCase | str]:
    return {row["case_id"]: case for row, case in iter_cases(SMALL)}


def test_validate_json_error_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(SMALL), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cases = {c["case_id"]: c for c in out["cases"]}
    assert set(cases) == {"T001", "T025", "T107", "X001"}
    assert cases["X001"]["status"] == "unsupported" and "architecture" in cases["X001"]["reason"]
    mapped = _mapped()
    for cid in ("T001", "T025", "T107"):
        c = cases[cid]
        assert c["status"] == "ok", c
        assert c["error_pct"] == pytest.approx(100 * (c["predicted"] - c["measured"])
                                               / c["measured"], rel=1e-12)
        assert c["assumptions"], "every mapped case lists its assumptions"
        case = mapped[cid]
        assert isinstance(case, MappedCase)
    # T025: Korthikanti iteration time (vpp 3 given) -> the simulated step time itself
    t025 = mapped["T025"]
    assert isinstance(t025, MappedCase) and t025.measurement.metric == "iteration_time_s"
    (run,) = t025.candidates[0]
    assert cases["T025"]["predicted"] == pytest.approx(simulate_run(run).step_time_s)
    # T001: Narayanan TFLOP/s, counted with the paper's formula 96·B·s·l·h²(1+s/6h+V/16lh)
    t001 = mapped["T001"]
    assert isinstance(t001, MappedCase) and t001.measurement.flop_formula == "megatron-recompute"
    b, s, layers, h, v = 512, 2048, 24, 2304, 51200
    flops = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    implied_step = flops / (cases["T001"]["predicted"] * 1e12 * 32)
    assert any(simulate_run(r).step_time_s == pytest.approx(implied_step, rel=1e-9)
               for r in t001.candidates[0])
    # T107: MosaicML tokens/s per GPU x GPUs
    assert cases["T107"]["measured"] == pytest.approx(10643 * 8)
    # summary = statistics of the per-case absolute errors
    errs = np.abs([cases[c]["error_pct"] for c in ("T001", "T025", "T107")])
    summ = out["summary"]
    assert summ["n"] == 3
    assert summ["median_abs_error_pct"] == pytest.approx(np.median(errs))
    assert summ["mean_abs_error_pct"] == pytest.approx(np.mean(errs))
    assert summ["p90_abs_error_pct"] == pytest.approx(np.percentile(errs, 90))
    assert summ["max_abs_error_pct"] == pytest.approx(errs.max())


def test_unstated_micro_batch_size_is_tuned_like_a_benchmark_run() -> None:
    # T001 states no micro-batch size: 512 sequences over DP 32 = 16 per replica, so every
    # size of 1, 2, 4, 8 dividing 16 is a candidate and the fastest feasible one is reported
    t001 = _mapped()["T001"]
    assert isinstance(t001, MappedCase)
    runs = t001.candidates[0]
    assert sorted(r.parallel.micro_batch_size for r in runs) == [1, 2, 4, 8]
    assert any("micro-batch size not given" in a for a in t001.assumptions)
    reports = [simulate_run(r) for r in runs]
    fastest = min(r.step_time_s for r in reports if r.feasible and r.step_time_s)
    result = run_csv(SMALL)
    (r001,) = [r for r in result if r.case_id == "T001"]
    flops = 96 * 512 * 2048 * 24 * 2304**2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    assert r001.predicted == pytest.approx(flops / fastest / 32 / 1e12, rel=1e-9)
    chosen = [a for a in r001.assumptions if a.startswith("micro-batch ") and "given" not in a]
    assert len(chosen) == 1
    # a stated size is taken as given: T025 has micro-batch 1 and a single candidate
    t025 = _mapped()["T025"]
    assert isinstance(t025, MappedCase)
    assert [r.parallel.micro_batch_size for r in t025.candidates[0]] == [1]


def test_interleaving_candidates_follow_megatron_constraints() -> None:
    # Megatron: layers per virtual stage must divide the layers of a pipeline stage
    assert [v for v in range(2, 9) if _interleaving_allowed("megatron-core", 84, 2, v)] == [
        2, 3, 6, 7]  # 42 layers per stage
    assert not any(_interleaving_allowed("megatron-core", 92, 4, v) for v in range(2, 9))  # 23
    assert not _interleaving_allowed("megatron-core", 90, 4, 2)  # 90 / 4 is not whole
    # Megatron-LM 2021-22 asserted pp > 2 for the interleaved schedule
    assert not _interleaving_allowed("megatron-2021", 48, 2, 2)
    assert _interleaving_allowed("megatron-2021", 48, 4, 2)
    assert _interleaving_allowed("llama3", 126, 16, 4)  # uneven stages allowed elsewhere
    # through the row mapping: T001 moved to pp 2 keeps one (non-interleaved) depth per size
    (row,) = [r for r in read_rows(SMALL) if r["case_id"] == "T001"]
    case = map_row({**row, "pp": "2", "num_gpus": "64"})
    assert {r.parallel.vpp for g in case.candidates for r in g} == {1}
    case = map_row({**row, "pp": "4", "num_gpus": "128"})  # 24 layers: 6 per stage
    assert {r.parallel.vpp for g in case.candidates for r in g} == {2, 3, 6}


def test_validate_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "v.png"
    assert main(["validate", str(SMALL), "--plot", str(png), "--assumptions"]) == 0
    text = capsys.readouterr().out
    assert "simulated 3 of 4 cases" in text and "unsupported" in text
    assert png.stat().st_size > 10_000


def test_validate_rejects_a_csv_without_the_columns(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing column" in err


def test_calibration_recovers_a_known_sustained_fraction() -> None:
    # a GEMM-bound case (wide layers): step time depends on the fraction throughout
    run = tiny_run(num_gpus=2, pp=2, global_batch_size=8,
                   model=tiny_model(hidden_size=4096, ffn_hidden_size=16384, num_heads=32,
                                    seq_len=2048))
    truth = simulate_run(with_fraction(run, 0.8))
    assert truth.step_time_s is not None
    case = MappedCase("S1", "synthetic", "test", ((run,),), ((),),
                      Measurement("iteration_time_s", truth.step_time_s))
    assert fit_fraction([FixedCase(case, run)]) == pytest.approx(0.8, abs=0.005)
    assert evolve(run, {"gpu.efficiency.sustained_fraction": 0.8}) == with_fraction(run, 0.8)


def test_a_held_out_gpu_without_a_fit_takes_its_siblings_fraction() -> None:
    """Cross-validation applies the catalog's sibling rule to a GPU the fitting half has no
    row of, as a published run on that GPU would get it."""
    fitted = {"a100-80gb": 0.9, "h100-sxm": 0.7}
    assert sibling_fraction(load_gpu("h100-sxm"), fitted) == 0.7  # its own fit
    assert sibling_fraction(load_gpu("h800"), fitted) == 0.7  # efficiency_from: h100-sxm
    assert sibling_fraction(load_gpu("a100-40gb"), fitted) == 0.9  # efficiency_from: a100
    # B200 (2,250 TFLOP/s BF16) is measured itself: the nearest NVIDIA peak is H100's 989,
    # not A100's 312
    assert sibling_fraction(load_gpu("b200"), fitted) == 0.7
    assert sibling_fraction(load_gpu("b300"), {"b200": 0.8, **fitted}) == 0.8  # its chain
    # another vendor with nothing of its own fitted: the nearest peak of any vendor
    # (MI300X 1,307 TFLOP/s: H100)
    assert sibling_fraction(load_gpu("mi300x"), fitted) == 0.7
    assert sibling_fraction(load_gpu("b200"), {}) == 1.0  # nothing fitted: uncalibrated


def test_a_row_whose_only_measurement_is_prose_is_compared_on_it(tmp_path: Path) -> None:
    """Narayanan et al.'s 3,072-GPU row with its metric columns emptied: its other_measured
    cell ("aggregate 502.0 PFLOP/s", Megatron's recompute-inclusive count) becomes 502,000 /
    3,072 TFLOP/s per GPU and the row is simulated as with the column."""
    rows = read_rows(SHARED)
    row = next(r for r in rows if r["case_id"] == "T010")
    assert "502.0 PFLOP/s" in row["other_measured"]
    blank = {**row, **{c: "" for c in ("iteration_time_s", "tokens_per_s_total",
                                       "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu_pct",
                                       "hfu_pct")}}
    path = tmp_path / "prose_metric.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(blank)
    [(_, case)] = list(iter_cases(path))
    assert isinstance(case, MappedCase)
    assert case.measurement.metric == "tflops_per_gpu"
    assert case.measurement.value == pytest.approx(502_000 / 3072)
    assert case.measurement.flop_formula == "megatron-recompute"
    [result] = run_csv(path)
    assert result.status == "ok" and result.predicted is not None
    blank["other_measured"] = "trained for 21 days"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(blank)
    [(_, reason)] = list(iter_cases(path))
    assert isinstance(reason, str) and "other_measured" in reason


def test_two_rows_give_one_least_squares_fraction_between_their_own() -> None:
    """Mean squared log error has one minimum for two rows whose own fractions differ (the
    mean absolute log error is flat between them): for a step inversely proportional to the
    fraction it is their geometric mean."""
    run = tiny_run(num_gpus=2, pp=2, global_batch_size=8,
                   model=tiny_model(hidden_size=4096, ffn_hidden_size=16384, num_heads=32,
                                    seq_len=2048))
    cases = []
    for i, f in enumerate((0.7, 0.9)):
        t = simulate_run(with_fraction(run, f)).step_time_s
        assert t is not None
        cases.append(FixedCase(MappedCase(f"S{i}", f"src{i}", "test", ((run,),), ((),),
                                          Measurement("iteration_time_s", t)), run))
    assert fit_fraction(cases) == pytest.approx(math.sqrt(0.7 * 0.9), abs=0.01)


def test_parts_of_one_die_are_fitted_together() -> None:
    """GB200 is B200's die in a Grace superchip: its entry states no fraction of its own
    (``efficiency_from: b200``), so its rows calibrate B200's, and GB300 (up the chain) runs
    with it too; a part that states its own (H100) or none up its chain (H200) is its own."""
    assert fraction_owner("gb200") == fraction_owner("gb300") == "b200"
    assert fraction_owner("h100-sxm") == "h100-sxm" and fraction_owner("h800") == "h100-sxm"
    assert fraction_owner("h200") == "h200"
    b200 = load_gpu("b200").efficiency
    for part in ("gb200", "gb300"):
        assert load_gpu(part).efficiency.sustained_fraction == b200.sustained_fraction
    assert load_gpu("gb200").efficiency.gemm_max != b200.gemm_max  # its own measurements


def test_a_catalog_part_without_a_fraction_takes_its_nearest_fitted_siblings() -> None:
    """The catalog applies the sibling rule to the end-to-end fraction as calibration's
    held-out folds do: H200 (989 TFLOP/s BF16, measured efficiencies of its own) runs with
    the fitted NVIDIA part nearest in peak (H100's), MI300X (1,307; no AMD part fitted) with
    the nearest of any vendor (H100, not B200's 2,250), MI250X (efficiency_from MI300X) with
    MI300X's. A CPU entry and a user's own file stay uncalibrated (1.0)."""
    fitted = fitted_fractions()
    assert "h200" not in fitted and "mi300x" not in fitted
    h100 = fitted["h100-sxm"][2]
    for part in ("h200", "mi300x", "mi250x"):
        assert load_gpu(part).efficiency.sustained_fraction == h100
    assert nearest_part("amd", 1307.4, [("b200", "nvidia", 2250.0),
                                        ("h100-sxm", "nvidia", 989.0)]) == "h100-sxm"
    assert nearest_part("nvidia", 989.0, []) is None
    assert load_gpu("xeon-8480").efficiency.sustained_fraction == 1.0


def test_a_user_gpu_file_keeps_the_uncalibrated_fraction(tmp_path: Path) -> None:
    data = yaml.safe_load((catalog_root("hardware") / "h200.yaml").read_text())
    data["name"] = "my-h200"
    path = tmp_path / "my-h200.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_gpu(str(path)).efficiency.sustained_fraction == 1.0


@pytest.mark.slow
def test_full_training_validation_simulates_every_complete_row() -> None:
    results = run_csv(SHARED)
    assert len(results) >= 44
    for r in results:
        assert r.status in ("ok", "infeasible", "unsupported")
        assert r.status == "ok" or r.reason
    assert summarize(results)["n"] >= 40


def test_a_row_whose_every_candidate_is_invalid_says_why() -> None:
    # T001 with TP 5 (24 heads): every micro-batch candidate fails the same plan check
    (row,) = [r for r in read_rows(SMALL) if r["case_id"] == "T001"]
    with pytest.raises(Unsupported, match="tp 5 does not divide num_heads 24"):
        map_row({**row, "tp": "5", "num_gpus": "40"})


# --- rows in their authors' words ----------------------------------------------------------

_PROSE_ROW = {"case_id": "P1", "source": "a DeepSpeed blog post", "model": "Llama-3-8B",
              "num_layers": "", "hidden_size": "", "num_heads": "",
              "gpu_type": "H100-SXM5-80GB", "num_gpus": "8", "tp": "", "pp": "not stated",
              "global_batch_size": "1M tokens", "seq_len": "8192", "zero_fsdp": "ZeRO stage 3",
              "tokens_per_s_per_gpu": "~8,000 tok/s/GPU", "precision": "bf16"}


def test_a_row_without_a_plan_gets_the_fastest_feasible_one() -> None:
    from codesign.api import simulate_run
    from codesign.search.search import search
    from codesign.validation.training_cases import map_row

    case = map_row(dict(_PROSE_ROW))
    (run,), = case.candidates
    # 1M tokens = 2^20 tokens = 128 sequences of 8,192; ZeRO-3 as written; DeepSpeed has no
    # TP-communication overlap; the catalog model stands in for the empty architecture
    assert run.parallel.global_batch_size == 128 and run.parallel.zero_stage == 3
    assert not run.parallel.tp_comm_overlap and run.model.name == "llama3-8b"
    assert case.measurement.value == 8000 * 8
    assert any(a.startswith("plan not stated") for a in case.assumptions)
    # the chosen plan is at least as fast as every plan of the same constraints the search
    # estimated (the engine confirms the best few)
    report = simulate_run(run)
    res = search(run, fixed={"zero_stage": 3, "tp_comm_overlap": False,
                             "overlap_grad_reduce": run.parallel.overlap_grad_reduce,
                             "overlap_param_gather": run.parallel.overlap_param_gather},
                 confirm=0, top_n=1)
    assert report.feasible and report.step_time_s is not None
    assert report.step_time_s <= res.candidates[0].estimate_step_time_s * 1.05


@pytest.mark.parametrize(("column", "value", "says"), [
    ("gpu_type", "Quantum Abacus 9000", "gpu_type 'Quantum Abacus 9000'"),
    ("num_gpus", "", "num_gpus"),
    ("global_batch_size", "lots", "global_batch_size 'lots'"),
    ("model", "Mystery-7B", "model 'Mystery-7B'"),
])
def test_a_row_that_cannot_run_names_its_column(column: str, value: str, says: str) -> None:
    from codesign.validation.training_cases import Unsupported, map_row

    with pytest.raises(Unsupported, match=re.escape(says)):
        map_row({**_PROSE_ROW, column: value})


def test_the_shipped_validation_set_is_the_published_one() -> None:
    """`codesign validate` with no argument runs the shipped copies; they are the shared
    published rows unchanged (compared when the shared set is beside the checkout)."""
    from codesign.cli.validate_cmd import shipped_validation_files

    files = shipped_validation_files()
    assert [f.name for f in files] == ["training_cases.csv", "inference_cases.csv"]
    assert all(f.is_file() for f in files)
    shared = Path(__file__).resolve().parents[2] / "shared" / "validation"
    for f in files:
        if (shared / f.name).is_file():
            assert f.read_bytes() == (shared / f.name).read_bytes()


def test_a_batch_that_does_not_split_over_dp_is_rounded() -> None:
    from codesign.validation.training_cases import map_row

    row = {**_PROSE_ROW, "tp": "2", "pp": "1", "dp": "4", "global_batch_size": "29",
           "seq_len": "2048", "zero_fsdp": "distributed optimizer"}
    case = map_row(row)
    run = case.candidates[0][0]
    assert run.parallel.global_batch_size == 28  # nearest multiple of dp 4 to 29
    assert any("not a multiple of dp 4: 28" in a for a in case.assumptions)


def test_no_batch_means_one_sequence_per_gpu() -> None:
    from codesign.validation.training_cases import map_row

    case = map_row({**_PROSE_ROW, "tp": "2", "pp": "1", "global_batch_size": ""})
    assert case.candidates[0][0].parallel.global_batch_size == 8
    assert any("one sequence per GPU" in a for a in case.assumptions)


def test_no_batch_with_a_stated_micro_batch_is_whole_micro_batches() -> None:
    """A row that states its micro-batch (2) but no batch: one sequence per GPU (8) would be
    half a micro-batch per replica on dp 8, so the batch is one micro-batch of 2 on each of
    the 8 replicas (16); with an interleaved schedule stated (pp 2, vpp 2) the count per
    replica is raised to a multiple of pp."""
    from codesign.validation.training_cases import map_row

    row = {**_PROSE_ROW, "tp": "1", "pp": "1", "global_batch_size": "",
           "micro_batch_size": "2", "zero_fsdp": "distributed optimizer"}
    case = map_row(row)
    assert {r.parallel.global_batch_size for g in case.candidates for r in g} == {16}
    assert any("16 sequences" in a and "(1)" in a for a in case.assumptions)
    row = {**row, "pp": "2", "vpp": "2", "micro_batch_size": "2"}
    case = map_row(row)  # dp 4: 8 / (2 x 4) = 1 micro-batch, raised to pp = 2
    run = case.candidates[0][0]
    assert run.parallel.global_batch_size == 16
    assert run.parallel.global_batch_size // (2 * 4) % 2 == 0
    assert any("groups of pp 2" in a for a in case.assumptions)


def test_a_plan_stated_in_the_notes_is_the_plan() -> None:
    """Empty tp/pp cells, the plan in the authors' words: "TP=2, 2-way pipeline parallelism"
    is the stated plan (noted), not a searched one."""
    from codesign.validation.training_cases import map_row

    row = {**_PROSE_ROW, "tp": "", "pp": "", "global_batch_size": "64",
           "zero_fsdp": "distributed optimizer",
           "notes": "TP=2, 2-way pipeline parallelism, Megatron-LM"}
    case = map_row(row)
    runs = [r for g in case.candidates for r in g]
    assert {(r.parallel.tp, r.parallel.pp) for r in runs} == {(2, 2)}
    assert "tp 2 as the notes state (tp cell empty)" in case.assumptions
    assert "pp 2 as the notes state (pp cell empty)" in case.assumptions
    assert not any(a.startswith("plan not stated") for a in case.assumptions)


def test_runs_dated_before_2023_have_no_flash_attention() -> None:
    from codesign.validation.training_cases import map_row

    old = map_row({**_PROSE_ROW, "tp": "2", "pp": "1",
                   "source": "Black et al. 2022, GPT-NeoX-20B (DeepSpeed)"})
    new = map_row({**_PROSE_ROW, "tp": "2", "pp": "1", "source": "a DeepSpeed blog, 2024"})
    assert not old.candidates[0][0].parallel.flash_attention
    assert new.candidates[0][0].parallel.flash_attention


def test_tp_beyond_powers_of_two_when_the_gpu_count_needs_it() -> None:
    """48 GPUs = 3 x 16 and a batch of 16 sequences: the data-parallel size must divide 16, so
    TP x PP needs the factor 3; 16 layers give PP no factor 3, so only a TP of 3 or 6
    (dividing the 12 heads) fits, which the automatic powers-of-two TP values miss."""
    from codesign.api import build_run
    from codesign.search.choose import choose_plan

    model = tiny_model(num_layers=16, num_heads=12, hidden_size=768, ffn_hidden_size=3072)
    run = build_run(model=model, gpu="h100", num_gpus=48, global_batch_size=16)
    chosen, notes = choose_plan(run, {"global_batch_size": 16})
    assert chosen.parallel.tp in (3, 6)
    assert any("beyond powers of two" in n for n in notes)


_FP4_ROW = {"case_id": "F4", "source": "NVIDIA-NeMo/Megatron-Bridge performance summary",
            "model": "Llama-3-70B", "gpu_type": "GB200 (NVL72 rack)", "num_gpus": "64",
            "gpus_per_node": "72", "tp": "2", "pp": "4", "cp": "1", "vpp": "5",
            "global_batch_size": "256", "micro_batch_size": "1", "seq_len": "8192",
            "precision": "NVFP4", "tokens_per_s_per_gpu": "4864"}


def test_an_nvfp4_row_runs_fp4_gemms_where_the_part_has_them() -> None:
    from codesign.validation.training_cases import map_row

    case = map_row(dict(_FP4_ROW))
    p = case.candidates[0][0].parallel
    # Megatron-Core / Bridge default: every transformer layer in NVFP4
    assert (p.dtype, p.fp4_high_precision_first, p.fp4_high_precision_last) == ("fp4", 0, 0)
    assert any("first_last_layers_bf16 off" in a for a in case.assumptions)
    # the row's prose can keep layers in BF16 (the NVFP4 paper's recipe)
    stated = map_row({**_FP4_ROW, "notes": "first 2 and last 8 blocks in BF16"})
    q = stated.candidates[0][0].parallel
    assert (q.fp4_high_precision_first, q.fp4_high_precision_last) == (2, 8)
    # an H100 has no FP4 peak: the row runs its GEMMs in FP8 and says so
    h100 = map_row({**_FP4_ROW, "gpu_type": "H100-SXM5-80GB", "gpus_per_node": "8",
                    "tp": "4", "pp": "8"})
    assert h100.candidates[0][0].parallel.dtype == "fp8"
    assert any("no FP4 peak" in a for a in h100.assumptions)


def test_a_row_the_specs_refuse_is_a_row_not_the_end_of_the_run(tmp_path: Path) -> None:
    """A cell that makes the model invalid (a hidden size the heads do not divide) is reported
    on its row with the field named; the rows after it still run (inference and training)."""
    root = Path(__file__).parent.parent / "experiments" / "validation"
    for name, col in (("inference_cases.csv", "hidden_size"), ("training_cases.csv",
                                                               "hidden_size")):
        rows = list(csv.DictReader((root / name).open()))
        bad = {**rows[0], col: "8", "num_heads": rows[0]["num_heads"] or "64"}
        path = tmp_path / name
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows([bad, rows[1]])
        first, second = run_csv(path)
        assert first.status == "unsupported" and "hidden_size" in first.reason, first.reason
        assert second.status != "unsupported" or "hidden_size" not in second.reason


def test_a_stated_loss_stage_layout_balances_the_last_stage_and_says_so() -> None:
    (row,) = [r for r in read_rows(SMALL) if r["case_id"] == "T001"]
    row = {**row, "pp": "2", "num_gpus": "64"}
    plain = map_row(row)
    stated = map_row({**row, "notes": row.get("notes", "")
                      + "; account_for_loss_in_pipeline_split: true"})
    assert not any(r.parallel.balance_loss_stage for g in plain.candidates for r in g)
    assert all(r.parallel.balance_loss_stage for g in stated.candidates for r in g)
    assert any("LM head and loss" in a for a in stated.assumptions)


#: a row that gives its architecture in columns under a name no family list knows
_COLUMN_ROW = {"case_id": "C1", "source": "a vendor blog", "model": "Acme 16B",
               "num_layers": "32", "hidden_size": "4096", "num_heads": "32",
               "ffn_size": "14336", "vocab_size": "32000", "seq_len": "2048",
               "gpu_type": "H100-SXM5-80GB", "num_gpus": "8", "tp": "1", "pp": "1",
               "global_batch_size": "64", "micro_batch_size": "1", "zero_fsdp": "0",
               "tokens_per_s_per_gpu": "3000", "precision": "bf16"}


@pytest.mark.parametrize(("extra", "mlp", "says"), [
    ({}, "plain", None),
    ({"notes": "SwiGLU activation"}, "gated", "MLP stated: gated"),
    ({"notes": "GELU MLP, no SwiGLU"}, "plain", "MLP stated: plain"),
    ({"source": "AI-Hypercomputer/maxtext configs/tpu/v5e/README.md"}, "gated",
     "MLP not stated: gated (SwiGLU), the maxtext default"),
    ({"model": "OLMo-2 16B"}, "gated", None),
])
def test_a_column_built_model_reads_its_mlp(extra: dict[str, str], mlp: str,
                                            says: str | None) -> None:
    """The MLP of a model built from its columns: stated in prose, else the family of its
    name, else the framework's default (MaxText's base.yml is SwiGLU); the forward FLOPs per
    token of the MLP are 2 x h x ffn per weight matrix: three for a gated MLP, two for a
    plain one (closed form, 32 layers)."""
    from codesign.workload.training import model_flops_per_sequence_fwd

    case = map_row({**_COLUMN_ROW, **extra})
    run = case.candidates[0][0]
    assert run.model.mlp == mlp
    assert (says is None and not any("MLP" in a for a in case.assumptions)) or \
        says in case.assumptions
    other = run.model_copy(update={"model": run.model.model_copy(
        update={"mlp": "plain" if mlp == "gated" else "gated"})})
    diff = model_flops_per_sequence_fwd(run) - model_flops_per_sequence_fwd(other)
    per_matrix = 2 * 4096 * 14336 * 32 * 2048  # one h x ffn GEMM, all layers, one sequence
    assert diff == pytest.approx(per_matrix if mlp == "gated" else -per_matrix, rel=1e-9)


def test_conventional_ffn_widths() -> None:
    """4h plain; LLaMA's 2/3 x 4h rounded up to 256 gated (7B: 11,008; 65B: 22,016)."""
    from codesign.validation.training_cases import conventional_ffn

    assert conventional_ffn(4096, gated=False) == 16384
    assert conventional_ffn(4096, gated=True) == 11008
    assert conventional_ffn(8192, gated=True) == 22016


@pytest.mark.parametrize(("params_b", "want"), [("", 11008), ("6.7", 11008), ("9.0", None)])
def test_an_ffn_width_left_out_comes_from_the_parameter_count(params_b: str,
                                                              want: int | None) -> None:
    """No ffn_size: LLaMA-7B's shape (32 x 4096, SwiGLU, 32k vocabulary) gets the conventional
    gated width when params_B is absent or agrees (6.7B); a 9B count solves the width whose
    parameter count is 9B (independently: each gated MLP unit of width adds 3h parameters per
    layer)."""
    from codesign.workload.params import param_counts

    # a LLaMA-style name the catalog does not hold (LLaMA-7B itself is a catalog model)
    row = {**_COLUMN_ROW, "model": "LLaMA-style 7B", "ffn_size": "", "params_B": params_b}
    case = map_row(row)
    model = case.candidates[0][0].model
    if want is not None:
        assert model.ffn_hidden_size == want
        assert "ffn_size not given: 11008 (2/3 of 4h, LLaMA's gated width)" in case.assumptions
        return
    at_11008 = param_counts(model.model_copy(update={"ffn_hidden_size": 11008})).total
    solved = 11008 + (9.0e9 - at_11008) / (3 * 4096 * 32)
    assert abs(model.ffn_hidden_size - solved) <= 32  # rounded to 64
    assert any(a.startswith(f"ffn_size not given: {model.ffn_hidden_size}, the width")
               for a in case.assumptions)


def test_a_head_count_left_out_is_hidden_over_128() -> None:
    case = map_row({**_COLUMN_ROW, "num_heads": ""})
    assert case.candidates[0][0].model.num_heads == 4096 // 128
    assert any(a.startswith("num_heads not given: 32") for a in case.assumptions)


def test_a_searched_row_no_plan_fits_is_timed_at_the_smallest_memory_that_fits() -> None:
    """Llama 2 70B with ZeRO-1 on 16 A100-40GB fits no plan in codesign's memory estimate but
    some in a larger memory; the measured run fitted, so the fastest plan that fits the
    smallest larger memory is timed without the HBM check and says so: its estimate exceeds
    the part's HBM and stays within that factor of it. On 4 GPUs nothing fits even 4x (mixed-
    precision Adam's 16 bytes per parameter over 4 GPUs are 260 GiB each, over 4 x 40 GiB)
    and the row names why."""
    from codesign.validation.runner import run_case
    from codesign.validation.training_cases import MEMORY_DOUBT_FACTORS

    row = {"case_id": "D1", "source": "a blog, 2024", "model": "Llama-2-70B",
           "gpu_type": "A100-SXM4-40GB", "num_gpus": "16", "tp": "", "pp": "",
           "global_batch_size": "64", "seq_len": "4096", "tokens_per_s_per_gpu": "300",
           "precision": "bf16", "zero_fsdp": "ZeRO-1"}
    case = map_row(row)
    assert not case.memory_checked
    factor = next(f for f in MEMORY_DOUBT_FACTORS if f"fits {f:g}x that" in
                  " ".join(case.assumptions))
    (run,) = case.candidates[0]
    assert run.gpu.memory_bytes == load_gpu("a100-40gb").memory_bytes  # the real part
    checked = simulate_run(run)
    assert not checked.feasible and "out of memory" in (checked.reason or "")
    need = (checked.memory_gib or {})["total"] * 2**30
    assert run.gpu.memory_bytes < need <= factor * run.gpu.memory_bytes
    assert run_case(case).status == "ok"
    with pytest.raises(Unsupported, match="no plan fits"):
        map_row({**row, "num_gpus": "4"})


def test_a_stated_head_dimension_shapes_the_attention() -> None:
    """hidden 4096, 128 heads of 256 (a 32,768-wide query, MaxText's Trillium MoE): the
    attention core's forward FLOPs per sequence are 4 x s^2 x heads x head_dim per layer
    (QK^T and PV over the full score matrix, codesign's convention; the causal kernel's
    skipped half is priced in its time), eight times what hidden/heads = 32 gives."""
    from codesign.workload.training import build_training_graph

    row = {**_COLUMN_ROW, "num_heads": "128", "notes": "head_dim 256"}
    case = map_row(row)
    run = case.candidates[0][0]
    assert run.model.head_dim == 256
    assert any(a.startswith("head dimension stated: 256") for a in case.assumptions)
    graph = build_training_graph(run)
    attn = next(o for o in graph.chunks[0].forward if o.kind == "attention")
    assert attn.flops == pytest.approx(4 * 2048**2 * 128 * 256, rel=1e-9)
    plain = build_training_graph(map_row({**row, "notes": ""}).candidates[0][0])
    assert attn.flops == pytest.approx(8 * next(
        o for o in plain.chunks[0].forward if o.kind == "attention").flops, rel=1e-9)
