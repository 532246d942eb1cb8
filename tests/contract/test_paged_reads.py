"""Paged reads and the task list's order, alike on both stores: every page from one bounded read, in the
order of the contract, and the pages together exactly the list."""
from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.domain.errors import ConditionFailed
from chalicelib.domain.model import Message, TurnRecord
from chalicelib.store import codec
from chalicelib.store.expr import to_attr
from chalicelib.store.models import TaskRecord
from tests.contract.builders import AT, bundle, session, task


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _all(read: Any) -> list[Any]:
    """Every page of a paged read, in order."""
    out, after = [], None
    for _ in range(100):
        page = read(after)
        out.extend(page.items)
        if page.after is None:
            return out
        after = page.after
    raise AssertionError("paging never ended")


def _at(n: int) -> str:
    return f"2025-01-01T10:{n // 60:02d}:{n % 60:02d}.000000Z"


def test_task_list__pending_first_then_latest_activity__paged(store: Any) -> None:
    ws = _id("ws")
    ids = []
    for n in range(7):
        t = replace(task(_id("task")), workspace_id=ws, created_at=_at(n), session_ids=())
        store.put_task(t)
        ids.append(t.id)
    # the oldest task gets a pending question; the second oldest a newer activity than every creation
    store.set_task_summary(ids[0], pending_action="clarification", primary_session_id=None, expected_revision=0,
                           at=_at(1))
    store.set_task_activity(store.get_task(ids[1]), _at(30))
    expected = [ids[0], ids[1], *reversed(ids[2:])]
    assert [t.id for t in _all(lambda after: store.page_tasks(ws, 3, after))] == expected
    first = store.page_tasks(ws, 3, None)
    assert len(first.items) == 3 and first.after is not None
    assert store.page_tasks(ws, 7, None).after is None  # the last page says so
    assert store.page_tasks(_id("ws"), 3, None).items == []


def test_task_activity__compare_and_set_on_what_was_read(store: Any) -> None:
    t = replace(task(_id("task")), session_ids=())
    store.put_task(t)
    moved = store.set_task_activity(t, _at(40))
    assert moved.summary.activity_at == _at(40) and moved.last_activity_at == _at(40)
    with pytest.raises(ConditionFailed):
        store.set_task_activity(t, _at(41))  # read before the move: stale
    with pytest.raises(ConditionFailed):
        store.set_task_summary(t.id, pending_action=None, primary_session_id=None, expected_revision=0, at=AT,
                               seen_activity="")  # the activity moved since this read
    assert store.set_task_summary(t.id, pending_action=None, primary_session_id=None, expected_revision=0, at=AT,
                                  activity_at=_at(40), seen_activity=_at(40)).summary.revision == 1


def test_task_sessions__named_on_the_task_and_read_in_one_batch(store: Any) -> None:
    t = replace(task(_id("task")), session_ids=())
    store.put_task(t)
    sids = [_id("s") for _ in range(3)]
    for sid in sids:
        store.add_task_session(t.id, sid)
        store.create_session(replace(session(sid, task_id=t.id), created_at=_at(len(sid) % 7)))
    assert store.get_task(t.id).session_ids == tuple(sorted(sids))
    assert {s.id for s in store.get_sessions([*sids, "missing"])} == set(sids)
    legacy = task(_id("task"))  # stored before tasks named their sessions
    store.put_task(legacy)
    with pytest.raises(ConditionFailed):
        store.add_task_session(legacy.id, "s-x")
    assert store.get_task(legacy.id).session_ids is None


def test_sessions_of_a_task__newest_first__paged(store: Any) -> None:
    tid = _id("task")
    sids = []
    for n in range(5):
        sid = _id("s")
        store.create_session(replace(session(sid, task_id=tid), created_at=_at(n)))
        sids.append(sid)
    assert [s.id for s in _all(lambda after: store.page_sessions(tid, 2, after))] == list(reversed(sids))


