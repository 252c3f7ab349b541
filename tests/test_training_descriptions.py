"""Training rows as people write them (issue 12): papers, READMEs, MLPerf results and blog
posts, each mapped to its GPU, system, framework and plan, and every one simulated.

tests/data/training_descriptions.csv holds 55 rows phrased after published runs (Megatron-LM
2019 to Nemotron-4, BLOOM, OPT, Llama 2/3, Falcon, torchtitan, DeepSeek-V2/V3, MLPerf GPT-3 and
Llama 2 70B LoRA, TPU v5p/v6e, MI300X, Gaudi 2/3, GH200, Megatron-Bridge's Kimi K2 and
Nemotron 3 Nano); their measured values are
placeholders (the source column says so), so only the mapping and feasibility are asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny_run

from codesign.api import simulate_run
from codesign.validation.runner import run_case, source_flops
from codesign.validation.training_cases import (
    PACKED_DOCUMENT_TOKENS,
    MappedCase,
    framework_of,
    iter_cases,
    map_row,
    measurement_of,
    read_rows,
    source_year,
)

DESCRIPTIONS = Path(__file__).parent / "data" / "training_descriptions.csv"

_ROW = {"case_id": "P1", "source": "a blog post, 2024", "model": "Llama-3-8B",
        "num_layers": "", "hidden_size": "", "num_heads": "", "gpu_type": "H100-SXM5-80GB",
        "num_gpus": "8", "tp": "1", "pp": "1", "global_batch_size": "64", "seq_len": "8192",
        "tokens_per_s_per_gpu": "8000", "precision": "bf16"}


@pytest.mark.parametrize(("source", "framework"), [
    ("torchtitan 2024, Llama 3 8B on 8 H100", "torchtitan"),
    ("NVIDIA 2024, Megatron-Core long context Llama 3 8B", "megatron-core"),
    ("NeMo performance summary, Llama 3 70B", "megatron-core"),
    ("Llama Team 2024, 'The Llama 3 Herd of Models'", "llama3"),
    ("Zhang et al. 2022, OPT-175B (Metaseq: FSDP + Megatron-LM TP)", "torchtitan"),
    ("MLPerf Training v4.0 gpt3, NVIDIA Eos", "megatron-core"),
])
def test_a_named_framework_beats_the_model_family(source: str, framework: str) -> None:
    """A Llama 3 model trained with torchtitan or NeMo is that framework's run; Meta's own
    stack (ZeRO-2 FSDP) only when no framework is named."""
    assert framework_of({**_ROW, "source": source, "model": "Llama 3 8B"}) == framework


def test_a_megatron_paper_cited_in_the_notes_is_not_the_framework() -> None:
    """"model and sequence parallelism (Korthikanti et al.)" in another stack's notes is a
    technique; the 2019-22 Megatron-LM papers set the framework only as the source."""
    row = {**_ROW, "source": "Touvron et al. 2023, LLaMA",
           "notes": "model and sequence parallelism as described by Korthikanti et al."}
    assert framework_of(row) == "megatron-core"
    assert framework_of({**row, "source": "Korthikanti et al. 2022"}) == "megatron-2021"


def test_a_tpu_run_takes_the_jax_stack_defaults() -> None:
    """A TPU runs a compiled JAX/XLA program: a row on one takes MaxText's defaults even when
    its source names neither the framework nor the chip; the same row on a GPU does not."""
    row = {**_ROW, "source": "a company blog, 2025", "model": "Gemma 7B"}
    assert framework_of({**row, "gpu_type": "TPU v5p-1024"}) == "maxtext"
    assert framework_of({**row, "gpu_type": "Cloud TPU v5e"}) == "maxtext"
    assert framework_of({**row, "gpu_type": "H100 SXM5 80GB"}) == "megatron-core"


def test_torchtitan_and_llm_foundry_default_to_no_tp_or_pp() -> None:
    """torchtitan's config defaults TP and PP to 1, llm-foundry trains with FSDP alone: a row
    of either that states neither runs TP 1, PP 1 (not a searched plan)."""
    for source, fw in (("torchtitan", "torchtitan"), ("llm-foundry", "mosaicml")):
        case = map_row({**_ROW, "source": source, "tp": "", "pp": "", "zero_fsdp": "FSDP"})
        par = case.candidates[0][0].parallel
        assert (par.tp, par.pp, par.zero_stage) == (1, 1, 3), fw
        assert f"tp not stated: 1 ({fw} default)" in case.assumptions


@pytest.mark.parametrize(("source", "micro"), [
    # torchtitan at 9dec370 (Dec 2024): the local batch in as many micro-batches as stages
    ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md", 4),
    # later torchtitan: pipeline_parallel_microbatch_size, default 1
    ("pytorch/torchtitan docs, 2025", 1),
])
def test_a_torchtitan_local_batch_is_split_into_pipeline_micro_batches(source: str,
                                                                       micro: int) -> None:
    """torchtitan states a per-DP-rank (local) batch: 512 GPUs as TP 8 x PP 8 x FSDP 8 with
    a global batch of 256 give a local batch of 32, which PP 8 splits further."""
    row = {**_ROW, "source": source, "model": "Llama 3 405B", "num_gpus": "512", "tp": "8",
           "pp": "8", "dp": "8", "global_batch_size": "256", "micro_batch_size": "32",
           "zero_fsdp": "FSDP2"}
    case = map_row(row)
    assert {r.parallel.micro_batch_size for g in case.candidates for r in g} == {micro}
    assert any("torchtitan's local batch" in a for a in case.assumptions)
    # a Megatron row's micro-batch is its micro-batch, however few micro-batches it leaves
    mega = map_row({**row, "source": "NVIDIA Megatron-LM README, 2024"})
    assert {r.parallel.micro_batch_size for g in mega.candidates for r in g} == {32}

def test_a_maxtext_per_device_batch_is_a_replica_batch_of_tp_devices() -> None:
    """MaxText's per_device_batch_size counts every device (global batch = per-device batch
    x devices, src/maxtext/configs/base.yml) and runs without gradient accumulation by
    default, so a TP-16 replica of 16 chips at per-device batch 1 runs 16 sequences at once:
    256 v5e chips as TP 16 x FSDP 16 with a global batch of 256 is one micro-batch of 16 per
    replica, not 16 micro-batches of one."""
    row = {**_ROW, "source": "AI-Hypercomputer/maxtext v5e README", "model": "Llama 2 70B",
           "gpu_type": "TPU v5e", "num_gpus": "256", "tp": "16", "pp": "1", "dp": "16",
           "global_batch_size": "256", "micro_batch_size": "1", "seq_len": "2048",
           "zero_fsdp": "FSDP(16)"}
    case = map_row(row)
    assert {r.parallel.micro_batch_size for g in case.candidates for r in g} == {16}
    assert any("per_device_batch_size" in a for a in case.assumptions)
    # without TP a device is a replica: the micro-batch is the one stated
    flat = map_row({**row, "tp": "1", "dp": "256", "micro_batch_size": "1"})
    assert {r.parallel.micro_batch_size for g in flat.candidates for r in g} == {1}
    # a batch that is not per-device x devices is a replica's micro-batch as written
    other = map_row({**row, "global_batch_size": "512"})
    assert {r.parallel.micro_batch_size for g in other.candidates for r in g} == {1}



@pytest.mark.parametrize(("source", "year"), [
    ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (commit 820504e2)", 2024),
    ("Narayanan et al. 2021, 'Efficient Large-Scale ...'", 2021),
    ("Llama Team 2024, (arXiv 2407.21783 v3)", 2024),
    ("arXiv 2407.21783", None),  # an arXiv number is not a year
    ("NeMo 24.07 container", None),
])
def test_the_year_a_source_names(source: str, year: int | None) -> None:
    assert source_year({"source": source}) == year


def test_seq_len_in_k_is_binary() -> None:
    case = map_row({**_ROW, "seq_len": "4K", "global_batch_size": "4M tokens"})
    run = case.candidates[0][0]
    # 4K = 4,096 tokens; 4M tokens = 2^22 tokens = 1,024 sequences of 4,096
    assert run.seq_len == 4096 and run.parallel.global_batch_size == 1024


def test_a_searched_plan_rounds_a_batch_no_replica_count_splits() -> None:
    """OPT-175B-like: "2M tokens" = 1,024 sequences of 2,048 on 992 GPUs with FSDP at TP 8,
    PP not stated (Megatron-Core defaults): no data-parallel size of 992 / 8 = 124 or its
    divisors except 1, 2, 4 splits 1,024, so the search takes the batch rounded to the
    widest data-parallel size first: 8 x 124 = 992."""
    row = {**_ROW, "source": "NeMo", "model": "GPT-3 175B", "num_gpus": "992", "tp": "8",
           "pp": "", "global_batch_size": "2M tokens", "seq_len": "2048",
           "gpu_type": "A100 80GB", "zero_fsdp": "FSDP"}
    case = map_row(row)
    par = case.candidates[0][0].parallel
    assert par.global_batch_size == 992 and par.tp == 8
    assert any("992 (the nearest multiple of dp 124)" in a for a in case.assumptions)


def test_ep_wider_than_dp_folds_with_expert_tp_one() -> None:
    """DeepSeek-V3 on 1,024 GPUs at TP 2, PP 16, EP 64: dp = 32 and tp x cp x dp = 64 ranks;
    EP 64 x ETP 2 = 128 does not divide 64, EP 64 x ETP 1 does (MoE parallel folding)."""
    row = {**_ROW, "source": "Megatron-Core MoE", "model": "DeepSeek-V3", "num_gpus": "1024",
           "tp": "2", "pp": "16", "ep": "64", "global_batch_size": "8192", "seq_len": "4096"}
    par = map_row(row).candidates[0][0].parallel
    assert (par.ep, par.expert_tp) == (64, 1)


@pytest.mark.parametrize(("source", "notes", "expected"), [
    # a Megatron-Bridge table (2025): ETP is tuned, so both the default (TP) and 1 are tried
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md", "", {2, 1}),
    ("NVIDIA NeMo performance summary, NeMo 25.04 container", "", {2, 1}),
    # before Megatron-Core 0.10 the experts' TP is the TP size
    ("NVIDIA NeMo performance summary, NeMo 24.07 container", "", {2}),
    # a stated size is kept
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md", "TP2 EP8 ETP2", {2}),
])
def test_an_unstated_expert_tp_is_the_faster_of_the_default_and_one(
        source: str, notes: str, expected: set[int]) -> None:
    """Qwen3-235B on 64 GPUs at TP 2, PP 4, EP 8: dp = 8, so ETP 2 (8 x 2 = 16 divides the 16
    tp x dp ranks) and ETP 1 both fit; a 2025 Megatron-Core run could set either."""
    row = {**_ROW, "source": source, "notes": notes, "model": "Qwen3-235B-A22B",
           "num_gpus": "64", "tp": "2", "pp": "4", "ep": "8", "global_batch_size": "64",
           "seq_len": "4096"}
    case = map_row(row)
    assert {r.parallel.expert_tp for group in case.candidates for r in group} == expected
    if len(expected) > 1:
        assert any("expert tensor parallelism not stated" in a for a in case.assumptions)
        assert any("etp 1" in n for n in case.candidate_notes)
    result = run_case(case)
    assert result.status == "ok"


def test_hardware_flops_cells_count_recompute() -> None:
    """An HFU column or a TFLOP/s cell saying "hardware FLOPs" is compared with the FLOPs the
    hardware ran (recompute included); Megatron-LM 2021 rows keep the paper's eq. (3)."""
    assert measurement_of({**_ROW, "tokens_per_s_per_gpu": "", "hfu_pct": "~52"},
                          "megatron-core").flop_formula == "hardware"
    m = measurement_of({**_ROW, "tokens_per_s_per_gpu": "",
                        "tflops_per_gpu": "117 (hardware FLOPs)"}, "deepspeed")
    assert (m.metric, m.value, m.flop_formula) == ("tflops_per_gpu", 117, "hardware")
    assert measurement_of({**_ROW, "tokens_per_s_per_gpu": "", "mfu_pct": "45%"},
                          "megatron-core").flop_formula == "model"
    assert measurement_of({**_ROW, "tokens_per_s_per_gpu": "", "tflops_per_gpu": "140"},
                          "megatron-2021").flop_formula == "megatron-recompute"
    # Megatron-DeepSpeed logs the same formula (BLOOM's "150 TFLOPs"); plain DeepSpeed does not
    assert measurement_of({**_ROW, "tokens_per_s_per_gpu": "", "tflops_per_gpu": "150",
                           "source": "BigScience 2022, BLOOM-176B (Megatron-DeepSpeed)"},
                          "deepspeed").flop_formula == "megatron-recompute"
    assert measurement_of({**_ROW, "tokens_per_s_per_gpu": "", "tflops_per_gpu": "150",
                           "source": "a DeepSpeed ZeRO-3 blog post"},
                          "deepspeed").flop_formula == "model"


