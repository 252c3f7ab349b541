"""Row cells as their authors wrote them: every phrasing of tests/data/prose_phrasings.yaml
(collected from papers, framework docs, MLPerf and model cards) and its reading."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from codesign.validation import prose

DATA = yaml.safe_load((Path(__file__).parent / "data" / "prose_phrasings.yaml").read_text())


def test_the_corpus_has_at_least_150_phrasings() -> None:
    assert sum(len(v) for v in DATA.values()) >= 150


@pytest.mark.parametrize(("text", "stage"), DATA["zero"])
def test_zero(text: str, stage: int | None) -> None:
    reading = prose.read_zero(text)
    assert reading is not None, text
    assert reading[0] == stage, (text, reading)
    assert reading[1]  # every reading says what it assumed


@pytest.mark.parametrize("text", DATA["zero_unstated"])
def test_zero_unstated(text: str) -> None:
    assert prose.read_zero(text) is None


@pytest.mark.parametrize(("text", "value"), DATA["number"])
def test_number(text: str, value: float) -> None:
    n = prose.read_number(text)
    assert n is not None and n.value == pytest.approx(value), text


def test_qualified_numbers_say_so() -> None:
    for text in ("~400", "up to 420", "> 400", "380-400"):
        n = prose.read_number(text)
        assert n is not None and n.notes, text
    n = prose.read_number("400")
    assert n is not None and n.notes == ()


@pytest.mark.parametrize("text", DATA["number_none"])
def test_no_number(text: str) -> None:
    assert prose.read_number(text) is None


@pytest.mark.parametrize(("text", "seconds"), DATA["seconds"])
def test_seconds(text: str, seconds: float) -> None:
    n = prose.read_seconds(text)
    assert n is not None and n.value == pytest.approx(seconds), text


@pytest.mark.parametrize(("text", "seqs"), DATA["batch"])
def test_batch_at_2048(text: str, seqs: int) -> None:
    got = prose.read_global_batch(text, 2048)
    assert got is not None and got[0] == seqs, (text, got)
    if "token" in text:
        assert any("in tokens" in n for n in got[1])


@pytest.mark.parametrize(("text", "seqs"), DATA["batch_4096"])
def test_batch_at_4096(text: str, seqs: int) -> None:
    got = prose.read_global_batch(text, 4096)
    assert got is not None and got[0] == seqs, (text, got)


@pytest.mark.parametrize("text", DATA["recompute_unstated"])
def test_recompute_unstated(text: str) -> None:
    assert prose.read_recompute(text) is None


@pytest.mark.parametrize(("text", "layers"), DATA["recompute_layers"])
def test_recompute_layers(text: str, layers: int) -> None:
    assert prose.read_recompute_layers(text) == layers, text
    assert prose.read_recompute(text) == "full", text  # a layer count means full recompute


@pytest.mark.parametrize("text", DATA["recompute_layers_unstated"])
def test_recompute_layers_unstated(text: str) -> None:
    assert prose.read_recompute_layers(text) is None, text


@pytest.mark.parametrize("text", DATA["switch_unstated"])
def test_switch_unstated(text: str) -> None:
    assert prose.read_switch(text) is None


@pytest.mark.parametrize(("text", "want"), DATA["interleave"])
def test_interleave(text: str, want: list[Any]) -> None:
    assert list(prose.read_interleave(text)) == want, text


@pytest.mark.parametrize(("text", "gbps"), DATA["network"])
def test_network(text: str, gbps: float | None) -> None:
    got = prose.read_nic_gbps(text, 8)
    assert (got[0] if got else None) == gbps, text


@pytest.mark.parametrize(("text", "gbps"), DATA["network_notes"])
def test_network_notes(text: str, gbps: float | None) -> None:
    """A rate in a clause naming the scale-out fabric is the network; a server's own links
    (NVLink, NVSwitch) or a rate with no fabric named are not."""
    got = prose.read_network_prose(text, 8)
    assert (got[0] if got else None) == gbps, text


@pytest.mark.parametrize(("text", "tokens"), DATA["seq_len"])
def test_seq_len(text: str, tokens: int | None) -> None:
    """Context lengths are binary: "4K" is 4,096 tokens, "128K" 131,072 (model cards)."""
    got = prose.read_seq_len(text)
    assert (got[0] if got else None) == tokens, text
    if got:  # a K/M suffix read says so; a plain count needs no note
        assert (got[1] is not None) == bool(re.search(r"\d\s*[kKmM]", text)), text


def test_nearby_batches_widest_dp_first_within_ten_percent() -> None:
    """OPT-175B: "2M tokens" (1,024 sequences) on 992 GPUs at TP 8 leaves dp 124: 1,024 / 124
    = 8.26 -> 8 x 124 = 992 (-3.1%); DBRX-like 2,048 sequences on 3,072 GPUs: dp 3,072 and
    1,536 are more than 10% off, 1,024 and 512 divide (not a rounding), 768 -> 2,304 (+12.5%),
    384 -> 5 x 384 = 1,920 (-6.25%) is the widest within 10%."""
    assert prose.nearby_batches(1024, 124)[0] == (124, 992)
    assert prose.nearby_batches(2048, 3072)[0] == (384, 1920)
    assert all(abs(b - 2048) <= 204.8 and b % dp == 0 and b != 2048
               for dp, b in prose.nearby_batches(2048, 3072))
    assert prose.nearby_batches(2048, 1024) == []  # every power-of-two dp divides 2,048


@pytest.mark.parametrize(("text", "want"), DATA["other_metric"])
def test_other_measured(text: str, want: list[object] | None) -> None:
    """A free-text measurement cell reads as the quantity and value it states."""
    assert prose.read_other_metric(text) == (tuple(want) if want else None), text


#: readers whose reading is one value per phrasing: the corpus key -> the reader
READERS = {
    "recompute": prose.read_recompute,
    "recompute_prose": prose.read_recompute_prose,
    "switch": prose.read_switch,
    "ep_overlap": prose.read_ep_overlap,
    "overlap_comm": prose.read_overlap_comm,
    "hierarchical_zero3": prose.read_hierarchical_zero3,
    "tp_overlap": prose.read_tp_overlap,
    "grad_reduce": prose.read_grad_reduce_in_fp32,
    "dispatcher": prose.read_dispatcher,
    "precision": prose.read_precision,
    "attention_kernel": prose.read_attention_kernel,
    "fp8_recipe": prose.read_fp8_recipe,
    "fp4_high_precision_layers": prose.read_fp4_high_precision_layers,
    "expert_tp": prose.read_expert_tp,
    "pointwise_kernels": prose.read_pointwise_kernels,
    "block_layout": prose.read_block_layout,
    "loss_stage": prose.read_loss_stage,
    "mlp_kind": prose.read_mlp_kind,
    "remat_policy": prose.read_remat_policy,
    "recompute_modules": prose.read_recompute_modules,
    "head_dim": prose.read_head_dim,
    "sliding_window": prose.read_sliding_window,
}


@pytest.mark.parametrize(("key", "text", "want"),
                         [(key, text, want) for key in READERS for text, want in DATA[key]])
def test_reading(key: str, text: str, want: object) -> None:
    """Each phrasing reads as the corpus says: the same value and type (a switch reads
    True / False / None, never 1 or 0; a YAML list stands for a tuple)."""
    got = READERS[key](text)
    want = tuple(want) if isinstance(want, list) else want
    assert got == want and type(got) is type(want), (key, text, got)


@pytest.mark.parametrize(("text", "col", "degree"), [
    ("TP=8, PP=4", "tp", 8),
    ("TP=8, PP=4", "pp", 4),
    ("tp: 2", "tp", 2),
    ("8-way tensor parallelism", "tp", 8),
    ("tensor parallel 4", "tp", 4),
    ("16-way zero-bubble pipeline parallelism, 8-way expert parallelism, no tensor parallel",
     "pp", 16),
    ("16-way zero-bubble pipeline parallelism, 8-way expert parallelism, no tensor parallel",
     "ep", 8),
    ("16-way zero-bubble pipeline parallelism, 8-way expert parallelism, no tensor parallel",
     "tp", 1),
    ("without pipeline parallelism", "pp", 1),
    ("pipeline parallel degree 12", "pp", 12),
    ("context parallel size 2", "cp", 2),
    ("expert parallelism of 8", "ep", 8),
    ("ETP 1, EP 8", "ep", 8),
    # not the degree asked for: expert TP is not TP, a virtual pipeline is not PP
    ("ETP 1, EP 8", "tp", None),
    ("expert tensor parallel size 2", "tp", None),
    ("vpp 4", "pp", None),
    ("virtual pipeline 8", "pp", None),
    ("8-way virtual pipeline", "pp", None),
    ("step 1 of 8-way data parallel", "tp", None),
    ("MLPerf v4.0", "pp", None),
    # Megatron's argument names, and model parallelism with no pipeline (TP)
    ("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4", "tp", 8),
    ("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4", "pp", 4),
    ("expert_model_parallel_size=64", "ep", 64),
    ("expert_model_parallel_size=64", "tp", None),
    ("12-way model parallelism, 256-way data parallelism per pod", "tp", 12),  # PaLM
    ("--model-parallel-size 2", "tp", 2),  # Megatron-LM before pipelining, GPT-NeoX
    ("8-way pipeline and 64-way model parallelism", "tp", None),  # MP = TP x PP here
])
def test_read_degree(text: str, col: str, degree: int | None) -> None:
    from codesign.validation.prose import read_degree

    assert read_degree(text, col) == degree


@pytest.mark.parametrize(("text", "reading"), DATA["packing"])
def test_packing(text: str, reading: list[Any]) -> None:
    assert list(prose.read_packing(text)) == reading, text


@pytest.mark.parametrize(("text", "want"), DATA["schedule"])
def test_pipeline_schedule(text: str, want: str | None) -> None:
    assert prose.read_pipeline_schedule(text) == want, text
