"""Service-layer behaviour over the in-memory store, a scripted agentctl, a fixed clock and counter ids."""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.auth.tokens import Caller
from chalicelib.domain import commands
from chalicelib.domain.errors import (
    DispatchAmbiguous,
    DispatchFailed,
    IdempotencyMismatch,
    NotFound,
    SessionUnavailable,
    StoreUnavailable,
)
from chalicelib.domain.model import Dispatch, Session, State
from chalicelib.functions.reconciler import ReconcileFailed, reconcile
from chalicelib.services import frames, history, messages, readiness, sessions, tasks
from chalicelib.store.memory import MemoryStore
from tests.support.world import USER, World


class Crash(Exception):
    """The invocation died here (a Lambda timeout or an out-of-memory kill)."""


class RecordingStore(MemoryStore):
    """MemoryStore that keeps every session version it writes, and can die once before the attempt marker."""

    def __init__(self) -> None:
        super().__init__()
        self.versions: list[Session] = []
        self.crash_before_marker = False
        self.crash_reads: set[str] = set()

    def _commit(self, *args: Any, **kwargs: Any) -> Session:
        new = super()._commit(*args, **kwargs)
        self.versions.append(new)
        return new

    def set_dispatch(self, session_id: str, message_id: str, *, expect: Dispatch, to: Dispatch, at: str,
                     deadline: str | None, close_turn_id: str | None = None) -> Session:
        if self.crash_before_marker and (expect, to) == (Dispatch.PENDING, Dispatch.ATTEMPTED):
            self.crash_before_marker = False
            raise Crash("died before writing the attempt marker")
        return super().set_dispatch(session_id, message_id, expect=expect, to=to, at=at, deadline=deadline,
                                    close_turn_id=close_turn_id)

    def get_session(self, session_id: str) -> Session | None:
        if session_id in self.crash_reads:
            self.crash_reads.discard(session_id)
            raise StoreUnavailable("the database did not answer")
        return super().get_session(session_id)


class W(World):
    store: RecordingStore

    def send(self, session_id: str, content: str = "hello", client_message_id: str = "m1",  # type: ignore[override]
             **body: Any) -> messages.Admission:
        return super().send(session_id, content, client_message_id, **body)


@pytest.fixture
def w() -> W:
    return W(RecordingStore())


def _frame(kind: str, session: Session, **extra: Any) -> dict[str, Any]:
    turn = session.current_turn
    return {"type": kind, "execution_id": session.execution_id, "prompt_generation": session.generation,
            "turn_id": turn.id if turn else None, **extra}


# ------------------------------------------------------------------ tasks and sessions
def test_create_task__valid_title__stored_in_callers_workspace(w: W) -> None:
    task = tasks.create_task(w.deps, USER, commands.create_task({"title": "  Refactor  "}))
    assert (task.title, task.workspace_id, task.workflow_step) == ("Refactor", "ws-1", "todo")
    assert w.store.get_task(task.id) == task and w.store.writes == 1  # task.created comes from the tasks stream


def test_create_task__agent_caller__not_found_and_nothing_written(w: W) -> None:
    agent = Caller(sub="agent:s", role="agent", workspace_id="ws-1", session_id="s")
    with pytest.raises(NotFound):
        tasks.create_task(w.deps, agent, commands.create_task({"title": "x"}))
    assert w.store.writes == 0


def test_create_session__no_prompt__idle_primary_and_agent_untouched(w: W) -> None:
    task_id = w.task()
    first = sessions.create_session(w.deps, USER, task_id, commands.create_session({}))
    second = sessions.create_session(w.deps, USER, task_id, commands.create_session(None))
    assert first.admission is None and first.session.state == State.IDLE
    assert (first.session.is_primary, second.session.is_primary) == (True, False)
    assert first.session.current_turn is None and w.agent.prompts == []
    listed, _ = sessions.list_sessions(w.deps, USER, task_id, limit=50, cursor=None)
    assert {s.id for s in listed} == {first.session.id, second.session.id}


def test_create_session__with_prompt__running_with_the_prompt_dispatched(w: W) -> None:
    created = sessions.create_session(w.deps, USER, w.task(), commands.create_session({"prompt": "start here"}))
    assert created.admission is not None and created.admission.admission == "sent"
    assert created.session.state == State.RUNNING
    assert created.session.current_turn is not None and created.session.current_turn.id == created.admission.turn_id
    assert [p.text for p in w.agent.prompts] == ["start here"]


def test_create_session__other_workspace_task__not_found_and_nothing_written(w: W) -> None:
    task_id = w.task()
    writes = w.store.writes
    with pytest.raises(NotFound):
        sessions.create_session(w.deps, Caller(sub="u2", role="user", workspace_id="ws-2"), task_id,
                                commands.create_session({}))
    assert w.store.writes == writes and w.store.list_sessions(task_id) == []