@pytest.mark.parametrize(("recompute", "passes"), [("full", 4), ("selective", 4), ("none", 3)])
def test_megatrons_logged_flops_count_a_fourth_pass_under_recompute(recompute: str,
                                                                    passes: int) -> None:
    """Eq. (3) of Narayanan et al. 2021 as Megatron-DeepSpeed logs it:
    24·passes·B·s·l·h²·(1 + s/6h + V/16lh), by hand for a tiny model."""
    run = tiny_run(num_gpus=1, global_batch_size=2, recompute=recompute)
    b, s, layers, h, v = 2, 128, 4, 256, 1000
    expected = 24 * passes * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert source_flops(run, "megatron-recompute") == pytest.approx(expected, rel=1e-12)


def test_a_run_that_does_not_fit_names_the_row_cells() -> None:
    """Llama 2 70B trained in full on 8 H100 at TP 4, CP 2 (dp 1): weights, gradients and
    optimizer states of 70B / 4 parameters exceed 80 GB whatever the micro-batch; the reason
    names the cells that fixed it."""
    row = {**_ROW, "model": "Llama 2 70B", "tp": "4", "cp": "2", "global_batch_size": "8",
           "notes": "MLPerf, full fine-tuning"}
    case = map_row(row)
    result = run_case(case)
    assert result.status == "infeasible"
    assert "out of memory" in result.reason
    assert all(c in result.reason for c in ("num_gpus='8'", "tp='4'", "pp='1'", "cp='2'"))


