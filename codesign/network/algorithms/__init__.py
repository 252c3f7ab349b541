"""The collective-algorithm registry: one module per algorithm, registered by name.

Each module of this package defines a :class:`~codesign.network.algorithms.base.
CollectiveAlgorithm` (its alpha-beta formulas and its flow decomposition) and decorates it
with :func:`register`; every module here is imported when the package is. The network model
(:mod:`codesign.network.model`), the flow model (:mod:`codesign.network.flows`), the faulted
costs (:mod:`codesign.network.faults`), the per-rank engine's link factors, the plan spec
(``ParallelismSpec.collective_algorithm``) and the CLI (``--collective-algorithm``) all read
this registry, so a new algorithm is one module here, plus its name in
:data:`codesign.specs.parallel.BUILTIN_COLLECTIVE_ALGORITHMS` (the spec layer may not import
this package, so it states the built-in names a plan may request; a test checks they are the
modules'). An algorithm registered from elsewhere (a plug-in, a test) is one class: its
registration adds its name to the plan's allowed names.

Built-in: ``ring``, ``tree``, ``in_network``, ``hierarchical`` and ``auto`` (the fastest) may
be requested by a plan; ``direct`` (p2p, all-to-all) and ``measured`` (a measured table's
time) are labels the model reports on its own.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TypeVar

from codesign.network.algorithms.base import INF, CollectiveAlgorithm, Entity
from codesign.specs.parallel import COLLECTIVE_ALGORITHMS

A = TypeVar("A", bound=type[CollectiveAlgorithm])

_REGISTRY: dict[str, CollectiveAlgorithm] = {}
_FLAT: list[tuple[CollectiveAlgorithm, ...]] = []  # cache of flat_algorithms()


def register(cls: A) -> A:
    """Class decorator: register an instance of ``cls`` under ``cls.name`` (a selectable one
    also becomes a name plans may request)."""
    alg = cls()
    name = alg.name
    if not name:
        raise ValueError(f"{cls.__name__}: a collective algorithm needs a name")
    old = _REGISTRY.get(name)
    if old is not None and type(old).__qualname__ != cls.__qualname__:
        raise ValueError(f"collective algorithm '{name}' is already registered "
                         f"({type(old).__qualname__})")
    _REGISTRY[name] = alg
    if alg.selectable and name not in COLLECTIVE_ALGORITHMS:
        COLLECTIVE_ALGORITHMS.append(name)
    _FLAT.clear()
    return cls


def unregister(name: str) -> None:
    """Remove algorithm ``name`` (and the plan name) from the registry."""
    _REGISTRY.pop(name, None)
    if name in COLLECTIVE_ALGORITHMS:
        COLLECTIVE_ALGORITHMS.remove(name)
    _FLAT.clear()


def algorithm(name: str) -> CollectiveAlgorithm:
    """The registered algorithm ``name``; ValueError listing the names for an unknown one."""
    alg = _REGISTRY.get(name)
    if alg is None:
        raise ValueError(f"unknown collective algorithm '{name}'; "
                         f"registered: {', '.join(_REGISTRY)}")
    return alg


def names() -> tuple[str, ...]:
    """Every registered algorithm's name, in registration order."""
    return tuple(_REGISTRY)


def selectable_names() -> tuple[str, ...]:
    """Names a plan may request (``ParallelismSpec.collective_algorithm``)."""
    return tuple(n for n, a in _REGISTRY.items() if a.selectable)


def flat_algorithms() -> tuple[CollectiveAlgorithm, ...]:
    """The single-tier algorithms ``auto`` considers, in order of preference (the first of
    equal times is reported)."""
    if not _FLAT:
        flat = [a for a in _REGISTRY.values() if a.flat]
        _FLAT.append(tuple(sorted(flat, key=lambda a: a.preference)))
    return _FLAT[0]


def flat_time(kind: str, name: str, size: float, n: int, bw: float, alpha: float) -> float:
    """Seconds for ``kind`` with the flat algorithm ``name`` on one tier; ``math.inf`` when
    ``name`` is not a flat algorithm or has no formula for ``kind``."""
    alg = _REGISTRY.get(name)
    if alg is None or not alg.flat:
        return INF
    return alg.time(kind, size, n, bw, alpha)


def decomposition(name: str) -> str:
    """Name of the algorithm whose flows stand for a collective costed as ``name`` (the
    :attr:`~codesign.network.model.CommCost.algorithm`; ``"none"``, a local collective,
    moves nothing and counts as a ring)."""
    if name == "none":
        return "ring"
    return algorithm(name).decomposition


def _load_builtins() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name != "base" and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_builtins()

__all__ = ["CollectiveAlgorithm", "Entity", "algorithm", "decomposition", "flat_algorithms",
           "flat_time", "names", "register", "selectable_names", "unregister"]
