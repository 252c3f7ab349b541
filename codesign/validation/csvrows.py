"""Reading measurement CSVs: rows as stripped strings, and numbers out of free-text cells."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

from codesign.errors import SpecError


def read_rows(path: Path, required: Sequence[str], kind: str) -> list[dict[str, str]]:
    """Rows of a CSV with every value stripped; raises :class:`SpecError` if a ``required``
    column is missing (``kind`` names the file's kind in the message, e.g. "a training")."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise SpecError(f"{path}: missing column(s) {', '.join(missing)}; {kind} "
                                f"CSV needs {', '.join(required)}")
            return [{k: (v or "").strip() for k, v in row.items() if k} for row in reader]
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except csv.Error as exc:
        raise SpecError(f"{path}: not a readable CSV ({exc})") from None


#: a cell's leading whole number: the degree's own name ("TP=8", "PP 16") or an approximation
#: word ("~1024", "about 2048") may precede it, and thousands separators are read as such
#: ("6,144" GPUs, "12,288" hidden size)
_INT = re.compile(r"\s*(?:(?:tp|pp|dp|cp|ep|etp|vpp|mbs|gbs)\s*[=:]?\s*)?"
                  r"(?:~|≈|about|approx\.?|around|roughly)?\s*(\d{1,3}(?:,\d{3})+(?!\d)|\d+)",
                  re.IGNORECASE)


def int_cell(row: dict[str, str], key: str) -> int | None:
    """The leading whole number of a cell ("8 (inferred)" -> 8, "6,144" -> 6144,
    "~1024" -> 1024, "TP=8" -> 8), or None."""
    m = _INT.match(row.get(key, ""))
    return int(m.group(1).replace(",", "")) if m else None


def float_cell(row: dict[str, str], key: str) -> float | None:
    """The leading number of a cell, thousands separators ignored ("1,979 TFLOP/s" -> 1979.0),
    or None."""
    m = re.match(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)", row.get(key, "").replace(",", ""))
    return float(m.group(1)) if m else None


#: a count of devices named as such inside a cell ("64 nodes (512 GPUs)", "1,024 H100 GPUs")
_DEVICES = re.compile(r"(\d{1,3}(?:,\d{3})+(?!\d)|\d+)\s*(?:[a-z0-9-]+\s+)?"
                      r"(?:gpus?|chips?|accelerators?|hpus?|devices?|gcds?)\b", re.IGNORECASE)


def device_count(row: dict[str, str], key: str = "num_gpus") -> int | None:
    """The number of devices a count cell states: the number it names as GPUs / chips /
    accelerators when it names one ("64 nodes (512 GPUs)" -> 512), else its leading whole
    number (:func:`int_cell`)."""
    m = _DEVICES.search(row.get(key, ""))
    return int(m.group(1).replace(",", "")) if m else int_cell(row, key)


def row_text(row: dict[str, str], cells: Sequence[str], lower: bool = True) -> str:
    """The named cells of ``row`` joined by spaces (lower-cased unless ``lower`` is False):
    the free text the prose readers search."""
    text = " ".join(row.get(k, "") for k in cells)
    return text.lower() if lower else text