def test_a_measured_run_whose_activations_exceed_the_estimate_is_still_timed() -> None:
    """Llama 3 8B on 8 H100 under FSDP, micro-batch 8 of 8k tokens, no recompute: the model
    states (16 B/param / 8 ranks = 15 GB) fit, the activation estimate does not. The row was
    measured, so it ran: timed as stated, with the estimate reported; the time is the one
    the engine gives the same plan without the memory check."""
    row = {**_ROW, "zero_fsdp": "FSDP", "micro_batch_size": "8", "activation_recompute": "none"}
    case = map_row(row)
    (run,) = case.candidates[0]
    assert not simulate_run(run).feasible
    result = run_case(case)
    assert result.status == "ok"
    assert any(a.startswith("memory estimate exceeds HBM") for a in result.assumptions)
    unchecked = simulate_run(run, memory_check=False)
    assert unchecked.step_time_s is not None
    tokens = int(row["global_batch_size"]) * int(row["seq_len"])
    assert result.predicted == pytest.approx(tokens / unchecked.step_time_s, rel=1e-9)


@pytest.mark.parametrize(("notes", "rank"), [
    ("MLPerf, LoRA fine-tuning", 16),  # not stated: the MLPerf reference's --lora_r 16
    ("MLPerf, LoRA rank 8", 8),
    ("MLPerf, QLoRA r=32", 32),
    ("MLPerf, full fine-tuning", None),
])
def test_a_lora_row_maps_to_lora_and_fits(notes: str, rank: int | None) -> None:
    """The same row as LoRA fine-tuning: frozen weights (2 B/param) and adapter states only,
    so 70B / 4 fits 80 GB; the rank is the row's or the MLPerf reference's 16 (noted)."""
    row = {**_ROW, "model": "Llama 2 70B", "tp": "4", "cp": "2", "global_batch_size": "8",
           "notes": notes}
    case = map_row(row)
    assert {r.parallel.lora_rank for group in case.candidates for r in group} == {rank}
    if rank is None:
        return
    assert any(a.startswith("LoRA fine-tuning") and str(rank) in a for a in case.assumptions)
    assert run_case(case).status == "ok"


