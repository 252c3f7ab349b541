"""Request traces: CSV or JSONL files with an arrival time and, optionally, token counts.

Recognized columns/keys (case-insensitive; the first present wins):

* arrival: ``arrival_s``, ``arrival_time_s``, ``timestamp_s``, ``arrival``, ``arrival_time``,
  ``timestamp``, ``time`` — numbers in the trace's ``time_unit`` (s, ms or us), or ISO-8601
  date-times (as in the Azure LLM inference traces);
* input tokens: ``input_tokens``, ``input_length``, ``prompt_tokens``, ``context_tokens``,
  ``contexttokens``, ``input_len``;
* output tokens: ``output_tokens``, ``output_length``, ``completion_tokens``,
  ``generated_tokens``, ``generatedtokens``, ``output_len``.

A malformed line (unparsable JSON, a missing or non-numeric field, a negative count) is
skipped with a warning that names its line number; the rest loads. Arrival times are shifted
so the earliest is 0 and sorted (stable).
"""

from __future__ import annotations

import csv
import json
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from codesign.errors import SpecError

ARRIVAL_KEYS = ("arrival_s", "arrival_time_s", "timestamp_s", "arrival", "arrival_time",
                "timestamp", "time")
INPUT_KEYS = ("input_tokens", "input_length", "prompt_tokens", "context_tokens",
              "contexttokens", "input_len")
OUTPUT_KEYS = ("output_tokens", "output_length", "completion_tokens", "generated_tokens",
               "generatedtokens", "output_len")
_UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class TraceWarning(UserWarning):
    """A trace line was skipped (the message names the file and line number)."""


@dataclass
class Trace:
    """Loaded trace: arrays in arrival order; ``problems`` lists every skipped line."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray | None
    output_tokens: np.ndarray | None
    problems: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.arrival_s)


def _pick(keys: dict[str, str], names: tuple[str, ...]) -> str | None:
    for n in names:
        if n in keys:
            return keys[n]
    return None


def _time(value: Any, scale: float) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, int | float):
        return float(value) * scale
    text = str(value).strip()
    try:
        return float(text) * scale
    except ValueError:
        pass
    # ISO date-time; Python accepts at most 6 fractional digits
    head, dot, frac = text.partition(".")
    if dot:
        digits = "".join(ch for ch in frac if ch.isdigit())
        rest = frac[len(digits):]
        text = f"{head}.{digits[:6]}{rest}"
    return datetime.fromisoformat(text).timestamp()


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} is a boolean")
    x = float(value)
    if not np.isfinite(x) or x < 0 or x != int(x):
        raise ValueError(f"{what} must be a whole number >= 0, got {value!r}")
    return int(x)


def load_trace(path: Path | str, fmt: Literal["csv", "jsonl"] | None = None,
               time_unit: Literal["s", "ms", "us"] = "s") -> Trace:
    """Read a CSV or JSONL trace (see the module docstring); warns once per skipped line."""
    path = Path(path)
    fmt = fmt or ("jsonl" if path.suffix.lower() in (".jsonl", ".json", ".ndjson") else "csv")
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"cannot read trace {path}: {exc.strerror}") from None
    scale = _UNIT_S[time_unit]
    rows: list[tuple[int, dict[str, Any]]] = []
    problems: list[str] = []
    if fmt == "csv":
        lines = text.splitlines()
        reader = csv.reader(lines)
        header = next(reader, None)
        if not header:
            raise SpecError(f"{path}: empty trace (a CSV needs a header line)")
        names = [h.strip().lower() for h in header]
        for lineno, cells in enumerate(reader, start=2):
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(names):
                problems.append(f"{path}: line {lineno}: expected {len(names)} fields, got "
                                f"{len(cells)}")
                continue
            rows.append((lineno, dict(zip(names, cells, strict=True))))
    else:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"{path}: line {lineno}: not valid JSON ({exc.msg})")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{path}: line {lineno}: a line must be a JSON object")
                continue
            rows.append((lineno, {str(k).strip().lower(): v for k, v in obj.items()}))

    all_keys: dict[str, str] = {}
    for _, row in rows:
        for k in row:
            all_keys.setdefault(k, k)
    a_key = _pick(all_keys, ARRIVAL_KEYS)
    if a_key is None:
        raise SpecError(f"{path}: no arrival-time column; expected one of "
                        f"{', '.join(ARRIVAL_KEYS)}")
    i_key = _pick(all_keys, INPUT_KEYS)
    o_key = _pick(all_keys, OUTPUT_KEYS)

    arrivals: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    for lineno, row in rows:
        try:
            if a_key not in row or row[a_key] in (None, ""):
                raise ValueError(f"missing {a_key}")
            t = _time(row[a_key], scale)
            if not np.isfinite(t):
                raise ValueError(f"{a_key} is not finite")
            i = _count(row[i_key], i_key) if i_key is not None else 0
            o = _count(row[o_key], o_key) if o_key is not None else 0
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"{path}: line {lineno}: {exc}")
            continue
        arrivals.append(t)
        inputs.append(i)
        outputs.append(o)
    for p in problems:
        warnings.warn(f"skipped {p}", TraceWarning, stacklevel=2)
    if not arrivals:
        raise SpecError(f"{path}: no valid request in the trace")
    arr = np.asarray(arrivals, dtype=float)
    order = np.argsort(arr, kind="stable")
    arr = arr[order] - arr[order[0]]
    ins = np.asarray(inputs, dtype=np.int64)[order] if i_key is not None else None
    outs = np.asarray(outputs, dtype=np.int64)[order] if o_key is not None else None
    return Trace(arrival_s=arr, input_tokens=ins, output_tokens=outs, problems=problems)
