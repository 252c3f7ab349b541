"""Bad cells never crash ``validate``: published rows with one cell replaced by something odd
(empty, "n/a", "?", "abc", "None", a negative or huge number, units glued on) each come back as a
row: simulated, or unsupported with a reason in words, never an exception escaping the run and
never a Python error name as the reason (which would be a bug caught, not an input refused)."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest

from codesign.validation.runner import run_csv

_ROOT = Path(__file__).parent.parent / "experiments" / "validation"
_ODD = ("", "n/a", "?", "abc", "None", "-1", "0", "1e9", "8x", "2.5", "1,024", "[1,2]", "yes",
        "nan", "4 (8 per node)")
_BUGS = ("TypeError", "KeyError", "ZeroDivisionError", "AttributeError", "IndexError",
         "ValueError", "AssertionError", "OverflowError", "RecursionError", "NameError",
         "UnboundLocalError", "StopIteration")


@pytest.mark.parametrize(("name", "seed"), [("training_cases.csv", 1),
                                            ("inference_cases.csv", 2)])
def test_one_odd_cell_is_a_row_never_a_crash(name: str, seed: int, tmp_path: Path) -> None:
    rows = list(csv.DictReader((_ROOT / name).open()))
    cols = [c for c in rows[0] if c not in ("case_id", "source", "source_location")]
    rng = random.Random(seed)
    mutated = []
    for i in range(60):
        row = dict(rng.choice(rows))
        row[rng.choice(cols)] = rng.choice(_ODD)
        mutated.append({**row, "case_id": f"F{i:03d}"})
    path = tmp_path / name
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(mutated)
    results = run_csv(path)
    assert len(results) == len(mutated)
    bugs = [(r.case_id, r.reason) for r in results if r.reason.startswith(_BUGS)]
    assert not bugs, bugs
