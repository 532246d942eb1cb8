"""The repository rule as a condition agrees with the rule as a predicate, on both stores; transactions,
size limits and the plain records behave alike."""
from __future__ import annotations

import itertools
import uuid
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.domain.errors import AlreadyRemembered, ConditionFailed, ItemTooLarge
from chalicelib.domain.model import Event, Message, State, TurnRecord
from chalicelib.domain.rules import bundle_is_active
from chalicelib.store import codec
from chalicelib.store import conditions as c
from chalicelib.store.document import Put, Write
from chalicelib.store.dynamo import DynamoStore
from chalicelib.store.memory import MemoryStore
from chalicelib.store.plain import PlainRecords
from chalicelib.store.protocol import Remembered
from chalicelib.store.size import MAX_ITEM_BYTES, item_size
from tests.contract.builders import AT, LATER, T1, T2, bundle, prompt, row, session, task
from tests.contract.test_aggregate_writes import closed_bundle
from tests.support.stores import put_raw

STATUSES: list[Any] = ["pending", "", None, "answered", "rejected", "expired", "cancelled", "bogus"]
STATES = [State.WAITING_FOR_INPUT, State.RUNNING, State.IDLE, State.COMPLETED, State.CANCELLED]


def _sid() -> str:
    return f"s{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------ the rule, read and written
RULE_CASES = [(a, b, turn, state) for a, b in itertools.combinations_with_replacement(STATUSES, 2)
              for turn in ("current", "older") for state in STATES]


def test_bundle_active_condition__equals_the_rule__for_every_row_status_turn_and_state(store: Any) -> None:
    mismatches = []
    for first, second, turn, state in RULE_CASES:
        sid = _sid()
        s = session(sid, bundle(sid), turn=T1 if turn == "current" else T2, state=state)
        item = codec.session_to_item(s)
        for qid, status in (("q1", first), ("q2", second)):
            if status is None:
                item["bundles"][f"{sid}.b1"]["rows"][qid].pop("status")
            else:
                item["bundles"][f"{sid}.b1"]["rows"][qid]["status"] = status
        put_raw(store, item)
        stored = store.get_session(sid)
        rule = bundle_is_active(stored, stored.bundle(f"{sid}.b1"))
        probe = Write((c.session_exists(), c.bundle_active(f"{sid}.b1", ["q1", "q2"])), (Put(("probe",), 1),))
        try:
            store._commit(sid, probe)
            written = True
        except ConditionFailed:
            written = False
        if written != rule:
            mismatches.append((first, second, turn, state.value, rule, written))
    assert mismatches == [] and len(RULE_CASES) == 360


# ------------------------------------------------------------------ transactions
def _running(store: Any) -> str:
    sid = _sid()
    store.create_session(session(sid, turn=T1, state=State.RUNNING))
    return sid


def _admit(store: Any, sid: str, key: str, expected: str = "t1") -> Any:
    return store.admit(sid, prompt(turn_id=""), start=None, expected_turn_id=expected, from_states=[State.RUNNING],
                       link_bundle=None, remember=Remembered(key, "fp", {"message_id": "m1"}, 1), queue_cap=5,
                       at=AT)


def test_admit_with_record__both_written_together(store: Any) -> None:
    sid, key = _running(store), f"message:{uuid.uuid4().hex}"
    admitted = _admit(store, sid, key)
    assert admitted.queue == (prompt(turn_id=""),)
    assert store.get_remembered(key) == Remembered(key, "fp", {"message_id": "m1"}, 1)


def test_admit_with_record__key_taken__nothing_written(store: Any) -> None:
    sid, key = _running(store), f"message:{uuid.uuid4().hex}"
    store.remember(Remembered(key, "other", {"message_id": "m0"}, 1))
    before = store.get_session(sid)
    with pytest.raises(AlreadyRemembered):
        _admit(store, sid, key)
    assert store.get_session(sid) == before


