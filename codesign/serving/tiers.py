"""Transfers that share a bandwidth fairly: memory-tier reads and KV-cache links.

:class:`FairShareChannel` is an analytical processor-sharing server inside SimPy: ``n``
concurrent transfers each progress at ``min(per_transfer_rate, rate / n)`` units per second,
recomputed whenever one starts or ends (so a transfer that runs alone gets the full rate and
``k`` equal transfers started together finish together after ``k×`` the time). Units are
whatever the caller uses (bytes for a tier, seconds of isolated transfer time for a link
priced by the network model). Every transfer is recorded with its size, start and end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import simpy

from codesign.specs.serving import MemoryTierSpec
from codesign.units import GB, us_to_s


@dataclass
class Transfer:
    """One transfer: ``amount`` units (and ``bytes``) from ``start_s`` to ``end_s``."""

    amount: float
    bytes: float
    start_s: float
    tag: Any = None
    end_s: float = math.nan
    remaining: float = 0.0
    event: simpy.Event | None = field(default=None, repr=False)


class FairShareChannel:
    """Processor-sharing channel of ``rate`` units/s, each transfer capped at ``cap``."""

    def __init__(self, env: simpy.Environment, name: str, rate: float,
                 per_transfer_rate: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"channel '{name}': rate must be > 0")
        self.env = env
        self.name = name
        self.rate = float(rate)
        self.cap = float(per_transfer_rate) if per_transfer_rate else math.inf
        self.active: list[Transfer] = []
        self.done: list[Transfer] = []
        self._last = 0.0
        self._gen = 0
        self.max_concurrency = 0

    def _share(self) -> float:
        return min(self.cap, self.rate / len(self.active))

    def _advance(self) -> None:
        now = self.env.now
        if self.active and now > self._last:
            progress = self._share() * (now - self._last)
            for t in self.active:
                t.remaining -= progress
        self._last = now

    def transfer(self, amount: float, nbytes: float | None = None, tag: Any = None) -> simpy.Event:
        """Start a transfer of ``amount`` units; the returned event fires when it ends."""
        ev = self.env.event()
        t = Transfer(amount=float(amount), bytes=float(amount if nbytes is None else nbytes),
                     start_s=self.env.now, tag=tag, remaining=float(amount), event=ev)
        if amount <= 0:
            t.end_s = self.env.now
            self.done.append(t)
            ev.succeed(t)
            return ev
        self._advance()
        self.active.append(t)
        self.max_concurrency = max(self.max_concurrency, len(self.active))
        self._reschedule()
        return ev

    def _reschedule(self) -> None:
        self._gen += 1
        if not self.active:
            return
        delay = max(0.0, min(t.remaining for t in self.active) / self._share())
        gen = self._gen
        timer = self.env.timeout(delay)
        timer.callbacks.append(lambda _ev: self._on_timer(gen))

    def _on_timer(self, gen: int) -> None:
        if gen != self._gen:  # superseded by a later start or finish
            return
        self._advance()
        # finished: within a picosecond of work at the current share
        # or whose remaining time is below the clock's resolution at this time (far from t = 0
        # a float clock cannot advance by less than ulp(now): the timer fires without time
        # passing, and the transfer would never progress)
        tol = self._share() * (1e-12 + 2 * math.ulp(self.env.now)) \
            + 1e-12 * max(t.amount for t in self.active)
        finished = [t for t in self.active if t.remaining <= tol]
        self.active = [t for t in self.active if t.remaining > tol]
        now = self.env.now
        for t in finished:
            t.end_s = now
            t.remaining = 0.0
            self.done.append(t)
        self._reschedule()
        for t in finished:
            assert t.event is not None
            t.event.succeed(t)

    @property
    def total_bytes(self) -> float:
        """Bytes of every finished transfer."""
        return sum(t.bytes for t in self.done)


class MemoryTier:
    """A memory or storage tier: a read pays ``latency_us`` then shares the tier's bandwidth."""

    def __init__(self, env: simpy.Environment, spec: MemoryTierSpec) -> None:
        self.env = env
        self.spec = spec
        self.latency_s = us_to_s(spec.latency_us)
        cap = spec.per_read_bandwidth_GBps * GB if spec.per_read_bandwidth_GBps else None
        self.channel = FairShareChannel(env, spec.name, spec.bandwidth_GBps * GB, cap)

    @property
    def capacity_bytes(self) -> float:
        """Capacity in bytes (decimal GB in the spec)."""
        return self.spec.capacity_GB * GB

    def read(self, nbytes: float, tag: Any = None) -> Any:
        """SimPy process body: wait for the latency, then the shared-bandwidth transfer."""
        if self.latency_s > 0:
            yield self.env.timeout(self.latency_s)
        t = yield self.channel.transfer(nbytes, nbytes, tag)
        return t
