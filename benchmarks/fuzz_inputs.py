"""Fuzz codesign's entry points with invalid and edge-case inputs and count the outcomes.

    python benchmarks/fuzz_inputs.py            # the whole corpus (>= 2,000 inputs)
    python benchmarks/fuzz_inputs.py --sample 200

Every input must end in one of: exit 0 with finite, positive physical numbers, or exit 2 with
one stderr line naming the problem; never a traceback, never more than 10 s. The corpus is
generated (seeded) across CLI flags, names, ``--run`` files, serving specs, studies, Hugging
Face configs, validation CSVs, arrival traces, Chakra files, output paths and the Python
API. ``tests/test_fuzz.py`` runs a sample in the fast suite and the whole corpus in the slow
run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: the wall-clock budget of one input, seconds
BUDGET_S = 10.0
#: an input still running after this long is stopped (and counted as a failure)
KILL_S = 20.0
BAD_NUMBERS = ["-1", "0", "abc", "1e400", "nan", "inf", "-inf", "", "1.5", "99999999999999",
               "0x10", "1e-300", " ", "--", "None"]
BAD_NAMES = ["", " ", "x" * 300, "/nonexistent/x.yaml", "../../etc/passwd", "h100\x00",
             "ḧ100", "H100 PCIe", "tpu-v9", "gpt-17", "🚀", "dgx-h100;rm -rf /", "a100 1000GB",
             "/proc/version", "/tmp", "workloads/", "null", "[]", "{}"]
BAD_VALUES: list[Any] = [-1, 0, 1e308, float("inf"), "abc", [], {}, None, True, "1e12",
                         10**15, -0.5, [1, 2], {"a": 1}]


@dataclass
class Case:
    """One input: its kind, a label, and how to run it (argv for the CLI or a callable)."""

    kind: str
    label: str
    argv: list[str] | None = None
    call: Callable[[], Any] | None = None


@dataclass
class Outcome:
    case: Case
    code: int
    lines: int
    traceback: bool
    seconds: float
    absurd: str = ""

    @property
    def ok(self) -> bool:
        return (not self.traceback and self.seconds <= BUDGET_S and not self.absurd
                and (self.code == 0 or (self.code == 2 and self.lines == 1)))


def _write(tmp: Path, name: str, text: str | bytes) -> str:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def _mutations(data: Any, rng: random.Random, n: int) -> Iterator[tuple[str, Any]]:
    """``n`` copies of ``data`` with one field (at a random path) replaced, deleted or added."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(data, ())
    for _ in range(n):
        path = rng.choice(paths[1:] or [()])
        value = rng.choice(BAD_VALUES)
        op = rng.choice(["set", "set", "delete", "add"])
        copy = json.loads(json.dumps(data))
        node = copy
        for key in path[:-1]:
            node = node[key]
        last = path[-1] if path else None
        if op == "delete" and isinstance(node, dict) and last in node:
            del node[last]
        elif op == "add" and isinstance(node, dict):
            node["bogus_field"] = value
        elif last is not None:
            node[last] = value
        yield f"{op} {'.'.join(map(str, path))}={value!r}"[:80], copy


def _dump(data: Any) -> str:
    return yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False)