def test_a_lora_row_without_a_plan_keeps_lora_and_tries_each_tp() -> None:
    """The plan search does not price LoRA, so a LoRA row without TP/PP is mapped as stated
    plans at each TP of 1, 2, 4, 8 with PP 1, LoRA kept. Llama 2 70B on 8 GPUs of 80 GB: as
    full training (16 B/param over ZeRO-1's 8 ranks of the optimizer alone, ~85 GB of bf16
    weights and gradients at TP 1) nothing fits; as LoRA the frozen 2 B/param weights fit
    at TP 2 and up. The reported run is the fastest feasible one of its group."""
    row = {**_ROW, "model": "Llama 2 70B", "tp": "", "pp": "", "num_gpus": "8",
           "global_batch_size": "8", "zero_fsdp": "distributed optimizer", "notes": "LoRA"}
    case = map_row(row)
    runs = [r for group in case.candidates for r in group]
    assert {r.parallel.lora_rank for r in runs} == {16}
    assert {r.parallel.tp for r in runs} == {1, 2, 4, 8}
    assert {r.parallel.pp for r in runs} == {1}
    assert any("plan not stated (LoRA" in a and "fastest of 1, 2, 4, 8" in a
               for a in case.assumptions)
    result = run_case(case)
    assert result.status == "ok"
    feasible = [(rep.step_time_s, r.parallel.tp) for r in case.candidates[0]
                if (rep := simulate_run(r)).feasible]
    assert feasible, "LoRA fits without recompute at some TP"
    assert min(t for _, t in feasible) >= 2  # TP 1: 140 GB of frozen weights do not fit
    assert any(f"tp {min(feasible)[1]}" == a for a in result.assumptions)


#: key rows: (framework, GPU, system) they must map to
_KEY_ROWS = {
    "R01": ("megatron-2021", "v100-32gb", "dgx-2"),
    "R03": ("deepspeed", "a100-80gb", "dgx-a100"),
    "R09": ("megatron-core", "a100-40gb", "aws-p4d"),
    "R13": ("torchtitan", "h100-sxm", "dgx-h100"),
    "R16": ("megatron-core", "h800", "dgx-h800"),
    "R23": ("megatron-core", "gb200", "gb200-nvl72"),
    "R25": ("megatron-core", "mi300x", "mi300x-cluster"),
    "R27": ("maxtext", "tpu-v5p", "tpu-v5p-pod"),
    "R31": ("deepspeed", "gaudi2", "gaudi2-hls"),
    "R32": ("deepspeed", "gaudi3", "gaudi3-hls"),
    "R33": ("megatron-core", "gh200", "quad-gh200"),
    "R44": ("llama3", "h100-sxm", "dgx-h100"),
    "R50": ("megatron-core", "a800-80gb", "dgx-a800"),
    "R54": ("megatron-core", "gb300", "gb300-nvl72"),
    "R55": ("megatron-core", "gb300", "gb300-nvl72"),
}


