"""Clarification services over the in-memory store: pause, detach, supersede, terminal expiry, isolation.

Sessions and rows are constructed directly (as an old writer or another store could have left them) and
written into a MemoryStore; a fake agentctl records cancels. Expectations follow the requirements;
scenario tags name failure scenarios from them.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.agentctl.client import CancelRequest
from chalicelib.auth.tokens import Caller
from chalicelib.domain import clarify
from chalicelib.domain.errors import ClarificationInactive, PendingClarification, StoreUnavailable
from chalicelib.domain.model import (
    Bundle,
    Delivery,
    Message,
    Option,
    Question,
    Row,
    Session,
    State,
    StatusSummary,
    Task,
    Turn,
)
from chalicelib.domain.public import clarification_view
from chalicelib.domain.rules import pending_action
from chalicelib.services import clarifications, history, lifecycle, projection, workflow
from chalicelib.store import codec
from chalicelib.store.memory import MemoryStore
from tests.support.world import World

WS = "ws-1"
USER = Caller(sub="user-1", role="user", workspace_id=WS)
SID = "s1"
T1 = Turn(id="t1", seq=1, started_at="2025-01-01T11:00:00.000000Z")
T2 = Turn(id="t2", seq=2, started_at="2025-01-01T11:30:00.000000Z")
NOW = "2025-01-01T12:00:00.000000Z"
TRUTHY_FLAGS: list[Any] = [True, "true", "1", 1]


class W(World):
    def put(self, session: Session) -> Session:
        """Store the aggregate as another writer left it; returns it as the store reads it back."""
        super().put(session)
        return self.get(session.id)

    def get(self, session_id: str = SID) -> Session:
        return super().get(session_id)

    def rows(self, bundle_id: str, session_id: str = SID) -> dict[str, tuple[str, Any]]:  # type: ignore[override]
        bundle = self.get(session_id).bundle(bundle_id)
        assert bundle is not None
        raw = self.store.items[session_id]["bundles"][bundle_id]["rows"]
        return {r.question.question_id: (r.status, raw[r.question.question_id]["agent_disconnected"])
                for r in bundle.rows}


@pytest.fixture
def w() -> W:
    return W()


def row(qid: str = "q1", status: str = "pending", detached: Any = False, response: Any = None) -> Row:
    question = Question(question_id=qid, title=qid.upper(), prompt=f"Pick for {qid}",
                        options=(Option("a", "A"), Option("b", "B")))
    return Row(question=question, status=status, agent_disconnected=detached, response=response)


def bundle(name: str, turn: Turn, *rows: Row, session_id: str = SID, **extra: Any) -> Bundle:
    bid = clarify.clarification_id(session_id, name)
    return Bundle(id=bid, turn_id=turn.id, message_id=bid, created_at=turn.started_at, context="",
                  rows=rows or (row(),), **extra)


def session(*bundles: Bundle, turn: Turn | None = T1, state: State = State.WAITING_FOR_INPUT,
            session_id: str = SID, task_id: str = "task-1") -> Session:
    return Session(id=session_id, workspace_id=WS, task_id=task_id, created_at="2025-01-01T10:00:00.000000Z",
                   is_primary=True, state=state, version=1, turn_seq=turn.seq if turn else 0, current_turn=turn,
                   generation=3, execution_id="exec-1", bundles=bundles)


def agent_for(session_id: str = SID) -> Caller:
    return Caller(sub=f"agent:{session_id}", role="agent", workspace_id=WS, session_id=session_id)


# ====================================================================== pause_for_input
def test_pause_for_input__snapshotted_turn_still_current__detached_then_cancelled_silently(w: W) -> None:
    b = bundle("b1", T1)
    s = w.put(session(b))

    cancelled = clarifications.pause_for_input(w.deps, s, b.id, T1.id)

    assert cancelled is True
    assert w.rows(b.id) == {"q1": ("pending", True)}
    assert w.agent.cancels == [CancelRequest(session_id=SID, execution_id="exec-1", prompt_generation=3,
                                             silent=True)]


@pytest.mark.parametrize("expected, stored_turn", [(T1.id, T2), (None, T1)],
                         ids=["snapshot-t1-now-t2", "snapshot-no-turn-now-first-turn"])
def test_pause_for_input__turn_changed_during_detachment__no_cancel(w: W, expected: str | None,
                                                                    stored_turn: Turn) -> None:
    """D3: a specific turn and "no turn" are both explicit expectations; a mismatch rejects the cancel."""
    b = bundle("b1", stored_turn)  # the bundle belongs to the turn that is current now
    s = w.put(session(b, turn=stored_turn))

    cancelled = clarifications.pause_for_input(w.deps, s, b.id, expected)

    assert cancelled is False
    assert w.agent.cancels == []


def test_pause_for_input__no_turn_expected_and_none_exists__cancelled(w: W) -> None:
    b = bundle("b1", T1)  # pre-turn history: no durable turn owns it
    s = w.put(session(b, turn=None, state=State.IDLE))

    cancelled = clarifications.pause_for_input(w.deps, s, b.id, None)

    assert cancelled is True and len(w.agent.cancels) == 1 and w.agent.cancels[0].silent is True
    assert w.rows(b.id) == {"q1": ("pending", False)}  # inert: nothing to detach


def test_pause_for_input__stale_snapshot_before_a_newer_turn__no_cancel_and_no_write(w: W) -> None:
    b = bundle("b1", T1)
    snapshot = session(b)
    w.put(replace(snapshot, current_turn=T2, turn_seq=2, state=State.RUNNING))
    writes = w.store.writes

    cancelled = clarifications.pause_for_input(w.deps, snapshot, b.id, T1.id)

    assert cancelled is False and w.agent.cancels == []
    assert w.store.writes == writes and w.rows(b.id) == {"q1": ("pending", False)}


def test_pause_for_input__stale_snapshot_with_nothing_left_to_detach__decides_on_the_durable_turn(
        w: W) -> None:
    """The snapshot says T1 and the bundle is already detached there; meanwhile T2 became current.

    "Still current" is a fact about storage: the pause must not cancel the agent's T2 turn.
    """
    b = bundle("b1", T1, row(detached=True))
    snapshot = session(b)
    w.put(replace(snapshot, current_turn=T2, turn_seq=2, state=State.RUNNING))

    cancelled = clarifications.pause_for_input(w.deps, snapshot, b.id, T1.id)

    assert cancelled is False
    assert w.agent.cancels == []


def test_pause_for_input__terminal_session__no_cancel(w: W) -> None:
    b = bundle("b1", T1, row(status="expired", detached=True))
    s = w.put(session(b, state=State.CANCELLED))

    assert clarifications.pause_for_input(w.deps, s, b.id, T1.id) is False
    assert w.agent.cancels == []


# ====================================================================== detach
def test_detach_bundle__pending_rows__detached_in_one_write_and_returned(w: W) -> None:
    b = bundle("b1", T1, row("q1"), row("q2"), row("q3", status="cancelled"))
    s = w.put(session(b))
    writes = w.store.writes

    stored, detached = clarifications.detach_bundle(w.deps, s, b.id)

    assert detached == ["q1", "q2"] and w.store.writes == writes + 1
    assert w.rows(b.id) == {"q1": ("pending", True), "q2": ("pending", True), "q3": ("cancelled", False)}
    assert stored == w.get() and clarify.derived_state(stored, stored.bundles[0], NOW) == "active_detached"


def test_detach_bundle__repeated__returns_nothing_and_writes_nothing(w: W) -> None:
    b = bundle("b1", T1)
    s = w.put(session(b))
    clarifications.detach_bundle(w.deps, s, b.id)
    writes, stored = w.store.writes, w.get()

    again = [clarifications.detach_bundle(w.deps, snap, b.id)[1] for snap in (s, stored)]

    assert again == [[], []]
    assert w.store.writes == writes and w.get() == stored


@pytest.mark.parametrize("flag", TRUTHY_FLAGS, ids=["bool", "string-true", "string-1", "number-1"])
def test_detach_bundle__flag_stored_as_truthy_variant__semantic_noop(w: W, flag: Any) -> None:
    """D1: a row another writer marked detached with true, "true", "1" or 1 is not detached again."""
    b = bundle("b1", T1, row(detached=flag))
    s = w.put(session(b))
    writes = w.store.writes

    assert clarifications.detach_bundle(w.deps, s, b.id)[1] == []
    assert clarifications.detach(w.deps, agent_for(), b.id) == []

    assert w.store.writes == writes and w.get() == s
    assert clarify.derived_state(s, b, NOW) == "active_detached"
    assert clarification_view(s, b, now=NOW)["agent_disconnected"] is True


@pytest.mark.parametrize("flag", TRUTHY_FLAGS, ids=["bool", "string-true", "string-1", "number-1"])
def test_complete_turn__flag_stored_as_truthy_variant__completion_pass_skips_the_row(w: W, flag: Any) -> None:
    b = bundle("b1", T1, row("q1", detached=flag), row("q2"))
    s = w.put(session(b, state=State.WAITING_FOR_INPUT))

    completed = lifecycle.complete_turn(w.deps, s, T1.id)

    assert completed is not None and completed.current_turn is not None
    assert completed.current_turn.completed_at is not None
    assert w.rows(b.id) == {"q1": ("pending", flag), "q2": ("pending", True)}  # q1 untouched
    assert completed.version == s.version + 1


@pytest.mark.parametrize("stored, expected", [
    (True, True), ("true", True), ("1", True), (1, True), ("TRUE", True),
    (False, False), ("false", False), ("0", False), (0, False), ("", False), (None, False),
], ids=lambda v: repr(v))
def test_codec__stored_detach_flag__read_as_boolean(stored: Any, expected: bool) -> None:
    item = codec.session_to_item(session(bundle("b1", T1)))
    stored_row = item["bundles"][f"{SID}.b1"]["rows"]["q1"]
    if stored is None:
        del stored_row["agent_disconnected"]
    else:
        stored_row["agent_disconnected"] = stored

    read = codec.session_from_item(item)

    assert read.bundles[0].rows[0].agent_disconnected is expected


def test_detach_bundle__older_turn_bundle__nothing_written(w: W) -> None:
    b = bundle("b1", T1)
    s = w.put(session(b, turn=T2, state=State.RUNNING))
    writes = w.store.writes

    assert clarifications.detach_bundle(w.deps, s, b.id)[1] == []
    assert w.store.writes == writes and w.rows(b.id) == {"q1": ("pending", False)}


def test_complete_turn__live_bundles__detached_with_the_completion_then_noop(w: W) -> None:
    older = bundle("old", T1, row(detached=False))
    live = bundle("live", T2, row("q1"), row("q2"))
    s = w.put(session(older, live, turn=T2, state=State.WAITING_FOR_INPUT))

    completed = lifecycle.complete_turn(w.deps, s, T2.id)

    assert completed is not None and completed.version == s.version + 1
    assert completed.state == State.WAITING_FOR_INPUT and pending_action(completed) == "clarification"
    assert w.rows(live.id) == {"q1": ("pending", True), "q2": ("pending", True)}
    assert w.rows(older.id) == {"q1": ("pending", False)}  # superseded: no completion pass for it
    writes = w.store.writes
    assert lifecycle.complete_turn(w.deps, w.get(), T2.id) is None
    assert lifecycle.complete_turn(w.deps, s, T2.id) is None  # a stale copy of the same completion
    assert w.store.writes == writes


# ====================================================================== supersede
def test_send_message__after_the_turn_ended__older_bundle_superseded_everywhere(w: W) -> None:
    b = bundle("b1", T1, row(detached=True))
    closed = replace(T1, completed_at="2025-01-01T11:10:00.000000Z")
    w.put(session(b, turn=closed, state=State.WAITING_FOR_INPUT))
    task = w.store.get_task("task-1")
    assert task is not None
    with pytest.raises(PendingClarification):
        workflow.guard(w.deps, task)

    admission = w.send(SID, "go on", "m1")

    s = w.get()
    assert admission.admission == "sent" and s.current_turn is not None and s.current_turn.id == admission.turn_id
    assert clarify.derived_state(s, s.bundles[0], NOW) == "superseded"
    view = clarification_view(s, s.bundles[0], now=NOW)
    assert (view["answerable"], view["late_answer_allowed"]) == (False, True)
    assert pending_action(s) is None
    workflow.guard(w.deps, task)  # no longer blocks
    assert clarifications.detach_bundle(w.deps, s, b.id)[1] == []
    with pytest.raises(ClarificationInactive) as err:
        clarifications.cancel(w.deps, agent_for(), b.id)
    assert err.value.details["reason"] == "superseded"
    assert w.rows(b.id) == {"q1": ("pending", True)}  # history keeps its row status


def test_delete_message__every_message_of_the_newer_turn__pointer_stays_and_older_bundle_inert(w: W) -> None:
    b = bundle("b1", T1)
    s = w.put(session(b, turn=T2, state=State.RUNNING))
    newer = [Message(id=f"m{i}", session_id=SID, workspace_id=WS, task_id="task-1", turn_id=T2.id, turn_seq=2,
                     author_type=author, type="message", content="x", created_at=f"2025-01-01T11:4{i}:00.000000Z")
             for i, author in enumerate(("user", "agent"))]
    for m in newer:
        w.store.put_message(m)

    for m in newer:
        history.delete_message(w.deps, USER, SID, m.id)

    after = w.get()
    assert after.current_turn == T2 and after.turn_seq == 2
    assert w.store.list_history(SID)[1] == []
    assert clarify.derived_state(after, after.bundles[0], NOW) == "superseded" and pending_action(after) is None
    assert after.bundles == s.bundles


# ====================================================================== terminal expiry
@pytest.mark.parametrize("terminal", [State.COMPLETED, State.FAILED, State.CANCELLED])
def test_end_session__current_turn_pending_rows__expired_in_the_same_write(w: W, terminal: State) -> None:
    older = bundle("old", T1)
    current = bundle("cur", T2, row("q1"), row("q2", status="answered", response={"selected_options": ["a"]}))
    s = w.put(session(older, current, turn=T2, state=State.WAITING_FOR_INPUT))
    writes = w.store.writes

    ended = lifecycle.end_session(w.deps, s, terminal)

    assert ended.state == terminal and w.store.writes == writes + 1
    assert w.rows(current.id) == {"q1": ("expired", True), "q2": ("answered", False)}
    assert w.rows(older.id) == {"q1": ("pending", False)}  # another bundle: untouched
    assert clarification_view(ended, ended.bundles[1], now=NOW)["answerable"] is False
    assert pending_action(ended) is None


def test_end_session__already_in_that_state__no_write(w: W) -> None:
    s = w.put(session(bundle("b1", T1, row(status="expired", detached=True)), state=State.CANCELLED))
    writes = w.store.writes

    assert lifecycle.end_session(w.deps, s, State.CANCELLED) == s
    assert w.store.writes == writes


# ====================================================================== isolation
def test_agent_cancel__one_of_two_bundles__only_that_bundle_changes(w: W) -> None:
    a, b = bundle("a", T1), bundle("b", T1, row("q1"), row("q2"))
    w.put(session(a, b))

    cancelled = clarifications.cancel(w.deps, agent_for(), a.id)

    assert cancelled == ["q1"]
    assert w.rows(a.id) == {"q1": ("cancelled", False)}
    assert w.rows(b.id) == {"q1": ("pending", False), "q2": ("pending", False)}
    s = w.get()
    assert [clarify.derived_state(s, x, NOW) for x in s.bundles] == ["cancelled", "active_live"]
    assert pending_action(s) == "clarification"


def test_detach__one_of_two_bundles__only_that_bundle_changes(w: W) -> None:
    a, b = bundle("a", T1), bundle("b", T1)
    w.put(session(a, b))

    assert clarifications.detach(w.deps, agent_for(), a.id) == ["q1"]

    assert w.rows(a.id) == {"q1": ("pending", True)} and w.rows(b.id) == {"q1": ("pending", False)}


def test_delete_message__one_bundle__only_that_bundle_removed(w: W) -> None:
    a, b = bundle("a", T1), bundle("b", T1, row(detached=True))
    s = w.put(session(a, b))

    history.delete_message(w.deps, USER, SID, a.message_id)

    after = w.get()
    assert after.bundles == (b,) and after.current_turn == s.current_turn
    assert pending_action(after) == "clarification"


# ====================================================================== workflow guard
class FailingSessions(MemoryStore):
    def list_sessions(self, task_id: str) -> list[Session]:
        raise StoreUnavailable("injected: index unreachable")


def test_guard__authority_read_fails__blocks(w: W) -> None:
    deps = replace(w.deps, store=FailingSessions())
    task = Task(id="task-1", workspace_id=WS, title="t", workflow_step="todo", created_at="x")

    with pytest.raises(PendingClarification):
        workflow.guard(deps, task)


@pytest.mark.parametrize("case, blocks", [
    ("live", True), ("detached", True), ("superseded", False), ("terminal", False), ("answered", False),
])
def test_guard__bundle_state__blocks_only_active_bundles(w: W, case: str, blocks: bool) -> None:
    rows = {"live": row(), "detached": row(detached="1"), "superseded": row(), "terminal": row(),
            "answered": row(status="answered", response={"selected_options": ["a"]})}
    b = bundle("b1", T1, rows[case])
    turn = T2 if case == "superseded" else T1
    state = State.CANCELLED if case == "terminal" else State.WAITING_FOR_INPUT
    w.put(session(b, turn=turn, state=state))
    task = w.store.get_task("task-1")
    assert task is not None

    if blocks:
        with pytest.raises(PendingClarification):
            workflow.guard(w.deps, task)
    else:
        workflow.guard(w.deps, task)


# ====================================================================== projections and derived states
def test_refresh_task_summary__existing_summary_disagrees__repaired_once(w: W) -> None:
    w.put(session(bundle("b1", T1), turn=T2, state=State.RUNNING))  # only a superseded question
    stale = w.store.set_task_summary("task-1", pending_action="clarification", primary_session_id=SID,
                                     expected_revision=0, at=NOW)

    repaired = projection.refresh_task_summary(w.deps, "task-1")
    again = projection.refresh_task_summary(w.deps, "task-1")

    assert repaired is not None and repaired.summary == StatusSummary(None, stale.summary.revision + 1, SID,
                                                                      repaired.summary.updated_at)
    assert repaired.summary.updated_at  # the revision's time: its event's stable position in the feed
    assert again == repaired
    events = [e for _, _, e in w.store.list_events(WS, low_sk="", after_sk="", written_after="", limit=100)]
    assert [(e.type, e.payload["status_summary"]["pending_action"]) for e in events] == [
        ("task.status_summary.updated", None)]


class RacingProjector(MemoryStore):
    """Another projector writes a newer summary just before our first compare-and-set lands."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False

    def set_task_summary(self, task_id: str, *, pending_action: str | None, primary_session_id: str | None,
                         expected_revision: int, at: str, **kw: Any) -> Task:
        if not self.raced:
            self.raced = True
            super().set_task_summary(task_id, pending_action="clarification", primary_session_id="someone-else",
                                     expected_revision=expected_revision, at=at)
        return super().set_task_summary(task_id, pending_action=pending_action,
                                        primary_session_id=primary_session_id, expected_revision=expected_revision,
                                        at=at)


