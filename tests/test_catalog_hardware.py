"""Catalog GPUs and topologies: they load, cite sources, and match the sourced datasheet peaks."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest

from codesign.errors import SpecError
from codesign.specs.base import Spec
from codesign.specs.catalog import (
    _normalize,
    catalog_entries,
    catalog_names,
    load_gpu,
    load_topology,
)
from codesign.specs.gpu import GpuSpec
from codesign.specs.topology import FullFlatTopology, TwoTierTopology

SPECS_CSV = Path(__file__).resolve().parents[1] / "experiments/validation/hardware_specs.csv"

EXPECTED_GPUS = {"a100-80gb", "h100-sxm", "h200", "b200", "gb200", "mi300x"}
EXPECTED_TOPOLOGIES = {
    "dgx-a100",
    "dgx-h100",
    "dgx-h200",
    "dgx-b200",
    "gb200-nvl72",
    "mi300x-cluster",
    "fullflat-h100",
    "fullflat-gb200",
    "meta-h100-roce",
}

# hardware_specs.csv `hardware` column -> catalog GPU name.
CSV_TO_CATALOG = {
    "NVIDIA A100 80GB": "a100-80gb",
    "NVIDIA H100 80GB": "h100-sxm",
    "NVIDIA H200 141GB": "h200",
    "NVIDIA B200": "b200",
    "NVIDIA GB200 (Blackwell GPU in GB200 NVL72)": "gb200",
}

# The CSV rounds to datasheet precision (e.g. 989 vs 989.4 TFLOP/s), so compare to 0.1%.
REL = 1e-3

GPU_ENTRIES = catalog_entries("hardware")
TOPOLOGY_ENTRIES = catalog_entries("topologies")


def _ids(entries: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [fname for fname, _ in entries]


def _is_numeric(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, dict):
        return bool(value) and all(_is_numeric(v) for v in value.values())
    return isinstance(value, Spec)


def _numeric_fields(spec: Spec) -> set[str]:
    return {
        name
        for name in type(spec).model_fields
        if name not in ("sources", "aliases") and _is_numeric(getattr(spec, name))
    }


def _leading_number(cell: str) -> float | None:
    """'192 (180 usable ...)' -> 192.0; 'n/a' or '' -> None."""
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", cell or "")
    return float(match.group(1)) if match else None


def _csv_rows() -> dict[str, dict[str, str]]:
    # the published specs ship with the project (experiments/validation/), so no skip
    assert SPECS_CSV.is_file(), f"shipped hardware specs missing: {SPECS_CSV}"
    with SPECS_CSV.open(newline="") as fh:
        return {row["hardware"]: row for row in csv.DictReader(fh)}


def test_expected_entries_present() -> None:
    assert not EXPECTED_GPUS - set(catalog_names("hardware"))
    assert not EXPECTED_TOPOLOGIES - set(catalog_names("topologies"))


@pytest.mark.parametrize(("fname", "data"), GPU_ENTRIES, ids=_ids(GPU_ENTRIES))
def test_gpu_loads_and_cites_every_numeric_field(fname: str, data: dict[str, Any]) -> None:
    gpu = load_gpu(data["name"])
    assert isinstance(gpu, GpuSpec)
    missing = _numeric_fields(gpu) - set(gpu.sources)
    assert not missing, f"{fname}: no source for {sorted(missing)}"
    for field, citation in gpu.sources.items():
        assert citation.strip(), f"{fname}: empty citation for {field}"
        assert "TO BE REFINED" not in citation and "TODO" not in citation, (fname, field)
    # a half-precision peak: BF16, or FP16 standing in on parts without BF16 (V100)
    assert gpu.peak_flops("bf16") > 0


#: parts whose vendor documents an FP8 rate other than twice BF16: FP8 / BF16 as documented.
#: Gaudi 3's MMEs run FP8 at the BF16 rate (Intel white paper); Trainium runs cFP8 at its
#: 190 TFLOP/s BF16 rate and Trainium2 lists 1,299 FP8 against 667 BF16 TFLOP/s (AWS Neuron
#: architecture docs)
FP8_RATIO = {"gaudi3": 1.0, "trainium": 1.0, "trainium2": 1299 / 667}


@pytest.mark.parametrize(("fname", "data"), GPU_ENTRIES, ids=_ids(GPU_ENTRIES))
def test_fp8_is_twice_bf16(fname: str, data: dict[str, Any]) -> None:
    peaks = load_gpu(data["name"]).peak_tflops
    if data["name"] in FP8_RATIO:
        assert peaks["fp8"] == pytest.approx(FP8_RATIO[data["name"]] * peaks["bf16"], rel=REL)
        return
    if "fp8" in peaks:
        assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=REL), fname


@pytest.mark.parametrize(("fname", "data"), GPU_ENTRIES, ids=_ids(GPU_ENTRIES))
def test_default_topology_exists(fname: str, data: dict[str, Any]) -> None:
    gpu = load_gpu(data["name"])
    topo = load_topology(gpu.default_topology)
    assert topo.name == gpu.default_topology, fname


@pytest.mark.parametrize(("csv_name", "catalog_name"), sorted(CSV_TO_CATALOG.items()))
def test_gpu_matches_hardware_specs_csv(csv_name: str, catalog_name: str) -> None:
    rows = _csv_rows()
    assert csv_name in rows, f"{csv_name!r} not in {SPECS_CSV}"
    row = rows[csv_name]
    gpu = load_gpu(catalog_name)
    assert load_gpu(csv_name).name == catalog_name  # the CSV spelling is an alias

    for dtype, column in (("bf16", "bf16_dense_tflops"), ("fp8", "fp8_dense_tflops"),
                          ("fp4", "fp4_dense_tflops")):
        expected = _leading_number(row[column])
        if expected is None:
            assert dtype not in gpu.peak_tflops, f"{catalog_name}: CSV has no {dtype} peak"
        else:
            assert gpu.peak_tflops.get(dtype) == pytest.approx(expected, rel=REL), (
                f"{catalog_name} {dtype}"
            )

    capacity = _leading_number(row["hbm_capacity_GB"])
    bandwidth = _leading_number(row["hbm_bandwidth_TBps"])
    assert capacity is not None and bandwidth is not None
    assert gpu.hbm_capacity_GB == pytest.approx(capacity, rel=REL)
    assert gpu.hbm_bandwidth_TBps == pytest.approx(bandwidth, rel=REL)


@pytest.mark.parametrize(("fname", "data"), TOPOLOGY_ENTRIES, ids=_ids(TOPOLOGY_ENTRIES))
def test_topology_loads_and_cites_every_numeric_field(fname: str, data: dict[str, Any]) -> None:
    topo = load_topology(data["name"])
    assert isinstance(topo, (TwoTierTopology, FullFlatTopology))
    fields = _numeric_fields(topo)
    if "economics" not in data:  # the cited defaults of codesign.specs.economics
        fields.discard("economics")
    missing = fields - set(topo.sources)
    assert not missing, f"{fname}: no source for {sorted(missing)}"
    for field, citation in topo.sources.items():
        assert citation.strip(), f"{fname}: empty citation for {field}"
        assert "TO BE REFINED" not in citation and "TODO" not in citation, (fname, field)


@pytest.mark.parametrize(
    ("kind", "entries", "loader"),
    [("hardware", GPU_ENTRIES, load_gpu), ("topologies", TOPOLOGY_ENTRIES, load_topology)],
)
def test_aliases_resolve_to_own_entry_and_are_unique(kind, entries, loader) -> None:
    owner: dict[str, str] = {}
    for fname, data in entries:
        names = [Path(fname).stem, data["name"], *(data.get("aliases") or [])]
        for alias in names:
            assert loader(alias).name == data["name"], f"{kind}: {alias!r} -> wrong entry"
            key = _normalize(str(alias))
            assert owner.setdefault(key, fname) == fname, (
                f"{kind}: {alias!r} is shared by {owner[key]} and {fname}"
            )


@pytest.mark.parametrize(
    ("kind", "loader"), [("hardware", load_gpu), ("topologies", load_topology)]
)
def test_unknown_name_lists_allowed_names(kind, loader) -> None:
    with pytest.raises(SpecError) as excinfo:
        loader("no-such-entry-xyz")
    message = str(excinfo.value)
    assert "no-such-entry-xyz" in message and "allowed" in message
    for name in catalog_names(kind):
        assert name in message


def test_every_economics_default_states_its_source() -> None:
    """The economics defaults (component prices and powers, site settings) cite where each
    number comes from, or say it is an estimate or an assumption, in the field's
    description."""
    from codesign.specs.economics import Economics

    for name, info in Economics.model_fields.items():
        text = info.description or ""
        assert len(text) > 40, name
        cited = any(k in text for k in ("ESTIMATE", "ASSUMPTION", "(", "'"))
        assert cited, f"economics.{name}: no source in its description"
