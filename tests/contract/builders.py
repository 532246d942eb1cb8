"""Aggregates and parts for the contract suite, as plain domain objects."""
from __future__ import annotations

from typing import Any

from chalicelib.domain import clarify
from chalicelib.domain.model import (
    Bundle,
    Delivery,
    Dispatch,
    Option,
    Prompt,
    Question,
    Reservation,
    Row,
    Session,
    State,
    Task,
    Turn,
    Watchdog,
)

AT = "2025-01-01T12:00:00.000000Z"
LATER = "2025-01-01T12:05:00.000000Z"
T1 = Turn(id="t1", seq=1, started_at="2025-01-01T11:00:00.000000Z")
T2 = Turn(id="t2", seq=2, started_at="2025-01-01T11:30:00.000000Z")


def question(qid: str) -> Question:
    return Question(question_id=qid, title=qid.upper(), prompt=f"Pick for {qid}",
                    options=(Option("a", "A"), Option("b", "B", "the other")))


def row(qid: str = "q1", status: str = "pending", detached: Any = False, response: Any = None) -> Row:
    return Row(question=question(qid), status=status, agent_disconnected=detached, response=response)


def bundle(sid: str, name: str = "b1", turn: Turn = T1, *rows: Row, **extra: Any) -> Bundle:
    bid = clarify.clarification_id(sid, name)
    return Bundle(id=bid, turn_id=turn.id, message_id=bid, created_at=turn.started_at, context="why",
                  rows=rows or (row("q1"), row("q2")), **extra)


def session(sid: str, *bundles: Bundle, turn: Turn | None = T1, state: State = State.WAITING_FOR_INPUT,
            task_id: str = "task-1", **extra: Any) -> Session:
    return Session(id=sid, workspace_id="ws-1", task_id=task_id, created_at="2025-01-01T10:00:00.000000Z",
                   updated_at="2025-01-01T10:00:00.000000Z", is_primary=True, state=state, version=1,
                   turn_seq=turn.seq if turn else 0, current_turn=turn, generation=3, execution_id="exec-1",
                   bundles=bundles, **extra)


def task(task_id: str = "task-1") -> Task:
    return Task(id=task_id, workspace_id="ws-1", title="Refactor", workflow_step="todo",
                created_at="2025-01-01T09:00:00.000000Z")


def prompt(message_id: str = "m1", turn_id: str = "t2", generation: int = 4,
           dispatch: Dispatch = Dispatch.PENDING, deadline: str | None = LATER) -> Prompt:
    return Prompt(message_id=message_id, client_message_id=f"c-{message_id}", turn_id=turn_id, content="hello",
                  author_id="user-1", created_at=AT, generation=generation, dispatch=dispatch, deadline=deadline)


def delivery(delivery_id: str = "d1", rows: tuple[str, ...] = ("q1", "q2"), mode: str = "live",
             outcome: str = "answered") -> Delivery:
    return Delivery(delivery_id, rows, outcome, mode, AT, LATER, "key-1", "fp-1")


def reservation(bundle_id: str, turn_id: str = "t2", attempted: bool = False) -> Reservation:
    return Reservation(turn_id=turn_id, seq=2, predecessor=T1, bundle_id=bundle_id, bundle_turn_id=T1.id,
                       row_ids=("q1", "q2"), generation=4, created_at=AT, deadline=LATER, attempted=attempted)


def watchdog(clarification_id: str, turn_id: str = "t1") -> Watchdog:
    return Watchdog(clarification_id=clarification_id, turn_id=turn_id, execution_id="exec-1",
                    prompt_generation=3, due=LATER, text="You previously asked the user ...")


def answers(*qids: str) -> dict[str, dict[str, Any]]:
    return {q: {"question_id": q, "selected_options": ["a"], "custom_text": ""} for q in qids}