def test_refresh_task_summary__compare_and_set_lost__reloads_and_reapplies_the_rule(w: W) -> None:
    """P4: the read-time repair and the live projector race; the loser reloads and re-derives, never
    overwriting a newer revision with its stale computation."""
    store = RacingProjector()
    deps = replace(w.deps, store=store)
    store.put_task(Task(id="task-1", workspace_id=WS, title="t", workflow_step="todo", created_at="x"))
    store.create_session(session(bundle("b1", T1), turn=T2, state=State.RUNNING))  # nothing active

    repaired = projection.refresh_task_summary(deps, "task-1")

    assert repaired is not None and repaired.summary == StatusSummary(None, 2, SID, NOW)
    events = [e for _, _, e in store.list_events(WS, low_sk="", after_sk="", written_after="", limit=100)]
    assert [e.payload["status_summary"]["revision"] for e in events] == [2]


@pytest.mark.parametrize("rows, extra, expected", [
    ((row(),), {}, "active_live"),
    ((row(detached=True),), {}, "active_detached"),
    ((row(status="answered", response={"selected_options": ["a"]}),), {}, "answered"),
    ((row(status="rejected", response={"rejected": True}),), {}, "rejected"),
    ((row(status="cancelled"),), {}, "cancelled"),
    ((row(status="answered", response={"selected_options": ["a"]}),),
     {"delivery": Delivery("d1", ("q1",), "answered", "live", "c", "dl")}, "delivery_claimed"),
], ids=["live", "detached", "answered", "rejected", "cancelled", "claimed"])
def test_clarification_view__row_states__derived_state_and_answerable(rows: tuple[Row, ...], extra: dict[str, Any],
                                                                     expected: str) -> None:
    b = bundle("b1", T1, *rows, **extra)
    s = session(b)

    view = clarification_view(s, b, now=NOW)

    assert view["state"] == expected
    assert view["answerable"] is (expected in ("active_live", "active_detached"))
    assert view["late_answer_allowed"] is (expected == "cancelled")  # a withdrawn question may be answered late
