"""Names as people write them (tests/data/name_corpus.yaml: public model cards, MLPerf tables,
papers, cloud docs) resolve to the catalog entry they mean, or fail naming the closest."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codesign.errors import SpecError
from codesign.specs.catalog import (
    catalog_entries,
    catalog_names,
    load_gpu,
    load_model,
    resolve_system,
)

CORPUS = yaml.safe_load((Path(__file__).parent / "data" / "name_corpus.yaml").read_text())


def test_corpus_has_at_least_100_spellings() -> None:
    assert sum(len(v) for v in CORPUS.values()) >= 100


@pytest.mark.parametrize("case", CORPUS["gpus"], ids=lambda c: c[0])
def test_gpu_spellings(case: list[str]) -> None:
    text, gpu, *topo = case
    r = resolve_system(text)
    assert r.gpu == gpu
    if topo:
        assert r.topology == topo[0]
    assert load_gpu(text).name == gpu  # the same resolver behind every load


#: spellings of the parts and instances added for published runs beyond the corpus file:
#: [text, catalog GPU, topology the text names (None: none)]. Sources: NVIDIA A100 datasheet
#: and nvidia-smi ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"); AMD Instinct MI210; AWS Neuron
#: architecture docs (Trainium/Trn1, Trainium2/Trn2, trn1.32xlarge, trn1n.32xlarge,
#: trn2.48xlarge, trn2u.48xlarge, Trn2 UltraServer / u-trn2x64); Cloud TPU7x docs ("TPU7x",
#: "Ironwood", tpu7x-N accelerator types); Google Cloud machine series (A3 High/Mega/Edge: H100,
#: A3 Ultra: H200, A4: B200, A4X: GB200, A4X Max: GB300)
NEW_SPELLINGS: list[tuple[str, str, str | None]] = [
    ("A100 80GB PCIe", "a100-80gb-pcie", None),
    ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie", None),
    ("A100-PCIE-80GB", "a100-80gb-pcie", None),
    ("NVIDIA A100-PCIE-80GB", "a100-80gb-pcie", None),
    ("A100 PCIe", "a100-80gb-pcie", None),
    ("A100 PCIe 80GB", "a100-80gb-pcie", None),
    ("MI210", "mi210", None),
    ("AMD Instinct MI210", "mi210", None),
    ("AMD MI210", "mi210", None),
    ("MI210 PCIe", "mi210", None),
    ("Trainium", "trainium", None),
    ("AWS Trainium", "trainium", None),
    ("Trn1", "trainium", None),
    ("Trainium2", "trainium2", None),
    ("AWS Trainium2", "trainium2", None),
    ("Trainium 2", "trainium2", None),
    ("Trn2", "trainium2", None),
    ("trn1.32xlarge", "trainium", "aws-trn1"),
    ("AWS trn1.32xlarge", "trainium", "aws-trn1"),
    ("trn1n.32xlarge", "trainium", "aws-trn1n"),
    ("trn2.48xlarge", "trainium2", "aws-trn2"),
    ("trn2u.48xlarge", "trainium2", "aws-trn2-ultraserver"),
    ("Trn2 UltraServer", "trainium2", "aws-trn2-ultraserver"),
    ("u-trn2x64", "trainium2", "aws-trn2-ultraserver"),
    ("TPU v7", "tpu-v7", None),
    ("Ironwood", "tpu-v7", None),
    ("TPU7x", "tpu-v7", None),
    ("Google TPU v7 Ironwood", "tpu-v7", None),
    ("tpu7x-256", "tpu-v7", None),
    ("A3 Mega", "h100-sxm", None),
    ("A3 High", "h100-sxm", None),
    ("A3 Edge", "h100-sxm", None),
    ("A3 Ultra", "h200", None),
    ("A4", "b200", None),
    ("A4X", "gb200", None),
    ("A4X Max", "gb300", None),
    ("a4x-maxgpu-4g-metal", "gb300", None),
]


@pytest.mark.parametrize(("text", "gpu", "topo"), NEW_SPELLINGS)
def test_new_part_spellings(text: str, gpu: str, topo: str | None) -> None:
    r = resolve_system(text)
    assert (r.gpu, r.topology) == (gpu, topo)
    assert load_gpu(text).name == gpu


@pytest.mark.parametrize("text", ["A100 PCIe 40GB", "A100-PCIE-40GB"])
def test_a_memory_size_the_pcie_a100_does_not_hold_is_an_error(text: str) -> None:
    """The catalog holds the 80 GB A100 PCIe only: a 40 GB card is not read as it."""
    with pytest.raises(SpecError, match="does not match"):
        resolve_system(text)


@pytest.mark.parametrize(("text", "word"), CORPUS["gpu_errors"])
def test_gpu_errors(text: str, word: str) -> None:
    with pytest.raises(SpecError, match=word):
        resolve_system(text)


@pytest.mark.parametrize(("text", "name"), CORPUS["models"])
def test_model_spellings(text: str, name: str) -> None:
    assert load_model(text).name == name


@pytest.mark.parametrize("text", CORPUS["model_errors"])
def test_model_errors(text: str) -> None:
    with pytest.raises(SpecError, match="unknown model"):
        load_model(text)


def test_errors_list_the_closest_names() -> None:
    with pytest.raises(SpecError, match="closest: v100-"):
        load_gpu("V100 PCIe")
    with pytest.raises(SpecError, match=r"closest: .*llama2-70b"):
        load_model("llama2-75b-chat")


@pytest.mark.parametrize("kind", ["hardware", "workloads"])
def test_every_entry_resolves_to_itself(kind: str) -> None:
    load = load_gpu if kind == "hardware" else load_model
    for _, data in catalog_entries(kind):  # type: ignore[arg-type]
        for name in [data["name"], *data.get("aliases", [])]:
            assert load(str(name)).name == data["name"], name


def test_a_very_long_name_is_an_error_not_a_crash() -> None:
    with pytest.raises(SpecError, match="unknown gpu"):
        load_gpu("h" * 300)
    assert "h100-sxm" in catalog_names("hardware")


def test_a_generation_is_read_as_its_flagship_with_the_assumption_stated() -> None:
    r = resolve_system("NVIDIA Hopper")
    assert r.gpu == "h100-sxm"
    assert any("architecture generation" in n and "ASSUMPTION" in n for n in r.notes)
    # a part named beside the generation wins over the generation's flagship
    assert resolve_system("Hopper H20").gpu == "h20"
    assert resolve_system("Blackwell B300").gpu == "b300"
