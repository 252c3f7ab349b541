"""Command-line interface (thin: parse, call the library, print): this module builds the
parser and dispatches; each command lives in its own module (``<command>_cmd.py``), and the
options several commands share have one meaning everywhere (:mod:`codesign.cli.common`).

Exit codes: 0 success; 2 invalid input or infeasible plan (one-line message, no traceback);
130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from codesign import __version__
from codesign.cli import (
    astra_cmd,
    calibrate_cmd,
    experiment_cmd,
    export_cmd,
    inspect_cmd,
    list_cmd,
    plot_cmd,
    search_cmd,
    serve_cmd,
    simulate_cmd,
    validate_cmd,
)
from codesign.cli.common import EXIT_INPUT
from codesign.errors import CodesignError

#: the command modules, in the order of ``codesign --help``
COMMANDS = (simulate_cmd, validate_cmd, calibrate_cmd, list_cmd, experiment_cmd, plot_cmd,
            search_cmd, serve_cmd, export_cmd, astra_cmd, inspect_cmd)


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, line: str | None = None) -> str:
    """Warnings as one line, without the source line Python prints by default."""
    return f"codesign: warning: {message}\n"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``codesign <command>: error: ... (see --help)``, exit 2
    (the usage block argparse prints by default is what ``--help`` is for)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="codesign",
        description="Datacenter co-design simulator for LLMs: how fast does model M train "
                    "(or serve) on system S with plan P, and why? Which plan, which system?",
        epilog="Examples:\n  codesign simulate\n  codesign simulate --model gpt3-175b --gpu h100 "
               "--gpus 32768 --tp 8 --pp 8 --vpp 3 --global-batch 4096 --format json\n"
               "  codesign simulate --run examples/run-gpt3-175b.yaml --zero 3\n"
               "  codesign search --model gpt3-175b --gpu h100 --gpus 1024 --global-batch 1024\n"
               "  codesign experiment run fullflat-vs-twotier\n"
               "  codesign serve examples/serving/rag-reasoning.yaml\n"
               "  codesign list",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"codesign {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except CodesignError as exc:
        print(f"codesign: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except UnicodeDecodeError as exc:  # a file read below the spec layer's own checks
        print(f"codesign: error: an input file is not UTF-8 text (byte {exc.start}: "
              f"{exc.reason})", file=sys.stderr)
        return EXIT_INPUT
    except (IsADirectoryError, NotADirectoryError, PermissionError, FileNotFoundError) as exc:
        name = exc.filename if exc.filename is not None else ""
        print(f"codesign: error: {name}: {exc.strerror}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("codesign: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