# ------------------------------------------------------------------ messages and dispatch
def test_send_message__idle_session__pointer_and_prompt_move_in_one_write(w: W) -> None:
    session = w.session()
    writes, versions = w.store.writes, len(w.store.versions)

    admission = w.send(session.id, "hello")

    written = w.store.versions[versions:]
    assert w.store.writes - writes == 3 == len(written)  # admission, attempt marker, acceptance
    admitted = written[0]
    assert admitted.current_turn is not None and admitted.current_turn.id == admission.turn_id
    assert admitted.current_turn.seq == admitted.turn_seq == 1
    assert admitted.prompt is not None and admitted.prompt.message_id == admission.message_id
    assert (admitted.state, admitted.prompt.dispatch, admitted.generation) == (State.RUNNING, Dispatch.PENDING, 1)
    assert [v.prompt.dispatch for v in written if v.prompt] == [Dispatch.PENDING, Dispatch.ATTEMPTED,
                                                                Dispatch.ACCEPTED]
    assert [v.version for v in written] == [session.version + 1, session.version + 2, session.version + 3]
    assert admission.admission == "sent"


def test_send_message__accepted__agent_called_once_after_the_attempt_marker(w: W) -> None:
    session = w.session()
    admission = w.send(session.id, "hello")
    assert w.agent.dispatch_seen == [Dispatch.ATTEMPTED]
    [request] = w.agent.prompts
    assert (request.session_id, request.execution_id, request.prompt_generation, request.turn_id, request.text) == (
        session.id, session.execution_id, 1, admission.turn_id, "hello")
    assert request.agent_token == f"agent-token:ws-1:{session.id}"
    stored = w.get(session.id)
    assert stored.prompt is not None and stored.prompt.dispatch == Dispatch.ACCEPTED
    reconcile(w.deps, before_traffic=True)  # accepted work is finished: recovery never sends it again
    assert len(w.agent.prompts) == 1


def test_send_message__agent_mid_turn__queued_then_dispatched_when_the_turn_ends(w: W) -> None:
    session = w.session()
    first = w.send(session.id, "first")

    queued = w.send(session.id, "second", client_message_id="m2")

    assert queued.admission == "queued"
    assert [p.text for p in w.agent.prompts] == ["first"]  # the running turn is not interrupted
    assert w.get(session.id).current_turn.id == first.turn_id  # type: ignore[union-attr]
    w.frames(session.id, _frame("turn_completed", w.get(session.id)))
    assert [p.text for p in w.agent.prompts] == ["first", "second"]
    after = w.get(session.id)
    assert after.turn_seq == 2 and after.current_turn is not None and after.current_turn.id != first.turn_id
    assert w.agent.prompts[1].turn_id == after.current_turn.id


def test_send_message__rejected__dispatch_failed_and_session_idle_with_turn_completed(w: W) -> None:
    session = w.session()
    w.agent.outcomes = ["reject"]
    with pytest.raises(DispatchFailed) as raised:
        w.send(session.id, "hello")
    assert raised.value.retryable is True
    stored = w.get(session.id)
    assert stored.state == State.IDLE
    assert stored.current_turn is not None and stored.current_turn.seq == 1
    assert stored.current_turn.completed_at is not None
    assert stored.prompt is not None and stored.prompt.dispatch == Dispatch.REJECTED
    # The session takes the retry: a new turn, dispatched.
    retry = w.send(session.id, "hello", client_message_id="m2")
    assert w.get(session.id).current_turn.id == retry.turn_id  # type: ignore[union-attr]
    assert w.get(session.id).turn_seq == 2 and len(w.agent.prompts) == 2


def test_send_message__ambiguous__dispatch_ambiguous_and_prompt_stays_attempted(w: W) -> None:
    session = w.session()
    w.agent.outcomes = ["ambiguous"]
    with pytest.raises(DispatchAmbiguous) as raised:
        w.send(session.id, "hello")
    assert raised.value.retryable is False
    stored = w.get(session.id)
    assert stored.prompt is not None and stored.prompt.dispatch == Dispatch.ATTEMPTED
    assert stored.state == State.RUNNING and stored.current_turn is not None and stored.current_turn.open
    assert w.store.due_sessions(None) == [session.id]  # the reconciler must be able to find it
    assert len(w.agent.prompts) == 1