def _message(sid: str, n: int, turn_seq: int) -> Message:
    return Message(id=f"m{n:03d}", session_id=sid, workspace_id="ws-1", task_id="task-1", turn_id=f"t{turn_seq}",
                   turn_seq=turn_seq, author_type="agent", type="message", content=f"text {n}",
                   created_at=_at(n))


def test_messages__newest_page_first__turn_records_and_tombstones_skipped(store: Any) -> None:
    sid = _id("s")
    messages = [_message(sid, n, 1 + n // 4) for n in range(13)]
    for m in messages:
        store.put_message(m)
    for seq in range(1, 5):
        store.put_turn_record(TurnRecord(f"t{seq}", sid, seq, AT), "ws-1", "task-1")
    store.delete_message(messages[5])
    kept = [m for m in messages if m.id != messages[5].id]
    pages = []
    after = None
    while True:
        page = store.page_messages(sid, 4, after[0] if after else None)
        pages.append([m.id for _, m in page.items])
        if page.after is None:
            break
        after = page.after
    flat = [mid for page in pages for mid in page]
    assert flat == [m.id for m in reversed(kept)]
    assert all(len(page) <= 4 for page in pages)
    key = codec.history_sk_message(kept[-1].turn_seq, kept[-1].created_at, kept[-1].id)
    assert [m.id for _, m in store.page_messages(sid, 2, key).items] == [kept[-2].id, kept[-3].id]


def test_turns__newest_page_first__from_the_turn_index(store: Any) -> None:
    sid = _id("s")
    for seq in range(1, 8):
        store.put_turn_record(TurnRecord(f"t{seq}", sid, seq, _at(seq), _at(seq + 1)), "ws-1", "task-1")
        store.put_message(_message(sid, seq, seq))
    turns = _all(lambda after: store.page_turns(sid, 3, int(after[0]) if after else None))
    assert [t.seq for t in turns] == [7, 6, 5, 4, 3, 2, 1]
    assert turns[0] == TurnRecord("t7", sid, 7, _at(7), _at(8))


def test_archived_many__one_batch(store: Any) -> None:
    sid = _id("s")
    b1, b2 = bundle(sid, "b1"), bundle(sid, "b2")
    s = session(sid, b1, b2)
    store.create_session(s)
    store.archive_bundles(store.get_session(sid), [b1, b2], AT)
    assert {b.id for b in store.get_archived_many(sid, [b1.id, b2.id, "nope"])} == {b1.id, b2.id}


def _store_without_list_key(store: Any, t: Any) -> None:
    """A task as stored before the task list's index existed: no `list_key`."""
    item = {k: v for k, v in codec.task_to_item(t).items() if k != "list_key"}
    if hasattr(store, "task_items"):
        store.task_items[t.id] = item
    else:
        store.client.put_item(TableName=str(TaskRecord.Meta.table_name), Item={k: to_attr(v) for k, v in item.items()})


def test_old_task__found_by_the_bounded_scan__listed_once(store: Any) -> None:
    ws = _id("ws")
    old = replace(task(_id("task")), workspace_id=ws, created_at=_at(3))
    _store_without_list_key(store, old)
    listed = replace(task(_id("task")), workspace_id=ws, created_at=_at(1), session_ids=())
    store.put_task(listed)
    assert [t.id for t in store.page_tasks(ws, 10, None).items] == [listed.id]  # the index is sparse
    found: list[Any] = []
    after = None
    while True:
        page, after = store.unlisted_tasks(2, after)
        assert len(page) <= 2
        found.extend(page)
        if after is None:
            break
    assert old.id in [t.id for t in found] and listed.id not in [t.id for t in found]
    (mine,) = [t for t in found if t.id == old.id]
    assert store.list_old_task(mine) is True
    assert store.list_old_task(mine) is False  # idempotent: it has its place now
    assert [t.id for t in store.page_tasks(ws, 10, None).items] == [old.id, listed.id]
    assert old.id not in [t.id for t in store.unlisted_tasks(10_000, None)[0]]
