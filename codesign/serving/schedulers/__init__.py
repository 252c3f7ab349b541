"""Batching schedulers, one module each, behind a registry.

``SCHEDULERS`` maps the ``scheduler.name`` of an engine spec to its class; :func:`register`
adds one (its settings are the matching spec in :mod:`codesign.specs.serving`).
"""

from __future__ import annotations

from typing import Any

from codesign.serving.replica import Instance
from codesign.serving.schedulers.base import Scheduler
from codesign.serving.schedulers.chunked_prefill import ChunkedPrefillScheduler
from codesign.serving.schedulers.continuous import ContinuousScheduler
from codesign.serving.schedulers.disaggregated import DisaggregatedScheduler
from codesign.serving.schedulers.static import StaticScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    cls.name: cls
    for cls in (StaticScheduler, ContinuousScheduler, ChunkedPrefillScheduler,
                DisaggregatedScheduler)
}


def register(cls: type[Scheduler]) -> type[Scheduler]:
    """Add a scheduler class under its ``name`` (usable as a decorator)."""
    SCHEDULERS[cls.name] = cls
    return cls


def make_scheduler(inst: Instance, settings: Any) -> Scheduler:
    """The scheduler named by ``settings.name``, attached to ``inst``."""
    try:
        cls = SCHEDULERS[settings.name]
    except KeyError:
        allowed = ", ".join(sorted(SCHEDULERS))
        raise ValueError(f"unknown scheduler '{settings.name}'; allowed: {allowed}") from None
    return cls(inst, settings)


__all__ = ["SCHEDULERS", "ChunkedPrefillScheduler", "ContinuousScheduler",
           "DisaggregatedScheduler", "Scheduler", "StaticScheduler", "make_scheduler",
           "register"]
