"""CLI commands: placeholder, filled in by the experiments work (issue 4)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add this module's subcommands to the top-level subparsers sub."""
    del sub


def _unused(args: argparse.Namespace) -> int:
    return 0