def test_admit_with_record__condition_fails__no_record_and_current_returned(store: Any) -> None:
    sid, key = _running(store), f"message:{uuid.uuid4().hex}"
    before = store.get_session(sid)
    with pytest.raises(ConditionFailed) as failed:
        _admit(store, sid, key, expected="t0")
    assert failed.value.current == before and store.get_remembered(key) is None


def test_admit_with_record__both_fail__the_key_wins(store: Any) -> None:
    sid, key = _running(store), f"message:{uuid.uuid4().hex}"
    store.remember(Remembered(key, "other", {"message_id": "m0"}, 1))
    with pytest.raises(AlreadyRemembered):
        _admit(store, sid, key, expected="t0")


def test_remember__once_then_updated(store: Any) -> None:
    key = f"message:{uuid.uuid4().hex}"
    store.update_remembered(Remembered(key, "fp", {"error": {"code": "x"}}, 1))  # never created: nothing
    assert store.get_remembered(key) is None
    store.remember(Remembered(key, "fp", {"message_id": "m1"}, 1))
    with pytest.raises(AlreadyRemembered):
        store.remember(Remembered(key, "fp", {"message_id": "m2"}, 1))
    store.update_remembered(Remembered(key, "fp", {"error": {"code": "dispatch_failed"}}, 2))
    assert store.get_remembered(key) == Remembered(key, "fp", {"error": {"code": "dispatch_failed"}}, 2)