def test_send_message__retry_with_same_client_message_id__not_dispatched_again(w: W) -> None:
    """The contract: 200 on a retry with the same client_message_id (same body), never a second delivery."""
    session = w.session()
    first = w.send(session.id, "hello", client_message_id="m1")
    w.frames(session.id, _frame("turn_completed", w.get(session.id)))
    again = w.send(session.id, "hello", client_message_id="m1")
    assert again.message_id == first.message_id
    assert len(w.agent.prompts) == 1
    assert w.get(session.id).turn_seq == 1


def test_send_message__same_client_message_id_other_content__idempotency_mismatch(w: W) -> None:
    session = w.session()
    w.send(session.id, "hello", client_message_id="m1")
    w.frames(session.id, _frame("turn_completed", w.get(session.id)))
    writes = w.store.writes
    with pytest.raises(IdempotencyMismatch):
        w.send(session.id, "something else", client_message_id="m1")
    assert w.store.writes == writes and len(w.agent.prompts) == 1


# ------------------------------------------------------------------ reconciler
def test_reconcile__prompt_left_pending_by_a_crash__dispatched_exactly_once(w: W) -> None:
    session = w.session()
    w.store.crash_before_marker = True
    with pytest.raises(Crash):
        w.send(session.id, "hello")
    stored = w.get(session.id)
    assert stored.prompt is not None and stored.prompt.dispatch == Dispatch.PENDING and w.agent.prompts == []
    assert not readiness.is_ready(w.deps)

    report = reconcile(w.deps, before_traffic=True)

    assert (report.examined, report.prompts_dispatched) == (1, 1)
    assert [(p.turn_id, p.text) for p in w.agent.prompts] == [(stored.prompt.turn_id, "hello")]
    assert w.agent.dispatch_seen == [Dispatch.ATTEMPTED]
    assert w.get(session.id).prompt.dispatch == Dispatch.ACCEPTED  # type: ignore[union-attr]
    assert readiness.is_ready(w.deps)
    again = reconcile(w.deps, before_traffic=True)
    assert again.examined == 0 and len(w.agent.prompts) == 1


def test_reconcile__attempted_prompt__never_dispatched_again(w: W) -> None:
    session = w.session()
    w.agent.outcomes = ["ambiguous"]
    with pytest.raises(DispatchAmbiguous):
        w.send(session.id, "hello")

    report = reconcile(w.deps, before_traffic=True)

    assert (report.examined, report.prompts_dispatched, report.prompts_ambiguous) == (1, 0, 1)
    assert len(w.agent.prompts) == 1
    stored = w.get(session.id)
    assert stored.prompt is not None and stored.prompt.dispatch == Dispatch.ATTEMPTED
    assert w.store.due_sessions(None) == []
    w.clock.advance(3600)
    assert reconcile(w.deps, before_traffic=False).examined == 0 and len(w.agent.prompts) == 1


def test_reconcile__scheduled_before_owner_deadline__leaves_live_work_alone(w: W) -> None:
    session = w.session()
    w.store.crash_before_marker = True
    with pytest.raises(Crash):
        w.send(session.id, "hello")

    early = reconcile(w.deps, before_traffic=False)
    assert early.examined == 0 and w.agent.prompts == []

    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
    late = reconcile(w.deps, before_traffic=False)
    assert (late.examined, late.prompts_dispatched) == (1, 1) and len(w.agent.prompts) == 1
    assert not readiness.is_ready(w.deps)  # only the before-traffic run opens traffic


def test_reconcile__an_item_fails__run_fails_and_traffic_stays_off(w: W) -> None:
    session = w.session()
    w.store.crash_before_marker = True
    with pytest.raises(Crash):
        w.send(session.id, "hello")
    w.store.crash_reads = {session.id}

    with pytest.raises(ReconcileFailed):
        reconcile(w.deps, before_traffic=True)
    assert not readiness.is_ready(w.deps) and w.agent.prompts == []

    assert reconcile(w.deps, before_traffic=True).prompts_dispatched == 1
    assert readiness.is_ready(w.deps) and len(w.agent.prompts) == 1


# ------------------------------------------------------------------ frames
def test_frames__message__appended_to_the_transcript_in_the_current_turn(w: W) -> None:
    session = w.session()
    admission = w.send(session.id, "hello")
    result = w.frames(session.id, _frame("thinking", w.get(session.id), content="hmm"),
                      _frame("message", w.get(session.id), content="Echo: hello"))
    assert (result.applied, result.ignored) == (2, 0)
    # The user's prompt reaches history through the stream function, which this layer does not run.
    entries = [m for m in history.transcript(w.deps, USER, session.id).messages if m.author_type == "agent"]
    assert [(m.type, m.content) for m in entries] == [("thinking", "hmm"), ("message", "Echo: hello")]
    assert {m.turn_id for m in entries} == {admission.turn_id}


