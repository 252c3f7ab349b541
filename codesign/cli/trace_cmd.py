"""CLI commands: placeholder, filled in by the traces work (issue 6)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add this module's subcommands to the top-level subparsers ``sub``."""
    del sub
