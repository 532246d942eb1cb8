"""What the simulated users did and were told, and when each fault happened: the load run's own record.

Times are wall-clock seconds (time.time()), the clock every process on this machine shares, so requests,
faults and the simulated agent's record can be put on one time line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    op: str
    start: float
    end: float
    status: int  # 0: no HTTP answer (connection refused, reset, timeout)
    code: str | None = None
    retryable: bool | None = None
    context: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    path: str = ""

    def overlaps(self, start: float, end: float) -> bool:
        return self.start <= end and self.end >= start


@dataclass
class Attempt:
    status: int
    code: str | None
    body: Any
    start: float
    end: float


@dataclass
class AnswerOp:
    """One answer or message as the user means it: one marker, one idempotency identity, bounded retries."""

    marker: str
    kind: str  # answer | skip | late | message
    session_id: str
    clarification_id: str | None = None
    race: str | None = None  # the race group when two devices answer one question at once
    attempts: list[Attempt] = field(default_factory=list)
    client_message_id: str | None = None
    body: dict[str, Any] | None = None  # a message's request body, to ask again at the verdict

    @property
    def final(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def start(self) -> float:
        return self.attempts[0].start if self.attempts else 0.0

    @property
    def told_ok(self) -> bool:
        """The user was told the answer or message was taken (what a client shows as done)."""
        f = self.final
        if f is None:
            return False
        if f.status in (200, 201):
            return True
        # A retry that finds its own earlier claim the winner: the API names the winner's answer.
        return (f.status == 409 and f.code == "clarification_inactive" and isinstance(f.body, dict)
                and self.marker in str(f.body.get("error", {}).get("details", {}).get("response")))


@dataclass
class Observation:
    """A clarification's state as an API answer showed it."""

    clarification_id: str
    state: str
    answerable: bool
    start: float
    end: float


@dataclass
class Fault:
    target: str  # api | worker | agent
    killed: float
    pid: int
    back: float = 0.0  # the restarted process serves again (the API: after its reconciler, ready)
    reconciler: dict[str, Any] | None = None


ACTIVE_STATES = frozenset({"active_live", "active_detached", "delivery_claimed"})
# Once seen, never active again: a newer turn, a terminal session, a withdrawn or a delivered question.
FINAL_STATES = frozenset({"superseded", "expired", "session_terminal", "cancelled", "answered", "rejected"})


class Journal:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.answers: list[AnswerOp] = []
        self.observations: list[Observation] = []
        self.faults: list[Fault] = []
        self.scenarios: dict[str, int] = {}
        self.outcomes: dict[str, int] = {}

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    def handed_over_live(self) -> bool:
        """Whether any answer reached its waiting agent live (respond said so) in this run."""
        return any(key.endswith(": 200 live") for key in self.outcomes)

    def down(self, target: str, end: float) -> list[tuple[float, float]]:
        """The windows in which `target` was down (killed until back), as far as known at `end`."""
        return [(f.killed, f.back or end) for f in self.faults if f.target == target]