# ------------------------------------------------------------------ size
def test_write_past_the_item_limit__item_too_large_and_nothing_written(store: Any) -> None:
    sid = _sid()
    store.create_session(session(sid, bundle(sid)))
    before = store.get_session(sid)
    huge = "€" * (MAX_ITEM_BYTES // 3 + 10)  # 3 bytes each in UTF-8: over the limit in bytes, not in characters
    with pytest.raises(ItemTooLarge):
        store.link_late_message(sid, f"{sid}.b1", huge, AT)
    assert store.get_session(sid) == before


def test_write_under_the_item_limit__accepted(store: Any) -> None:
    sid = _sid()
    store.create_session(session(sid, bundle(sid)))
    big = "x" * (MAX_ITEM_BYTES // 2)
    assert store.link_late_message(sid, f"{sid}.b1", big, AT).bundles[0].late_message_id == big


def test_item_size__counts_utf8_bytes_and_names() -> None:
    assert item_size({"a": "é"}) == 1 + 2
    assert item_size({"n": 12345}) == 1 + 4
    assert item_size({"m": {"k": True}}) == 1 + 3 + 1 + 1 + 1


# ------------------------------------------------------------------ plain records
def _message(sid: str, mid: str, seq: int = 1) -> Message:
    return Message(id=mid, session_id=sid, workspace_id="ws-1", task_id="task-1", turn_id="t1", turn_seq=seq,
                   author_type="agent", type="message", content=f"text {mid}", created_at=AT,
                   meta={"in_reply_to": {"clarification_id": "x"}})


def test_history__messages_once_tombstones_stay_and_turns_never_uncomplete(store: Any) -> None:
    sid = _sid()
    first, second = _message(sid, "m1"), _message(sid, "m2", 2)
    assert store.put_message(first) is True and store.put_message(first) is False
    assert store.put_message(second) is True
    store.put_turn_record(TurnRecord("t1", sid, 1, AT, LATER), "ws-1", "task-1")
    store.put_turn_record(TurnRecord("t1", sid, 1, AT, None), "ws-1", "task-1")  # a redelivered older image
    assert store.delete_message(first) is True and store.delete_message(first) is False
    assert store.put_message(first) is False  # a redelivery cannot bring it back
    turns, messages = store.list_history(sid)
    assert turns == [TurnRecord("t1", sid, 1, AT, LATER)] and messages == [second]


def test_events__once_per_key_and_listed_by_cursor(store: Any) -> None:
    ws = f"ws-{uuid.uuid4().hex[:6]}"
    events = [Event(f"e{i}", ws, "message.updated", "task-1", "s1", {"n": i}, f"2025-01-01T12:00:0{i}.000000Z")
              for i in range(3)]
    assert [store.put_event(e, AT) for e in events] == [True, True, True]
    assert store.put_event(events[0], LATER) is False
    assert store.put_event(replace(events[1], workspace_id="other"), AT) is True
    listed = store.list_events(ws, low_sk="", after_sk=f"{events[0].at}#{events[0].id}", written_after=LATER,
                               limit=10)
    assert [e for _, _, e in listed] == events[1:]
    assert [e for _, _, e in store.list_events(ws, low_sk="", after_sk="", written_after="", limit=2)] == events[:2]


def test_meta_and_reconciler_index(store: Any) -> None:
    key = f"ready#{uuid.uuid4().hex}"
    assert store.get_meta(key) is None
    store.set_meta(key, "true", AT)
    assert store.get_meta(key) == "true"
    sid = _sid()
    store.create_session(session(sid, bundle(sid)))
    store.renew_waiter(sid, f"{sid}.b1", ["q1"], until=LATER, at=AT)
    assert sid in store.due_sessions(None) and sid not in store.due_sessions(AT)
    assert store.reschedule(sid, expected_due=AT, next_due=None) is False  # a writer's deadline survives
    assert store.reschedule(sid, expected_due=LATER, next_due=None) is True
    assert sid not in store.due_sessions(None) and store.get_session(sid).recon_due is None
    assert store.reschedule(sid, expected_due=None, next_due=LATER) is True
    assert sid in store.due_sessions("2025-01-02T00:00:00.000000Z")


def test_rows_without_status_or_with_flags_as_strings__decoded_alike(store: Any) -> None:
    sid = _sid()
    s = session(sid, bundle(sid, "b1", T1, row("q1", detached="true"), row("q2")))
    put_raw(store, codec.session_to_item(s))
    assert [r.agent_disconnected for r in store.get_session(sid).bundles[0].rows] == [True, False]


def test_tasks_and_archived_records__created_once_removed_once_marked_only_when_there(store: Any) -> None:
    """The plain records' remaining writes (chalicelib.store.plain), alike on both stores."""
    t = replace(task(f"task-{uuid.uuid4().hex[:8]}"), session_ids=())
    store.put_task(t)
    with pytest.raises(ConditionFailed):
        store.put_task(replace(t, title="again"))  # never overwritten
    assert store.get_task(t.id) == t
    assert store.delete_task(t.id) is True and store.delete_task(t.id) is False and store.get_task(t.id) is None
    sid = _sid()
    store.create_session(session(sid, closed_bundle(sid, "b1")))
    given = store.get_session(sid)
    store.archive_bundles(given, list(given.bundles), AT)
    bid = given.bundles[0].id
    assert store.mark_archived(sid, bid, dismissed_by="user-1") is True
    assert store.mark_archived(sid, bid, late_message_id="m-late") is True
    marked = store.get_archived(sid, bid)
    assert marked.dismissed_by == ("user-1",) and marked.late_message_id == "m-late"
    assert store.mark_archived(sid, "missing", dismissed_by="user-1") is False
    assert store.delete_archived(sid, bid) is True and store.mark_archived(sid, bid, dismissed_by="u") is False


def test_plain_records__every_write_defined_once_and_executed_by_both_stores() -> None:
    """The stores implement the one primitive; none of them redefines a plain record's write."""
    writes = {name for name, member in vars(PlainRecords).items() if callable(member) and not name.startswith("_")}
    assert writes >= {"put_task", "delete_task", "remember", "update_remembered", "put_message", "put_turn_record",
                      "delete_message", "mark_archived", "delete_archived", "put_event", "set_meta"}
    for impl in (MemoryStore, DynamoStore):
        assert issubclass(impl, PlainRecords)
        assert not writes & {n for klass in impl.__mro__ if not issubclass(PlainRecords, klass)
                             for n in vars(klass)}, impl
