"""Plain, immutable domain objects. No I/O, no clock, no ids generated here."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class State(StrEnum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    IDLE = "IDLE"
    WAITING_FOR_INPUT = "WAITING_FOR_INPUT"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED})
# States in which the session takes an ordinary user message (IDLE included: a message starts a turn).
INPUT_CAPABLE_STATES = frozenset({State.IDLE, State.RUNNING, State.WAITING_FOR_INPUT})
# States in which a new user turn can start right away (no agent turn is running).
TURN_START_STATES = frozenset({State.IDLE, State.WAITING_FOR_INPUT})


class Dispatch(StrEnum):
    """Where the latest prompt of a session stands between admission and the agent."""

    PENDING = "pending"  # stored, agentctl not called yet: the reconciler may dispatch it
    ATTEMPTED = "attempted"  # at-most-once boundary: agentctl may have it, never re-dispatch
    ACCEPTED = "accepted"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Turn:
    """The current-turn pointer: the session's turn authority."""

    id: str
    seq: int
    started_at: str
    completed_at: str | None = None

    @property
    def open(self) -> bool:
        return self.completed_at is None


@dataclass(frozen=True)
class Prompt:
    """The latest user message admitted to the session, with its dispatch state."""

    message_id: str
    client_message_id: str
    turn_id: str
    content: str
    author_id: str
    created_at: str
    generation: int
    dispatch: Dispatch
    deadline: str | None = None
    reply_to: Mapping[str, Any] | None = None  # a late answer's question context
    hidden: bool = False  # the user deleted its transcript message


@dataclass(frozen=True)
class Option:
    option_id: str
    label: str
    description: str = ""


@dataclass(frozen=True)
class Question:
    question_id: str
    title: str
    prompt: str
    options: tuple[Option, ...]


@dataclass(frozen=True)
class Row:
    """One question of a bundle with its lifecycle status."""

    question: Question
    status: str
    agent_disconnected: bool = False
    response: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Delivery:
    """A response claim's delivery intent: retired only by a durable confirmation or resume boundary."""

    delivery_id: str
    row_ids: tuple[str, ...]
    outcome: str  # answered | rejected
    mode: str  # live | detached
    claimed_at: str
    deadline: str
    idempotency_key: str = ""
    fingerprint: str = ""
    confirmed_at: str | None = None
    result: str | None = None  # live | resumed | recorded | ambiguous

    @property
    def pending(self) -> bool:
        return self.confirmed_at is None


@dataclass(frozen=True)
class Bundle:
    """A clarification: 1-4 questions the agent asked inside one turn."""

    id: str
    turn_id: str
    message_id: str
    created_at: str
    context: str
    rows: tuple[Row, ...]
    delivery: Delivery | None = None
    waiter_until: str | None = None
    dismissed_by: tuple[str, ...] = ()
    late_message_id: str | None = None
    turn_seq: int = 0  # its turn's sequence number, where its transcript anchor sorts (0: stored before it was kept)


@dataclass(frozen=True)
class Reservation:
    """An unpublished successor turn reserved for a detached answer's resume, with recovery metadata."""

    turn_id: str
    seq: int
    predecessor: Turn
    bundle_id: str
    bundle_turn_id: str
    row_ids: tuple[str, ...]
    generation: int
    created_at: str
    deadline: str
    attempted: bool = False


@dataclass(frozen=True)
class StartEvent:
    """The start-event outbox marker: a resumed successor turn whose turn.started (and turn.completed, once
    it completed) must reach the event bus before the marker is cleared."""

    turn_id: str
    seq: int
    started_at: str


@dataclass(frozen=True)
class DeferredReady:
    """A predecessor's `ready` that outlasted its bounded wait on an unresolved reservation. Kept until the
    reservation resolves: then it completes its turn if its generation still owns the session, else it is
    dropped (it can never complete the reserved successor)."""

    generation: int
    turn_id: str
    at: str


@dataclass(frozen=True)
class Watchdog:
    """Armed by a confirmed live delivery: if the agent shows no activity, the answer is re-prompted."""

    clarification_id: str
    turn_id: str
    execution_id: str
    prompt_generation: int
    due: str
    text: str


@dataclass(frozen=True)
class Quarantine:
    """The reconciler could not repair this aggregate: it is set apart until an operator releases it."""

    reason: str
    at: str


@dataclass(frozen=True)
class Session:
    """The session aggregate: all operational truth of one session (one DynamoDB item)."""

    id: str
    workspace_id: str
    task_id: str
    created_at: str
    is_primary: bool
    state: State
    version: int
    turn_seq: int = 0
    current_turn: Turn | None = None
    generation: int = 0
    execution_id: str = ""
    prompt: Prompt | None = None
    bundles: tuple[Bundle, ...] = ()
    updated_at: str = ""
    reservation: Reservation | None = None
    start_event: StartEvent | None = None
    watchdog: Watchdog | None = None
    deferred_ready: DeferredReady | None = None
    recon_due: str | None = None
    queue: tuple[Prompt, ...] = ()  # messages admitted while the agent was mid-turn, in order
    quarantine: Quarantine | None = None
    archived: int = 0  # closed bundles moved to history so far (readers skip the archive while it is 0)

    @property
    def quarantined(self) -> bool:
        return self.quarantine is not None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def bundle(self, bundle_id: str) -> Bundle | None:
        return next((b for b in self.bundles if b.id == bundle_id), None)


@dataclass(frozen=True)
class StatusSummary:
    pending_action: str | None = None
    revision: int = 0
    primary_session_id: str | None = None
    updated_at: str = ""  # when this revision was written: its event's time, stable across republishing
    activity_at: str = ""  # the latest session change it took in (a turn, a state, a question)


@dataclass(frozen=True)
class Task:
    id: str
    workspace_id: str
    title: str
    workflow_step: str
    created_at: str
    summary: StatusSummary = field(default_factory=StatusSummary)
    session_ids: tuple[str, ...] | None = None  # None: a task stored before tasks listed their sessions

    @property
    def last_activity_at(self) -> str:
        return max(self.created_at, self.summary.updated_at, self.summary.activity_at)


@dataclass(frozen=True)
class TurnRecord:
    """History copy of a turn, kept in step with the aggregate by the stream function."""

    id: str
    session_id: str
    seq: int
    started_at: str
    completed_at: str | None = None


@dataclass(frozen=True)
class Message:
    """A transcript entry (user prompt, agent output, or the anchor of a clarification bundle)."""

    id: str
    session_id: str
    workspace_id: str
    task_id: str
    turn_id: str
    turn_seq: int
    author_type: str  # user | agent | system
    type: str  # message | thinking | tool | clarification | status
    content: str
    created_at: str
    clarification_id: str | None = None
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Event:
    """A client event. `id` is stable: derived from the change that caused it."""

    id: str
    workspace_id: str
    type: str
    task_id: str
    session_id: str | None
    payload: Mapping[str, Any]
    at: str
