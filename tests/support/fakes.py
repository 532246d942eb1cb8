"""Deterministic stand-ins for the outside world: a scripted agentctl, a fixed-step clock, an injected sleep
that moves that clock, counter ids. Every suite that runs services in-process uses these."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib.agentctl.client import AgentctlAmbiguous, CancelRequest, PromptOutcome, PromptRequest
from chalicelib.domain.model import Dispatch
from scripts.local.fence import CancelFence

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
    turn_seen: str | None = None  # the stored current turn when agentctl was called
    state_seen: Any = None  # the stored session state when agentctl was called

    @property
    def may_have_reached_agent(self) -> bool:
        """Everything but a synchronous rejection may have reached the agent: at most one may carry an answer."""
        return self.outcome != "reject"


@dataclass
class FakeAgentctl:
    """Answers prompts as scripted (`outcomes`, then `default`); records every prompt and cancel.

    `steering` False (the default): `steer` refuses, so messages to a busy agent are queued, as with a
    runtime that cannot steer. True: steered messages are accepted and recorded like prompts.
    `on_cancel` runs once on the next cancel: what the agent runtime does meanwhile (frames, say).
    """

    store: Any = None  # optional: lets the fake record the stored dispatch state at call time
    outcomes: list[str] = field(default_factory=list)
    default: str = "accept"
    prompt_calls: list[PromptCall] = field(default_factory=list)
    cancels: list[CancelRequest] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # "prompt" / "cancel" / "steer", in order
    cancel_fails: bool = False
    steering: bool = False
    on_cancel: Callable[[CancelRequest], None] | None = None
    # agentctl's contract (scripts/local/fence.py): a prompt or steer whose generation a cancel already
    # covered is refused; a cancel that overtook its prompt still wins.
    fence: CancelFence = field(default_factory=CancelFence)

    def script(self, *outcomes: str) -> None:
        for outcome in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown agentctl outcome {outcome!r}")
        self.outcomes = list(outcomes)

    def prompt(self, request: PromptRequest) -> PromptOutcome:
        outcome = self.outcomes.pop(0) if self.outcomes else self.default
        if not self.fence.admits(request.session_id, request.prompt_generation):
            outcome = "reject"
        seen, turn, state = None, None, None
        if self.store is not None:
            stored = self.store.get_session(request.session_id)
            seen = stored.prompt.dispatch if stored is not None and stored.prompt is not None else None
            turn = stored.current_turn.id if stored is not None and stored.current_turn is not None else None
            state = stored.state if stored is not None else None
        self.prompt_calls.append(PromptCall(request, outcome, seen, turn, state))
        self.calls.append("prompt")
        if outcome == "ambiguous":
            raise AgentctlAmbiguous("read timeout: the request may not have reached the agent")
        if outcome == "accept-then-fail":
            raise AgentctlAmbiguous("connection reset after the agent accepted the prompt")
        return PromptOutcome.ACCEPTED if outcome == "accept" else PromptOutcome.REJECTED

    def steer(self, request: PromptRequest) -> bool:
        if not self.steering or not self.fence.admits(request.session_id, request.prompt_generation):
            return False
        self.prompt_calls.append(PromptCall(request, "accept", None))
        self.calls.append("steer")
        return True

    def cancel(self, request: CancelRequest) -> None:
        self.cancels.append(request)
        self.calls.append("cancel")
        self.fence.cancel(request.session_id, request.prompt_generation)
        hook, self.on_cancel = self.on_cancel, None
        if hook is not None:
            hook(request)
        if self.cancel_fails:
            raise AgentctlAmbiguous("connection reset")

    def end(self, session_id: str) -> None:
        """The runtime ended this session itself (it reported a terminal state): no prompt is taken any more."""
        self.fence.end(session_id)

    @property
    def prompts(self) -> list[PromptRequest]:
        return [c.request for c in self.prompt_calls]

    @property
    def seen(self) -> list[tuple[Dispatch | None, str | None]]:
        """(stored dispatch state, stored current turn) at each prompt call."""
        return [(c.dispatch_seen, c.turn_seen) for c in self.prompt_calls]

    @property
    def dispatch_seen(self) -> list[Dispatch | None]:
        return [c.dispatch_seen for c in self.prompt_calls]

    def carrying(self, marker: str) -> list[PromptCall]:
        """Prompts that may have handed `marker` to the agent (synchronous rejections excluded)."""
        return [c for c in self.prompt_calls if marker in c.request.text and c.may_have_reached_agent]


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


class Sleeper:
    """The injected sleep: advances the clock and runs what a test scheduled for the Nth sleep, so what
    "happens while a party waits" is exact."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.calls = 0
        self.slept = 0.0
        self.actions: dict[int, Callable[[], None]] = {}
        self.every: Callable[[float], None] | None = None

    def at(self, call: int, action: Callable[[], None]) -> None:
        self.actions[call] = action

    def __call__(self, seconds: float) -> None:
        self.calls += 1
        self.slept += seconds
        self.clock.advance(seconds)
        action = self.actions.pop(self.calls, None)
        if action is not None:
            action()
        if self.every is not None:
            self.every(seconds)


class CounterIds:
    """id-0001, id-0002, ...: deterministic, sortable, and free of the clarification-id separator."""

    def __init__(self, prefix: str = "id") -> None:
        self.prefix = prefix
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self.prefix}-{next(self._counter):04d}"


def agent_token(workspace_id: str, session_id: str) -> str:
    return f"agent-token:{workspace_id}:{session_id}"


__all__ = ["FakeAgentctl", "PromptCall", "StepClock", "Sleeper", "CounterIds", "agent_token", "START", "OUTCOMES"]