def test_every_training_description_simulates() -> None:
    """All 55 rows map and simulate (R24, MLPerf Llama 2 70B LoRA on 8 H100 at TP 4 CP 2, as
    LoRA fine-tuning: training every weight of 70B / 4 would not fit 80 GB); key rows map to
    the framework, GPU, system and plan their text states."""
    cases: dict[str, MappedCase] = {}
    for row, case in iter_cases(DESCRIPTIONS):
        assert not isinstance(case, str), (row["case_id"], case)
        assert row["source"].startswith("test row (hypothetical measurement")
        cases[row["case_id"]] = case
    assert len(cases) == 55
    results = {cid: run_case(case) for cid, case in cases.items()}
    failing = {cid: r.reason for cid, r in results.items() if r.status != "ok"}
    assert not failing, failing
    assert cases["R24"].candidates[0][0].parallel.lora_rank == 16
    for cid, (fw, gpu, system) in _KEY_ROWS.items():
        run = cases[cid].candidates[0][0]
        assert (cases[cid].framework, run.gpu.name, run.topology.name) == (fw, gpu, system), cid
    par = {cid: c.candidates[0][0].parallel for cid, c in cases.items()}
    runs = {cid: c.candidates[0][0] for cid, c in cases.items()}
    # BLOOM: TP 4, PP 12 (dp 8), ZeRO-1, micro-batch 2, as written
    assert (par["R03"].tp, par["R03"].pp, par["R03"].zero_stage,
            par["R03"].micro_batch_size) == (4, 12, 1, 2)
    # torchtitan 2D: FSDP2 shards fully (reshard after forward), TP 8
    assert (par["R13"].tp, par["R13"].zero_stage) == (8, 3)
    # seq "4K" / "32K" / "32,768", batch "4M tokens" of 4,096-token sequences
    assert (runs["R16"].seq_len, runs["R35"].seq_len, runs["R51"].seq_len) == (4096, 32768,
                                                                               32768)
    assert par["R08"].global_batch_size == 1024 and par["R35"].cp == 4
    # OLMo "4M tokens" = 2,048 sequences over 216 FSDP ranks: 9 x 216 = 1,944
    assert par["R40"].global_batch_size == 1944 and par["R40"].tp == 1
    # DeepSeek-V3 on H100, EP 64 over 32 replicas x TP 2: expert TP 1
    assert par["R46"].expert_tp == 1
    # Megatron-Bridge names its models as in its tables: catalog Kimi K2 (MLA, 384 experts)
    # and the hybrid Mamba-2 / MoE Nemotron 3 Nano
    assert (runs["R54"].model.name, runs["R55"].model.name) == ("kimi-k2",
                                                                "nemotron3-nano-30b-a3b")
    # fp8 where the precision cell says float8 / FP8 / amp_fp8
    assert all(par[c].dtype == "fp8" for c in ("R10", "R12", "R16", "R20", "R45"))
    assert cases["R49"].measurement.metric == "hfu_pct"
    # thousands separators: Nemotron-4 15B on "3,072" GPUs, hidden "6,144", vocab "256,000"
    m52 = runs["R52"].model
    assert (runs["R52"].num_gpus, m52.hidden_size, m52.ffn_hidden_size, m52.vocab_size,
            runs["R52"].seq_len) == (3072, 6144, 24576, 256000, 4096)
    assert runs["R53"].num_gpus == 256  # "~256"
    # interleaving depth in words: "vpp=12", "virtual pipeline 6"
    assert (par["R20"].vpp, par["R42"].vpp) == (12, 6)


@pytest.mark.parametrize(("cell", "gpus"), [
    ("64 nodes (512 GPUs)", 512), ("1,024 H100 GPUs", 1024), ("4096 chips", 4096), ("512", 512),
])
def test_gpu_counts_named_as_devices(cell: str, gpus: int) -> None:
    from codesign.validation.csvrows import device_count

    assert device_count({"num_gpus": cell}) == gpus


@pytest.mark.parametrize(("cell", "value"), [
    ("6,144", 6144), ("16,384 H100 GPUs", 16384), ("~1024", 1024), ("about 2048", 2048),
    ("8 (inferred)", 8), ("8, 16 in later runs", 8), ("1,2", 1), ("", None), ("n/a", None),
    ("TP=8", 8), ("PP 16", 16), ("vpp=5", 5),
])
def test_whole_number_cells(cell: str, value: int | None) -> None:
    """Whole-number columns read thousands separators, an approximation word and the
    degree's own name."""
    from codesign.validation.csvrows import int_cell

    assert int_cell({"c": cell}, "c") == value