def test_frames__turn_completed_with_stale_generation__ignored(w: W) -> None:
    session = w.session()
    w.send(session.id, "hello")
    current = w.get(session.id)
    writes = w.store.writes

    result = w.frames(session.id, {**_frame("turn_completed", current), "prompt_generation": current.generation - 1})

    assert (result.applied, result.ignored) == (0, 1)
    stored = w.get(session.id)
    assert stored.state == State.RUNNING and stored.current_turn is not None and stored.current_turn.open
    assert w.store.writes == writes


def test_frames__turn_completed_for_another_turn__ignored(w: W) -> None:
    session = w.session()
    w.send(session.id, "hello")
    result = w.frames(session.id, {**_frame("turn_completed", w.get(session.id)), "turn_id": "some-older-turn"})
    assert result.applied == 0 and w.get(session.id).current_turn.open  # type: ignore[union-attr]


def test_frames__turn_completed_current__turn_closed_and_session_idle(w: W) -> None:
    session = w.session()
    w.send(session.id, "hello")
    result = w.frames(session.id, _frame("turn_completed", w.get(session.id)))
    stored = w.get(session.id)
    assert result.applied == 1 and stored.state == State.IDLE
    assert stored.current_turn is not None and stored.current_turn.completed_at == w.deps.now()


def test_frames__state_failed__terminal_and_later_frames_ignored(w: W) -> None:
    session = w.session()
    w.send(session.id, "hello")
    assert w.frames(session.id, _frame("state", w.get(session.id), state="FAILED")).applied == 1
    failed = w.get(session.id)
    assert failed.state == State.FAILED
    transcript, writes = w.contents(session.id), w.store.writes

    later = w.frames(session.id, _frame("message", failed, content="too late"), _frame("turn_completed", failed),
                     _frame("state", failed, state="RUNNING"), _frame("state", failed, state="IDLE"))

    assert (later.applied, later.ignored) == (0, 4)
    assert w.get(session.id).state == State.FAILED
    assert w.contents(session.id) == transcript and w.store.writes == writes


def test_frames__user_caller_or_other_sessions_agent__not_found(w: W) -> None:
    session, other = w.session(), w.session()
    body = {"frames": [_frame("message", session, content="x")]}
    with pytest.raises(NotFound):
        frames.apply_frames(w.deps, USER, session.id, body)
    intruder = Caller(sub=f"agent:{other.id}", role="agent", workspace_id="ws-1", session_id=other.id)
    with pytest.raises(NotFound):
        frames.apply_frames(w.deps, intruder, session.id, body)
    assert w.contents(session.id) == []


# ------------------------------------------------------------------ cancel
def test_cancel__idle_session__cancelled_and_agent_told_once(w: W) -> None:
    session = w.session()
    cancelled = sessions.cancel_session(w.deps, USER, session.id)
    assert cancelled.state == State.CANCELLED == w.get(session.id).state
    assert [(c.session_id, c.execution_id, c.silent) for c in w.agent.cancels] == [
        (session.id, session.execution_id, False)]


def test_cancel__repeated__idempotent_without_writes_or_agent_calls(w: W) -> None:
    session = w.session()
    sessions.cancel_session(w.deps, USER, session.id)
    writes = w.store.writes
    again = sessions.cancel_session(w.deps, USER, session.id)
    assert again.state == State.CANCELLED and w.store.writes == writes and len(w.agent.cancels) == 1


def test_cancel__running_turn__terminal_takes_no_more_input_or_frames(w: W) -> None:
    session = w.session()
    w.send(session.id, "hello")
    before = w.get(session.id)
    sessions.cancel_session(w.deps, USER, session.id)
    with pytest.raises(SessionUnavailable):
        w.send(session.id, "more", client_message_id="m2")
    assert w.frames(session.id, _frame("message", before, content="late output"),
                    _frame("state", before, state="IDLE")).applied == 0
    reconcile(w.deps, before_traffic=True)
    assert w.get(session.id).state == State.CANCELLED and len(w.agent.prompts) == 1


def test_cancel__agent_unreachable__still_cancelled(w: W) -> None:
    session = w.session()
    w.agent.cancel_fails = True
    assert sessions.cancel_session(w.deps, USER, session.id).state == State.CANCELLED
    assert w.get(session.id).state == State.CANCELLED


def test_cancel__failed_session__unavailable_and_stays_failed(w: W) -> None:
    session = w.session()
    w.send(session.id, "hello")
    w.frames(session.id, _frame("state", w.get(session.id), state="FAILED"))
    with pytest.raises(SessionUnavailable):
        sessions.cancel_session(w.deps, USER, session.id)
    assert w.get(session.id).state == State.FAILED and w.agent.cancels == []
