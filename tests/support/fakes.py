"""Deterministic stand-ins for the outside world: a scripted agentctl, a fixed-step clock, counter ids.

Same idea as the fakes inside tests/unit/test_services_memory.py, kept here so other suites can share them.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib.agentctl.client import AgentctlAmbiguous, CancelRequest, PromptOutcome, PromptRequest
from chalicelib.domain.model import Dispatch

START = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

# What the scripted agent does with one prompt:
#   accept            202: the agent has it.
#   reject            409: the agent refused it synchronously (it does not have it).
#   ambiguous         timeout/transport error before the agent got it (the caller cannot know which).
#   accept-then-fail  the agent has it, but the transport failed afterwards (the caller sees ambiguity).
OUTCOMES = ("accept", "reject", "ambiguous", "accept-then-fail")


@dataclass(frozen=True)
class PromptCall:
    request: PromptRequest
    outcome: str
    dispatch_seen: Dispatch | None  # the stored dispatch state of the session's prompt when agentctl was called

    @property
    def may_have_reached_agent(self) -> bool:
        """Everything but a synchronous rejection may have reached the agent: at most one may carry an answer."""
        return self.outcome != "reject"


@dataclass
class FakeAgentctl:
    """Answers prompts as scripted (`outcomes`, then `default`); records every prompt and cancel.

    `steering` False (the default): `steer` refuses, so messages to a busy agent are queued, as with a
    runtime that cannot steer. True: steered messages are accepted and recorded like prompts.
    """

    store: Any = None  # optional: lets the fake record the stored dispatch state at call time
    outcomes: list[str] = field(default_factory=list)
    default: str = "accept"
    calls: list[PromptCall] = field(default_factory=list)
    cancels: list[CancelRequest] = field(default_factory=list)
    cancel_fails: bool = False
    steering: bool = False

    def script(self, *outcomes: str) -> None:
        for outcome in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown agentctl outcome {outcome!r}")
        self.outcomes = list(outcomes)

    def prompt(self, request: PromptRequest) -> PromptOutcome:
        outcome = self.outcomes.pop(0) if self.outcomes else self.default
        seen = None
        if self.store is not None:
            stored = self.store.get_session(request.session_id)
            seen = stored.prompt.dispatch if stored is not None and stored.prompt is not None else None
        self.calls.append(PromptCall(request, outcome, seen))
        if outcome == "ambiguous":
            raise AgentctlAmbiguous("read timeout: the request may not have reached the agent")
        if outcome == "accept-then-fail":
            raise AgentctlAmbiguous("connection reset after the agent accepted the prompt")
        return PromptOutcome.ACCEPTED if outcome == "accept" else PromptOutcome.REJECTED

    def steer(self, request: PromptRequest) -> bool:
        if not self.steering:
            return False
        self.calls.append(PromptCall(request, "accept", None))
        return True

    def cancel(self, request: CancelRequest) -> None:
        self.cancels.append(request)
        if self.cancel_fails:
            raise AgentctlAmbiguous("connection reset")

    @property
    def prompts(self) -> list[PromptRequest]:
        return [c.request for c in self.calls]

    def carrying(self, marker: str) -> list[PromptCall]:
        """Prompts that may have handed `marker` to the agent (synchronous rejections excluded)."""
        return [c for c in self.calls if marker in c.request.text and c.may_have_reached_agent]


class StepClock:
    """A fixed clock that moves `step` forward on every reading (0: frozen), and on `advance`."""

    def __init__(self, start: datetime = START, step: timedelta = timedelta(0)) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> datetime:
        current = self.now
        self.now = current + self.step
        return current

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class CounterIds:
    """id-0001, id-0002, ...: deterministic, sortable, and free of the clarification-id separator."""

    def __init__(self, prefix: str = "id") -> None:
        self.prefix = prefix
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self.prefix}-{next(self._counter):04d}"


def agent_token(workspace_id: str, session_id: str) -> str:
    return f"agent-token:{workspace_id}:{session_id}"


__all__ = ["FakeAgentctl", "PromptCall", "StepClock", "CounterIds", "agent_token", "START", "OUTCOMES"]