@pytest.mark.parametrize(("notes", "kernels"), [
    ("eager (no torch.compile)", "eager"),
    ("compile false in config", "eager"),
    ("torch.compile + Float8", "fused"),
    ("", "fused"),  # unstated: fused kernels
])
def test_a_row_that_states_eager_mode_runs_eager_pointwise_kernels(notes: str,
                                                                  kernels: str) -> None:
    case = map_row({**_ROW, "source": "torchtitan", "zero_fsdp": "FSDP", "notes": notes})
    assert isinstance(case, MappedCase)
    assert {r.parallel.pointwise_kernels for g in case.candidates for r in g} == {kernels}
    assert any("eager" in a for a in case.assumptions) is (kernels == "eager")


@pytest.mark.parametrize(("cell", "notes", "kind"), [
    ("", "12-way model parallelism; parallel layers; rematerialization", "full"),
    ("not stated", "remat_policy: minimal", "selective"),
    ("selective", "rematerialization", "selective"),  # the cell wins
    ("", "force_recompute_fp8_weight_in_bwd", None),  # a Float8 option: not stated
])
def test_recompute_named_in_the_notes_is_the_rows(cell: str, notes: str,
                                                  kind: str | None) -> None:
    case = map_row({**_ROW, "source": "torchtitan", "zero_fsdp": "FSDP",
                    "activation_recompute": cell, "notes": notes})
    assert isinstance(case, MappedCase)
    kinds = {r.parallel.recompute for g in case.candidates for r in g}
    if kind is None:  # unstated: the least recompute that fits is tried, in order
        assert "recompute not stated: the least recompute that fits in HBM" in case.assumptions
    else:
        assert kinds == {kind}


@pytest.mark.parametrize(("source", "sp"), [
    ("Smith et al. 2022, MT-NLG 530B (DeepSpeed + Megatron)", False),  # before SP: off
    ("a DeepSpeed blog post, 2024", True),
])
def test_unstated_sequence_parallelism_follows_the_sources_era(source: str, sp: bool) -> None:
    case = map_row({**_ROW, "source": source, "tp": "8", "pp": "1", "sp": ""})
    assert isinstance(case, MappedCase)
    assert {r.parallel.sequence_parallel for g in case.candidates for r in g} == {sp}
    assert any(a.startswith("sequence parallel not stated: " + ("on" if sp else "off"))
               for a in case.assumptions)


@pytest.mark.parametrize(("notes", "parallel", "window"), [
    ("MegaScale: parallel transformer block (PTB), sliding window attention (window 1024)",
     True, 1024),
    ("PaLM-style parallel layers", True, None),
    ("sliding window attention with a 512-token window", False, 512),
    ("", False, None),
])
def test_a_row_that_states_its_block_layout_or_window_simulates_it(
        notes: str, parallel: bool, window: int | None) -> None:
    case = map_row({**_ROW, "notes": notes})
    assert isinstance(case, MappedCase)
    assert {(r.model.parallel_block, r.model.sliding_window)
            for g in case.candidates for r in g} == {(parallel, window)}
    assert any("block layout stated" in a for a in case.assumptions) is parallel
    assert any("sliding-window attention stated" in a for a in case.assumptions) is (
        window is not None)


def test_a_deepspeed_zero3_row_without_a_plan_is_searched_without_pipelining() -> None:
    """DeepSpeed's pipeline engine refuses ZeRO stages 2 and 3
    (deepspeed/runtime/pipe/engine.py), so a DeepSpeed ZeRO-3 row that states no TP/PP is
    searched at PP 1 (noted), TP and the micro-batch still free."""
    row = {**_ROW, "source": "DeepSpeed tutorial", "model": "Llama 2 13B", "tp": "",
           "pp": "", "num_gpus": "64", "global_batch_size": "256",
           "zero_fsdp": "DeepSpeed ZeRO stage 3", "notes": ""}
    case = map_row(row)
    assert {r.parallel.pp for group in case.candidates for r in group} == {1}
    assert {r.parallel.zero_stage for group in case.candidates for r in group} == {3}
    assert any("DeepSpeed's pipeline engine does not run ZeRO stage 3" in a
               for a in case.assumptions)


def test_deepspeed_pipeline_sends_are_partitioned_over_tp_and_blocking() -> None:
    """DeepSpeed's pipeline engine partitions each stage's output over the model-parallel
    ranks (``is_pipe_partitioned = is_model_parallel``) and sends it with a blocking
    ``p2p.send`` ("Doesn't support async_op true"): BLOOM-176B's Megatron-DeepSpeed row (TP 4,
    PP 12) runs scatter/gathered, blocking sends; a Megatron-Core row overlaps them."""
    rows = {r["case_id"]: r for r in read_rows(DESCRIPTIONS)}
    bloom = map_row(rows["R03"])
    assert bloom.framework == "deepspeed"
    runs = [r for group in bloom.candidates for r in group]
    assert runs and all(r.parallel.pp == 12 and r.parallel.tp == 4 for r in runs)
    assert all(r.parallel.pipeline_scatter_gather and not r.parallel.overlap_p2p for r in runs)
    mcore = map_row({**rows["R03"], "source": "a Megatron-Core run", "model": "dense 176B",
                     "zero_fsdp": "", "notes": ""})
    assert mcore.framework == "megatron-core"
    assert all(r.parallel.overlap_p2p for g in mcore.candidates for r in g)


