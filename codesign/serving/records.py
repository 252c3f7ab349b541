"""What the serving simulation records: one :class:`RequestRecord` per request (arrival, stage
times, the engine sequences it ran) and one :class:`KvTransferRecord` per disaggregated KV
transfer. :mod:`codesign.serving.metrics` and :mod:`codesign.serving.timeline` read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codesign.serving.replica import Seq


class RequestRecord:
    """What happened to one request. Times in seconds from the start of the simulation.

    ``stages`` holds ``(name, start_s, end_s)`` of the pre-generation stages and reasoning
    gaps; ``seqs`` the engine sequences it ran (embedding, then one per generate round), whose
    queue, prefill, decode and KV-transfer times and token segments the metrics and the
    timeline read.
    """

    __slots__ = ("arrival_s", "cached_tokens", "client", "engine", "finish_s", "id",
                 "index", "input_tokens", "kv_hit", "model", "output_tokens", "prompt_tokens",
                 "rejected", "request_type", "seqs", "stages", "tier_bytes")

    def __init__(self, rid: int, client: str, index: int, request_type: str, model: str,
                 arrival_s: float, input_tokens: int, output_tokens: int) -> None:
        self.id = rid
        self.client = client
        self.index = index
        self.request_type = request_type
        self.model = model
        self.engine: str | None = None
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.prompt_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cached_tokens = 0
        self.kv_hit = False
        self.tier_bytes = 0.0
        self.stages: list[tuple[str, float, float]] = []
        self.seqs: list[Seq] = []
        self.finish_s: float | None = None
        self.rejected: str | None = None

    @property
    def first_token_s(self) -> float | None:
        """Time of the first generated token (any generate call), or ``None``."""
        for s in self.seqs:
            if s.first_token_s is not None and s.out > 0:
                return s.first_token_s
        return None

    @property
    def generated_tokens(self) -> int:
        """Tokens generated over all generate calls (thinking and answer)."""
        return sum(s.gen for s in self.seqs if s.out > 0)

    @property
    def queue_s(self) -> float:
        """Time spent waiting in engine queues (incl. after preemptions and handoffs)."""
        return sum(s.queue_s for s in self.seqs)

    @property
    def preemptions(self) -> int:
        """Times any of its sequences was preempted."""
        return sum(s.preemptions for s in self.seqs)

    @property
    def kv_transfer_bytes(self) -> float:
        """KV bytes sent from a prefill to a decode engine for this request."""
        return sum(s.transfer[2] for s in self.seqs if s.transfer is not None)

    def token_times(self) -> list[float]:
        """Every generated token's time, in order."""
        out: list[float] = []
        for s in self.seqs:
            if s.out > 0:
                out.extend(s.token_times())
        return out

    @property
    def completed(self) -> bool:
        """Finished without rejection."""
        return self.finish_s is not None and self.rejected is None

    def to_dict(self, token_times: bool = False) -> dict[str, Any]:
        """Plain-data record (JSON-ready)."""
        ft = self.first_token_s
        d: dict[str, Any] = {
            "id": self.id, "client": self.client, "request_type": self.request_type,
            "model": self.model, "arrival_s": self.arrival_s,
            "input_tokens": self.input_tokens, "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens, "generated_tokens": self.generated_tokens,
            "cached_tokens": self.cached_tokens, "kv_hit": self.kv_hit,
            "queue_s": self.queue_s, "first_token_s": ft, "finish_s": self.finish_s,
            "ttft_s": None if ft is None else ft - self.arrival_s,
            "e2e_s": None if self.finish_s is None else self.finish_s - self.arrival_s,
            "preemptions": self.preemptions, "kv_transfer_bytes": self.kv_transfer_bytes,
            "stages": [{"name": n, "start_s": a, "end_s": b} for n, a, b in self.stages],
            "rejected": self.rejected,
        }
        if token_times:
            d["token_times_s"] = self.token_times()
        return d


@dataclass
class KvTransferRecord:
    """One KV transfer from a prefill to a decode replica."""

    request_id: int
    src: str
    dst: str
    bytes: float
    start_s: float
    end_s: float