def corpus(tmp: Path, seed: int = 0) -> list[Case]:
    """The generated inputs (files they need are written under ``tmp``)."""
    rng = random.Random(seed)
    cases: list[Case] = []
    from codesign.cli.plan_flags import plan_flags

    base = ["simulate", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--global-batch",
            "8", "--format", "json"]
    for flag in plan_flags():
        for bad in BAD_NUMBERS:
            argv = [*base, flag.flag, bad] if flag.field not in ("tp",) \
                else ["simulate", flag.flag, bad]
            cases.append(Case("cli-flag", f"{flag.flag} {bad!r}", argv))
    for flag in ("--gpus", "--seed"):
        for bad in BAD_NUMBERS:
            cases.append(Case("cli-flag", f"{flag} {bad!r}", ["simulate", flag, bad]))
    for opt in ("--model", "--gpu", "--topology"):
        for bad in BAD_NAMES:
            cases.append(Case("names", f"{opt} {bad[:20]!r}", ["simulate", opt, bad]))
    # --run files
    run_file = yaml.safe_load((ROOT / "examples" / "run-gpt3-175b.yaml").read_text())
    for label, data in _mutations(run_file, rng, 300):
        path = _write(tmp, f"run/{len(cases)}.yaml", _dump(data))
        cases.append(Case("run-file", label, ["simulate", "--run", path, "--format", "json"]))
    for raw in (b"\xff\xfe", b"model: [", b": : :", b"", b"\x00" * 10, b"- 1\n- 2"):
        path = _write(tmp, f"run/raw{len(cases)}.yaml", raw)
        cases.append(Case("run-file", f"raw {raw[:8]!r}", ["simulate", "--run", path]))
    # serving specs (bounded to a few requests)
    for spec_file in sorted((ROOT / "examples" / "serving").glob("*.yaml")):
        spec = yaml.safe_load(spec_file.read_text())
        for label, data in _mutations(spec, rng, 250):
            path = _write(tmp, f"serve/{len(cases)}.yaml", _dump(data))
            cases.append(Case("serving", label, ["serve", path, "--requests", "4",
                                                 "--format", "json"]))
    # studies (shown, not run)
    study = yaml.safe_load((ROOT / "experiments" / "overlap.yaml").read_text())
    for label, data in _mutations(study, rng, 200):
        path = _write(tmp, f"study/{len(cases)}.yaml", _dump(data))
        cases.append(Case("study", label, ["experiment", "show", path]))
    # Hugging Face configs
    hf = next((ROOT / "workloads" / "hf").glob("*.json"))
    config = json.loads(hf.read_text())
    for label, data in _mutations(config, rng, 200):
        path = _write(tmp, f"hf/{len(cases)}/config.json", json.dumps(data, default=str))
        cases.append(Case("hf-config", label, ["simulate", "--model", path, "--gpus", "8",
                                               "--tp", "8", "--global-batch", "8",
                                               "--recompute", "full", "--format", "json"]))
    # validation CSVs: one row with one cell replaced
    rows = (ROOT / "tests" / "data" / "validation_small.csv").read_text().splitlines()
    header = rows[0].split(",")
    for i in range(150):
        cells = list(csv_split(rows[1 + i % (len(rows) - 1)]))
        col = rng.randrange(len(cells))
        cells[col] = rng.choice(["", "abc", "-5", "1e400", "nan", "0", "not stated", "x" * 50])
        path = _write(tmp, f"csv/{i}.csv", ",".join(header) + "\n" + ",".join(
            f'"{c}"' for c in cells) + "\n")
        cases.append(Case("validation-csv", f"{header[col]}={cells[col][:10]!r}",
                          ["validate", path, "--format", "json", "--no-progress"]))
    # arrival traces
    spec = yaml.safe_load((ROOT / "examples" / "serving" / "disaggregated.yaml").read_text())
    for i, text in enumerate(["", "arrival_s\n", "arrival_s,input_tokens,output_tokens\nx,1,1\n",
                              "arrival_s,input_tokens,output_tokens\n-1,10,10\n",
                              "arrival_s,input_tokens,output_tokens\n0,0,0\n",
                              "arrival_s,input_tokens,output_tokens\n1e300,10,10\n",
                              "arrival_s,input_tokens,output_tokens\nnan,10,10\n",
                              "a,b\n1,2\n", "\xff\xfe", "arrival_s,input_tokens,output_tokens\n"
                              "0,10,10\n5,10,10\n1e15,10,10\n"]):
        trace = _write(tmp, f"trace/{i}.csv", text)
        data = json.loads(json.dumps(spec))
        data["clients"][0].update(arrival={"process": "trace", "path": trace})
        for k in ("num_requests", "input_tokens", "output_tokens"):
            data["clients"][0].pop(k, None)
        path = _write(tmp, f"trace/{i}.yaml", _dump(data))
        cases.append(Case("arrival-trace", f"trace {text[:20]!r}", ["serve", path,
                                                                     "--format", "json"]))
    # Chakra files
    for i, raw in enumerate([b"", b"\x00", b"\xff" * 100, bytes(range(256)), b"\x05abc",
                             b"\x80\x80\x80\x80\x80\x80"]):
        path = _write(tmp, f"et/t{i}.0.et", raw)
        cases.append(Case("chakra", f"et {raw[:6]!r}", ["inspect", path]))
    cases.append(Case("chakra", "missing prefix", ["inspect", str(tmp / "nothing")]))
    # output paths
    # an existing directory as the prefix: one inside ``tmp``, so the files written beside
    # it are removed with ``tmp``
    (tmp / "outdir").mkdir(exist_ok=True)
    for bad in ("/proc/x/y", "/proc/version", str(tmp / "outdir"), "/dev/null/x", ""):
        cases.append(Case("output-path", f"--trace {bad}", ["simulate", "--trace", bad]))
        # a small export (8 ranks): the case checks the path's handling, not how fast the
        # disk takes the default run's 1,024 rank files (2.6 GB, ~7 s of writes here)
        cases.append(Case("output-path", f"--out {bad}", ["export", "chakra", "--model",
                                                          "llama3-8b", "--gpus", "8", "--out",
                                                          bad]))
    # the Python API
    from codesign.api import simulate

    keys = ["model", "gpu", "topology", "num_gpus", "tp", "pp", "global_batch_size", "vpp",
            "micro_batch_size", "zero_stage", "recompute", "dtype", "seq_len", "bogus"]
    for _ in range(200):
        kwargs = {rng.choice(keys): rng.choice([*BAD_VALUES, *BAD_NAMES[:6]])}

        def call(kw: dict[str, Any] = kwargs) -> Any:
            return simulate(**kw)

        cases.append(Case("api", repr(kwargs)[:60], call=call))
    return cases


