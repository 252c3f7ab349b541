"""Pieces the CLI commands share: exit codes, the run flags and building a run from them, and
the options several commands take, each with one meaning everywhere:

* ``--format table|json``: what is printed on stdout;
* ``--out PATH``: where a command writes its files (a directory, or a path prefix for
  ``export chakra``); ``--output`` is a hidden, deprecated alias;
* ``--trace FILE.json``: also write a Chrome/Perfetto timeline of what was simulated;
* ``--jobs N``: worker processes, default every core this process may use, 1 = in this process;
* ``--progress/--no-progress``: a progress bar on stderr;
* ``--csv FILE``: also write the rows as CSV.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codesign.cli.plan_flags import add_plan_flags, plan_from_args
from codesign.errors import SpecError
from codesign.specs.parallel import LAYOUT_FIELDS
from codesign.specs.run import TrainingRun

EXIT_INPUT = 2


def add_run_flags(ap: argparse.ArgumentParser, with_run_file: bool = True) -> None:
    """Add --run, --model, --gpu, --topology, --gpus and every plan flag to ``ap``."""
    if with_run_file:
        ap.add_argument("--run", metavar="FILE", help="YAML/JSON run file: model, gpu, "
                        "topology, num_gpus, plan (alias parallel); the flags below override "
                        "it")
    ap.add_argument("--model", help="model name or file (default gpt3-175b)")
    ap.add_argument("--gpu", help="GPU name or file (default h100)")
    ap.add_argument("--topology", help="topology name or file (default: the GPU's system)")
    ap.add_argument("--gpus", type=int, dest="num_gpus", help="number of GPUs")
    plan = ap.add_argument_group("plan settings (codesign.specs.ParallelismSpec; left out: "
                                 "the run file's value, else the spec's default)")
    add_plan_flags(plan)


def run_from_args(args: argparse.Namespace, *, choose: bool = False) -> TrainingRun:
    """The run the flags (and the ``--run`` file they override) describe.

    No flag at all: the built-in default run (:data:`codesign.api.DEFAULT_RUN`). With
    ``choose``, flags that name the model, GPU, system or settings but no layout field
    (:data:`LAYOUT_FIELDS`) and no run file get the fastest feasible plan the search finds,
    every flag given pinned (:func:`codesign.search.choose.choose_plan`); the choice is printed
    on stderr."""
    from codesign.api import DEFAULT_RUN, build_run

    base, plan = run_file_of(args)
    plan.update(plan_from_args(args))
    for key in ("model", "gpu", "topology", "num_gpus"):
        v = getattr(args, key)
        if v is not None:
            base[key] = v
    run_file = getattr(args, "run", None)
    if not run_file and not plan and not base:
        return build_run(**DEFAULT_RUN)
    if "num_gpus" not in base and not run_file and plan.get("dp") is None:
        base["num_gpus"] = DEFAULT_RUN["num_gpus"]  # the default cluster size
    run = build_run(**base, **plan)
    if choose and not run_file and not any(k in plan for k in LAYOUT_FIELDS):
        from codesign.search.choose import choose_plan

        run, notes = choose_plan(run, dict(plan))
        for note in notes:
            print(f"codesign: {note}", file=sys.stderr)
    return run


def run_file_of(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(entries and GPU count, plan settings) of the ``--run`` file; empty without one."""
    if not getattr(args, "run", None):
        return {}, {}
    from codesign.specs.run_file import load_run_file

    run_file = load_run_file(args.run)
    return run_file.build_args(str(args.run)), dict(run_file.plan)


# ---- options with one meaning across commands ------------------------------------------------

class DeprecatedAlias(argparse.Action):
    """A hidden old spelling of an option: stores into the new option's ``dest`` and warns."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str = "",
                 **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"codesign: warning: {option_string} is deprecated; use {self.new}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_format(ap: argparse.ArgumentParser, what: str = "") -> None:
    """``--format table|json``."""
    ap.add_argument("--format", choices=["table", "json"], default="table",
                    help=f"output format{f' of {what}' if what else ''} (default table)")


def output_file(value: str) -> str:
    """argparse ``type`` of an output file: refused before anything runs when it is a
    directory or cannot be written (missing parent directories are created)."""
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a directory; give a file name")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write {value}: {exc.strerror}") from None
    if not existed:
        path.unlink(missing_ok=True)
    return value


def output_location(value: str) -> str:
    """argparse ``type`` of ``--out`` (a directory or a path prefix): the deepest existing
    directory on the path must take new files (checked with a temporary file)."""
    path = Path(value).absolute()
    where = path
    while not where.exists() and where != where.parent:
        where = where.parent
    if where.is_file():
        if where != path:
            raise argparse.ArgumentTypeError(f"{value}: {where} is a file, not a directory")
        where = where.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".codesign-check-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write under {where}: {exc.strerror}") \
            from None
    return value


def add_out(ap: argparse.ArgumentParser, metavar: str, text: str) -> None:
    """``--out PATH`` (where files go), with ``--output`` as a hidden deprecated alias; the
    location is checked before the command runs (:func:`output_location`)."""
    ap.add_argument("--out", metavar=metavar, type=output_location, help=text)
    ap.add_argument("--output", dest="out", action=DeprecatedAlias, new="--out",
                    type=output_location, help=argparse.SUPPRESS)


def add_jobs(ap: argparse.ArgumentParser, what: str) -> None:
    """``--jobs N``: worker processes (default: every core; 1 = in this process)."""
    ap.add_argument("--jobs", type=int, metavar="N",
                    help=f"worker processes {what} (default: every core this process may "
                         "use; 1 = in this process)")


def jobs_of(args: argparse.Namespace) -> int:
    """The ``--jobs`` value, or the default (every core this process may use)."""
    if args.jobs is None:
        return default_jobs()
    if args.jobs < 1:
        raise SpecError(f"--jobs must be >= 1, got {args.jobs}")
    return int(args.jobs)


def default_jobs() -> int:
    """The cores this process may use (the one default of ``--jobs``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def add_progress(ap: argparse.ArgumentParser, default: bool) -> None:
    """``--progress/--no-progress``: a progress bar on stderr."""
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=default,
                    help=f"progress bar on stderr, shown on a terminal only (default: "
                         f"{'on' if default else 'off'})")
    ap.add_argument("--quiet", dest="progress", action="store_false",
                    help="no progress bar (as --no-progress)")


def print_notes(title: str, notes: Sequence[str]) -> None:
    """``title`` and one ``  - note`` line per note (nothing when there are none)."""
    if notes:
        print(title)
        for note in notes:
            print(f"  - {note}")