def test_llama_saved_linear_outputs_are_gemm_output_recompute() -> None:
    """LLaMA (Touvron et al. 2023, Sec. 2.4) saves "the activations that are expensive to
    compute, such as the outputs of linear layers": selective recompute that keeps every GEMM
    output and re-runs the rest (JAX's dot-saving policy), stated, so every candidate run
    has it and it costs more than no recompute."""
    row = {**_ROW, "source": "Touvron et al. 2023, LLaMA", "tp": "2",
           "notes": "xformers causal attention; checkpointing saves expensive activations "
                    "(linear layer outputs)"}
    case = map_row(row)
    runs = [run for group in case.candidates for run in group]
    assert runs and all(r.parallel.recompute == "selective" for r in runs)
    assert all(r.parallel.selective_recompute == "gemm_outputs" for r in runs)
    assert any("gemm_outputs" in note for note in case.assumptions + sum(
        case.candidate_notes, ()))
    plain = map_row({**row, "notes": "xformers causal attention"})
    timed = simulate_run(runs[0])
    none = next(r for g in plain.candidates for r in g
                if r.parallel.recompute == "none"
                and r.parallel.micro_batch_size == runs[0].parallel.micro_batch_size)
    assert timed.breakdown_s.get("recompute", 0.0) > 0.0
    assert timed.step_time_s > simulate_run(none).step_time_s


def test_packed_fine_tuning_rows_attend_within_each_sample() -> None:
    """NeMo's fine-tuning table: "we use SQuAD-v1.1 dataset, and the inputs are packed to 4096
    tokens". Each packed sample attends only to itself, so every candidate run carries the
    sample length (the stated one, else the documented assumption) and is priced faster than
    the same plan with one document per sequence; a fine-tuning row that says nothing of
    packing, and a pretraining row that packs documents, keep one document per sequence."""
    row = {**_ROW, "source": "NVIDIA NeMo performance summary, NeMo 24.07",
           "seq_len": "4096", "notes": "SFT fine-tuning on SQuAD packed to 4096 tokens"}
    case = map_row(row)
    runs = [run for group in case.candidates for run in group]
    assert runs and all(r.parallel.document_tokens == PACKED_DOCUMENT_TOKENS for r in runs)
    assert any("ASSUMPTION" in n and "packed" in n for n in case.assumptions)
    stated = map_row({**row, "notes": "SFT with sequence packing, average sample length "
                                      "300 tokens"})
    assert all(r.parallel.document_tokens == 300 for g in stated.candidates for r in g)
    for notes in ("SFT fine-tuning on SQuAD", "pretraining, documents packed into "
                  "4096-token sequences"):
        plain = map_row({**row, "notes": notes})
        assert all(r.parallel.document_tokens is None for g in plain.candidates for r in g)
    one = runs[0].model_copy(update={"parallel": runs[0].parallel.model_copy(
        update={"document_tokens": None})})
    assert simulate_run(runs[0]).step_time_s < simulate_run(one).step_time_s



@pytest.mark.parametrize(("notes", "network", "topology", "nic_gbps", "rate_read"), [
    # BloombergGPT (arXiv 2303.17564): the instance and its EFA rate (the instance's own
    # 50 Gb/s per GPU, so no override) in the notes only
    ("ALiBi; 64 p4d.24xlarge; 400 Gbps EFA", "", "aws-p4d", 50.0, False),
    # the notes name a rate, the network cell is empty: the GPU's usual system at that rate
    ("each node with 8x 100 Gb/s InfiniBand", "", "dgx-a100-40gb", 100.0, True),
    # the network cell wins over the notes' rate (the notes still name the instance)
    ("64 p4d.24xlarge; 400 Gbps EFA", "8x 200Gb/s HDR InfiniBand per node", "aws-p4d", 200.0,
     False),
    # an instance of another part is not this row's system; an NVLink rate is not the network
    ("compared with p4de.24xlarge; NVLink 600 GB/s", "", "dgx-a100-40gb", 200.0, False),
])
def test_the_system_and_network_the_notes_name(notes: str, network: str, topology: str,
                                               nic_gbps: float, rate_read: bool) -> None:
    """A bare part in gpu_type runs on the system or cloud instance its notes name (when that
    instance holds this part), and an empty network cell takes the scale-out rate the notes
    state; both readings are reported."""
    row = {**_ROW, "gpu_type": "A100-SXM4-40GB", "num_gpus": "16", "gpus_per_node": "8",
           "notes": notes, "inter_node_network": network}
    case = map_row(row)
    run = case.candidates[0][0]
    assert (run.topology.name, run.topology.scale_out.nic_bandwidth_Gbps) == (topology,
                                                                              nic_gbps)
    said = " ".join(case.assumptions)
    assert ("system named in the notes: aws-p4d" in said) == (topology == "aws-p4d")
    assert ("(read from the notes)" in said) == rate_read


