"""Zero tracebacks (issue 14 item 5): a sample of the generated invalid-input corpus of
``benchmarks/fuzz_inputs.py`` in the fast suite, the whole corpus (>= 2,000 inputs) in the slow
run. Every input ends in exit 0 with finite positive numbers or exit 2 with one line; none
raises a traceback or runs past its budget."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "fuzz_inputs", Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_inputs.py")
assert _SPEC is not None and _SPEC.loader is not None
fuzz = importlib.util.module_from_spec(_SPEC)
sys.modules["fuzz_inputs"] = fuzz  # dataclasses look their module up there
_SPEC.loader.exec_module(fuzz)


def _failures(outcomes: list) -> list[str]:  # type: ignore[type-arg]
    return [f"{o.case.kind}: {o.case.label} (exit {o.code}, {o.lines} lines, "
            f"traceback {o.traceback}, {o.seconds:.1f} s {o.absurd})"
            for o in outcomes if not o.ok]


def test_corpus_is_large_and_covers_every_entry_point(tmp_path: Path) -> None:
    cases = fuzz.corpus(tmp_path)
    assert len(cases) >= 2000
    assert {c.kind for c in cases} >= {"cli-flag", "names", "run-file", "serving", "study",
                                       "hf-config", "validation-csv", "arrival-trace",
                                       "chakra", "output-path", "api"}


def test_a_sample_never_crashes() -> None:
    outcomes = fuzz.run_corpus(sample=150, seed=1)
    assert not _failures(outcomes)


@pytest.mark.slow
def test_the_whole_corpus_never_crashes() -> None:
    assert not _failures(fuzz.run_corpus())