def csv_split(line: str) -> list[str]:
    import csv

    return next(csv.reader([line]))


def _absurd(out: str) -> str:
    """A physical number that is not finite and positive, in a JSON report."""
    try:
        d = json.loads(out)
    except ValueError:
        return ""
    if not isinstance(d, dict):
        return ""
    for key in ("step_time_s", "tokens_per_s"):
        v = d.get(key)
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            return f"{key}={v}"
    mfu = d.get("mfu")
    if mfu is not None and not 0 < mfu <= 1:
        return f"mfu={mfu}"
    return ""


def run_case(case: Case) -> Outcome:
    """Run one input in this process and classify what happened."""
    import signal

    from codesign.cli import main
    from codesign.errors import CodesignError

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    code, tb = 0, False

    def over_budget(signum: int, frame: Any) -> None:
        raise TimeoutError(f"over {KILL_S:g} s")

    signal.signal(signal.SIGALRM, over_budget)
    signal.alarm(int(KILL_S))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if case.argv is not None:
                code = main(case.argv)
            elif case.call is not None:
                res = case.call()
                code = 0 if getattr(res, "feasible", True) else 2
                if not getattr(res, "feasible", True):
                    print(f"codesign: {res.reason}", file=sys.stderr)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except CodesignError as exc:  # the API raises these: a clear message is the contract
            code = 2
            print(f"codesign: {exc}", file=sys.stderr)
        except TimeoutError:
            code = 1
        except Exception:  # a traceback is what this harness looks for
            import traceback

            tb = True
            code = 1
            traceback.print_exc(file=err)
        finally:
            signal.alarm(0)
    seconds = time.perf_counter() - t0
    text = err.getvalue()
    lines = len([ln for ln in text.strip().splitlines()
                 if ln.strip() and not ln.startswith("codesign: warning")])
    return Outcome(case, int(code), lines, tb or "Traceback" in text, seconds,
                   _absurd(out.getvalue()) if code == 0 else "")


def run_corpus(sample: int | None = None, seed: int = 0,
               kind: str | None = None) -> list[Outcome]:
    with tempfile.TemporaryDirectory() as tmp:
        cases = [c for c in corpus(Path(tmp), seed) if kind is None or c.kind == kind]
        if sample is not None and sample < len(cases):
            cases = random.Random(seed).sample(cases, sample)
        return [run_case(c) for c in cases]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, help="run this many inputs of the corpus")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kind", help="only inputs of this kind (e.g. serving, run-file)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    outcomes = run_corpus(args.sample, args.seed, args.kind)
    by_kind: Counter[str] = Counter(o.case.kind for o in outcomes)
    bad = [o for o in outcomes if not o.ok]
    print(f"{len(outcomes):,} inputs in {time.perf_counter() - t0:.1f} s: "
          f"{sum(o.code == 0 for o in outcomes):,} ran, "
          f"{sum(o.code == 2 for o in outcomes):,} clean errors, {len(bad)} failures")
    for kind, n in sorted(by_kind.items()):
        fails = sum(1 for o in bad if o.case.kind == kind)
        print(f"  {kind:16s} {n:5d} inputs, {fails} failures")
    for o in bad[:30]:
        why = ("traceback" if o.traceback else f"{o.seconds:.1f} s" if o.seconds > BUDGET_S
               else o.absurd or f"exit {o.code}, {o.lines} lines")
        print(f"  FAIL {o.case.kind}: {o.case.label} ({why})")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