_PIPELINE_ROW = {**_ROW, "model": "Llama 3 405B", "num_gpus": "512", "tp": "8", "pp": "8",
                 "dp": "8", "global_batch_size": "256", "micro_batch_size": "32",
                 "zero_fsdp": "FSDP2", "vpp": ""}


@pytest.mark.parametrize(("source", "notes", "vpps"), [
    # torchtitan's defaults: 1F1B when no schedule is named, two stages per rank for a
    # multi-stage schedule (torchtitan/distributed/pipeline_parallel.py)
    ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md", "", {1}),
    ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md", "1F1B schedule", {1}),
    ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md",
     "Interleaved 1F1B schedule", {2}),
    # a Megatron row that names 1F1B runs no interleaving; one that names none is tuned over
    # the depths dividing Llama 3 70B's 10 layers per stage
    ("NVIDIA Megatron-LM README, 2024", "1F1B schedule", {1}),
    ("NVIDIA Megatron-LM README, 2024", "", {1, 2, 5}),
])
def test_a_named_pipeline_schedule_sets_the_interleaving(source: str, notes: str,
                                                         vpps: set[int]) -> None:
    """torchtitan's benchmark table runs Llama 3.1 405B on 512 GPUs (FSDP 8, TP 8, PP 8)
    with '1F1B' at 100 tokens/s/GPU and 'Interleaved 1F1B' at 128: the named schedule, not
    the fastest one, is the run (8 micro-batches on 8 stages: a 7/15 bubble for 1F1B)."""
    row = {**_PIPELINE_ROW, "source": source, "notes": notes}
    if "Megatron" in source:  # 32 micro-batches of 1 on 80 layers: interleavable
        row.update(model="Llama 3 70B", micro_batch_size="1")
    case = map_row(row)
    assert {r.parallel.vpp for g in case.candidates for r in g} == vpps


def test_a_gpipe_row_runs_the_gpipe_schedule() -> None:
    case = map_row({**_PIPELINE_ROW, "source": "NVIDIA Megatron-LM README, 2024",
                    "notes": "GPipe-style fill-drain pipeline"})
    runs = [r for g in case.candidates for r in g]
    assert {(r.parallel.vpp, r.parallel.pipeline_schedule) for r in runs} == {(1, "gpipe")}
    assert "pipeline schedule gpipe (as the row states): no interleaving" in case.assumptions


def _model(case: MappedCase):  # type: ignore[no-untyped-def]
    return case.candidates[0][0].model


def test_the_rows_columns_override_the_catalog_model_of_its_name() -> None:
    """A row naming a catalog model with its shape takes the catalog's details (MPT: ALiBi,
    tied embeddings) and the heads it states: llm-foundry's MPT-30B benchmark YAML runs 56
    heads of 128 where the released model has 64 of 112."""
    row = {**_ROW, "source": "mosaicml/llm-foundry benchmarking README", "model": "MPT-30B",
           "num_layers": "48", "hidden_size": "7168", "num_heads": "56", "num_kv_heads": "56",
           "ffn_size": "28672", "vocab_size": "50368", "seq_len": "2048",
           "zero_fsdp": "FSDP FULL_SHARD"}
    case = map_row(row)
    model = _model(case)
    assert (model.num_heads, model.dim_per_head, model.position_embedding) == (
        56, 128, "alibi")
    assert model.vocab_size == 50432  # 50,368 is the catalog's vocabulary written round
    assert "row's columns over the catalog entry: num_heads 56" in case.assumptions
    # the released shape states nothing new
    same = map_row({**row, "num_heads": "64", "num_kv_heads": "64"})
    assert _model(same).num_heads == 64
    assert not any("columns over" in a for a in same.assumptions)


def test_a_moe_row_keeps_the_catalog_widths() -> None:
    """A MoE row's ffn_size may be the dense or the expert width: the catalog's are kept."""
    row = {**_ROW, "model": "Mixtral-8x7B", "num_layers": "32", "hidden_size": "4096",
           "num_heads": "32", "num_kv_heads": "8", "ffn_size": "1024", "vocab_size": "32000",
           "tp": "1", "pp": "1", "num_gpus": "8", "ep": "8"}
    model = _model(map_row(row))
    assert model.moe is not None
    assert model.ffn_hidden_size == 14336
