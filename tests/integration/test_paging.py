"""Paged reads over real HTTP against the emulator (issue 26): the task list, a task's sessions, the transcript
and the turns come a page at a time, in the contract's order, every response bounded whatever is stored."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib import bootstrap
from chalicelib.domain.model import Message, TurnRecord
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, Flow

ONE_MIB = 1024 * 1024


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent]) -> Flow:
    return Flow(shared[0], shared[1], f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)


def _pages(flow: Flow, path: str, key: str, cursor: str, **params: Any) -> Iterator[dict[str, Any]]:
    """Every page of a paged route, following its cursor (`cursor` is the parameter, `key` the list)."""
    at: str | None = None
    for _ in range(200):
        resp = flow.user.get(path, params={**params, **({cursor: at} if at else {})})
        assert resp.status_code == 200, resp.text
        assert len(resp.content) < ONE_MIB
        page = resp.json()
        yield page
        at = page["next_cursor" if cursor == "cursor" else "older_cursor"]
        if at is None:
            return
    raise AssertionError("paging never ended")


def _seed_messages(flow: Flow, sid: str, count: int, content: str, *, turn_seq: int, start: int = 0) -> list[str]:
    """History messages as the stream function writes them (seeded directly: this tests reading them)."""
    view = flow.view(sid)
    store = bootstrap.deps().store
    ids = []
    for n in range(start, start + count):
        mid = f"m-{n:05d}"
        store.put_message(Message(id=mid, session_id=sid, workspace_id=flow.workspace, task_id=view["task_id"],
                                  turn_id=view["current_turn_id"] or "t0", turn_seq=turn_seq, author_type="agent",
                                  type="message", content=content,
                                  created_at=f"2030-01-01T00:{n // 3600 % 60:02d}:{n % 3600 // 60:02d}."
                                             f"{n % 60:02d}0000Z"))
        ids.append(mid)
    return ids


def test_task_list__pending_first_then_newest__paged_with_an_opaque_cursor(flow: Flow) -> None:
    made = [flow.task(f"Task {n}") for n in range(7)]
    sid = flow.session(made[0])  # the oldest task gets a question waiting for its user
    flow.ask(sid)
    flow.drain()
    pages = list(_pages(flow, "/tasks", "tasks", "cursor", limit=3))
    assert [len(p["tasks"]) for p in pages] == [3, 3, 1] and pages[-1]["next_cursor"] is None
    listed = [t["id"] for p in pages for t in p["tasks"]]
    assert listed == [made[0], *reversed(made[1:])]
    assert pages[0]["tasks"][0]["status_summary"]["pending_action"] == "clarification"
    assert flow.user.get("/tasks").json()["next_cursor"] is None  # default page (50) holds all 7


def test_task_list__a_wrong_summary_on_the_page__repaired_on_this_read(flow: Flow) -> None:
    task_id = flow.task()
    sid = flow.session(task_id)
    flow.ask(sid)  # the stream has not run: the stored summary says nothing is pending
    (listed,) = flow.user.get("/tasks", params={"limit": 5}).json()["tasks"]
    assert listed["status_summary"]["pending_action"] == "clarification"


def test_sessions_of_a_task__newest_first__paged(flow: Flow) -> None:
    task_id = flow.task()
    made = [flow.session(task_id, prompt=None) for _ in range(3)]
    pages = list(_pages(flow, f"/tasks/{task_id}/sessions", "sessions", "cursor", limit=2))
    assert [s["id"] for p in pages for s in p["sessions"]] == list(reversed(made))
    assert [len(p["sessions"]) for p in pages] == [2, 1]


def test_transcript__newest_page_first__pages_join_into_the_whole_in_order(flow: Flow) -> None:
    sid = flow.session(prompt=None)
    ids = _seed_messages(flow, sid, 230, "hello", turn_seq=1)
    pages = list(_pages(flow, f"/sessions/{sid}/transcript", "messages", "before", limit=100))
    assert [len(p["messages"]) for p in pages] == [100, 100, 30]
    joined = [m["id"] for p in reversed(pages) for m in p["messages"]]
    assert joined == ids  # each page in order, the newest page first, nothing twice or missing
    assert flow.user.get(f"/sessions/{sid}/transcript").json()["older_cursor"] is not None  # default: 100


def test_transcript__active_question_older_than_the_page__always_in_the_response(flow: Flow) -> None:
    sid = flow.session()  # an open turn
    cid = flow.ask(sid)
    turn_seq = 1
    _seed_messages(flow, sid, 30, "later output", turn_seq=turn_seq)
    page = flow.user.get(f"/sessions/{sid}/transcript", params={"limit": 10}).json()
    assert cid not in {m.get("clarification_id") for m in page["messages"]}
    (pending,) = page["pending_clarifications"]
    assert (pending["clarification_id"], pending["answerable"]) == (cid, True)
    assert page["current_turn_id"] == flow.view(sid)["current_turn_id"]


def test_transcript__200_long_messages__every_page_under_1_mib(flow: Flow) -> None:
    """Issue 26's second observed case: 200 long messages made one 6.5 MB transcript (Lambda answers at most
    6 MB). Now every page stays under 1 MiB, and the pages hold every message."""
    sid = flow.session(prompt=None)
    ids = _seed_messages(flow, sid, 200, "\U0001F600\u0301\"\\\x01" * 3200, turn_seq=1)  # 16,000 characters
    pages = list(_pages(flow, f"/sessions/{sid}/transcript", "messages", "before", limit=200))
    assert len(pages) > 1
    assert [m["id"] for p in reversed(pages) for m in p["messages"]] == ids


def test_turns__newest_page_first__paged(flow: Flow) -> None:
    sid = flow.session(prompt=None)
    view = flow.view(sid)
    store = bootstrap.deps().store
    for seq in range(1, 26):
        store.put_turn_record(TurnRecord(f"t-{seq}", sid, seq, f"2030-01-01T00:00:{seq:02d}.000000Z",
                                         f"2030-01-01T00:00:{seq:02d}.500000Z"), flow.workspace, view["task_id"])
    pages = list(_pages(flow, f"/sessions/{sid}/turns", "turns", "before", limit=10))
    assert [len(p["turns"]) for p in pages] == [10, 10, 5]
    assert [t["seq"] for p in reversed(pages) for t in p["turns"]] == list(range(1, 26))


@pytest.mark.parametrize(("path", "cursor"), [("/tasks", "cursor"), ("/tasks/{task}/sessions", "cursor"),
                                              ("/sessions/{session}/transcript", "before"),
                                              ("/sessions/{session}/turns", "before")])
def test_paged_routes__bad_limit_or_cursor__400_naming_the_parameter(flow: Flow, path: str, cursor: str) -> None:
    task_id = flow.task()
    sid = flow.session(task_id, prompt=None)
    url = path.format(task=task_id, session=sid)
    for name, value in (("limit", "0"), ("limit", "201"), ("limit", "ten"), ("limit", "-1"),
                        (cursor, "not a cursor"), (cursor, "WyJ4Il0"), (cursor, "x" * 2000)):
        resp = flow.user.get(url, params={name: value})
        error = resp.json()["error"]
        assert (resp.status_code, error["code"], error["details"]["field"]) == (400, "validation_error", name), \
            (name, value, resp.text)


def _asked(flow: Flow, sid: str) -> list[str]:
    page = flow.user.get(f"/sessions/{sid}/transcript").json()
    return [m["clarification_id"] for m in page["messages"] if m.get("clarification_id")]


def test_transcript__stream_not_run__every_asked_question_shown__once_after_it_ran(flow: Flow) -> None:
    """Issue 26 leftover: the transcript reads the questions' anchors the stream function writes. A question
    still in the aggregate is merged from it; one that a later ask moved to history before the stream copied
    its anchor (the stream lags, the session is past its compaction size) was missing until the stream ran."""
    sid = flow.session()
    first = flow.ask(sid)
    assert _asked(flow, sid) == [first]  # pending, from the aggregate
    with flow.settings(session_compact_bytes=1):  # every ask first moves closed questions to history
        flow.complete_turn(sid)
        flow.send(sid)
        second = flow.ask(sid)
    assert flow.stored(sid).archived == 1 and flow.stored(sid).bundle(first) is None
    assert _asked(flow, sid) == [first, second]
    flow.drain()
    assert _asked(flow, sid) == [first, second]  # exactly once each, where they were
