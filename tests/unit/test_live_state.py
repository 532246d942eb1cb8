"""The session item holds live state only (issue 26): every question respond can no longer answer leaves the
aggregate for its history record right after the write that closed it, so a session stays small and its
writes cost the same whatever its history; late answers and dismissals work from the record."""
from __future__ import annotations

import math
from typing import Any

import pytest

from chalicelib.domain.model import Session
from chalicelib.functions import streams
from chalicelib.services import archive
from chalicelib.store import codec
from chalicelib.store.memory import MemoryStore
from chalicelib.store.size import item_size
from tests.support.crash import READ_METHODS, ProcessDied, SessionTap
from tests.support.world import World

# A realistic ignored bundle: 4 questions of 6 described options, about 5 KB.
FIVE_KB = [{"question_id": f"q{q}", "title": f"Decision {q}", "prompt": "Which approach should we take? " * 6,
            "options": [{"option_id": f"o{o}", "label": f"Option {o}",
                         "description": "A described trade-off of this option, " * 4} for o in range(6)]}
           for q in range(4)]


class Streamed(World):
    """A world whose sessions stream function runs after every step, as the stream delivers records."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(SessionTap(MemoryStore()), **kw)
        self.fed = 0
        self.peak = 0  # the largest the aggregate was around any write since the last look

    def stream(self) -> None:
        while self.fed < len(self.store.changes):
            end = len(self.store.changes)
            for record in self.store.records(self.fed):
                streams.on_session_record(self.deps, record)
            self.fed = end

    def size(self, sid: str) -> int:
        return item_size(self.memory.items[sid])


def _wcu(size: int) -> int:
    return math.ceil(size / 1024)  # a write costs 1 WCU per KB of the larger of the item before and after it


def test_ignored_questions__1000_turns__aggregate_small_each_write_as_cheap_as_ever_and_asking_goes_on() -> None:
    """Issue 26's fourth observed case: 52 ignored ~5 KB bundles, each superseded by the next turn, stayed
    in the session item until the 53rd ask got 409 session_full for good, and every write to the ~300 KB item
    cost ~290 WCU. Now each leaves right after the write that supersedes it (the stream runs after each
    write, as it does within a second in AWS), so no write costs more at turn 1,000 than at turn 2; the
    superseding ask itself still carries the question it supersedes (one bundle's KB more than turn 1's)."""
    w = Streamed()
    sid = w.session().id
    asks: dict[int, int] = {}
    others: dict[int, int] = {}
    for turn in range(1, 1001):
        before = w.size(sid)
        w.ask(sid, FIVE_KB)  # no turn open: asking starts one; the previous question is now superseded
        asks[turn] = _wcu(max(before, w.size(sid)))
        w.stream()
        before = w.size(sid)
        w.report(sid, "turn_completed")  # the agent's turn ends; nobody ever answers
        others[turn] = _wcu(max(before, w.size(sid)))
        w.stream()
        assert w.size(sid) < 32 * 1024, turn
    assert others[1] == others[100] == others[1000], others
    assert asks[2] == asks[100] == asks[1000] <= asks[1] + _wcu(item_size(codec.bundle_to_item(
        w.get(sid).bundles[0]))), asks
    s = w.get(sid)
    assert len(s.bundles) == 1 and s.archived == 999
    assert w.ask(sid, FIVE_KB)  # the agent can still ask


def _superseded(w: Streamed) -> tuple[str, str]:
    sid = w.session().id
    cid = w.ask(sid, FIVE_KB[:1])
    w.report(sid, "turn_completed")
    w.ask(sid, FIVE_KB[1:2])  # a newer turn: the first question can only be answered late now
    return sid, cid


def test_superseded_question__leaves_the_aggregate_right_after__late_answer_and_dismiss_from_its_record() -> None:
    w = Streamed()
    sid, cid = _superseded(w)
    assert w.get(sid).bundle(cid) is not None
    w.stream()
    assert w.get(sid).bundle(cid) is None and w.memory.get_archived(sid, cid) is not None
    entry = next(m for m in w.transcript(sid)["messages"] if m.get("clarification_id") == cid)
    assert (entry["state"], entry["late_answer_allowed"]) == ("superseded", True)

    w.dismiss(cid)
    assert w.transcript(sid)["messages"][0]["dismissed"] is True  # kept on the record, for this user
    admitted = w.message(sid, {"client_message_id": "late-1", "content": "",
                               "in_reply_to": {"clarification_id": cid, "answers": [
                                   {"question_id": "q0", "selected_options": ["o1"]}]}})
    archived = w.memory.get_archived(sid, cid)
    assert archived is not None and archived.late_message_id == admitted.message_id
    entry = next(m for m in w.transcript(sid)["messages"] if m.get("clarification_id") == cid)
    assert (entry["late_answer_message_id"], entry["late_answer_allowed"]) == (admitted.message_id, False)


@pytest.mark.parametrize("phase", ["before", "after"])
def test_archiving__process_dies_around_the_write__the_question_is_never_lost_nor_back_to_life(phase: str) -> None:
    w = Streamed()
    sid, cid = _superseded(w)
    commit = w.memory._commit_archiving

    def dying(session_id: str, write: Any, session: Session, bundles: Any) -> Session:
        if phase == "after":
            commit(session_id, write, session, bundles)
        raise ProcessDied("archive_bundles", 0, phase)

    w.memory._commit_archiving = dying  # type: ignore[method-assign]
    with pytest.raises(ProcessDied):
        w.stream()
    w.memory._commit_archiving = commit  # type: ignore[method-assign]
    in_aggregate, in_history = w.get(sid).bundle(cid) is not None, w.memory.get_archived(sid, cid) is not None
    assert in_aggregate != in_history  # exactly one place holds it, whatever the moment of death
    w.fed = 0  # the stream redelivers everything from the start
    w.stream()
    s = w.get(sid)
    assert s.bundle(cid) is None and w.memory.get_archived(sid, cid) is not None
    assert s.archived == 1  # archived once
    found = archive.find(w.deps, s, cid)
    assert found is not None and all(r.status == "pending" for r in found[1].rows)  # as it left: superseded
    entry = next(m for m in w.transcript(sid)["messages"] if m.get("clarification_id") == cid)
    assert (entry["state"], entry["answerable"]) == ("superseded", False)


def test_stale_stream_record__archives_nothing() -> None:
    w = Streamed()
    sid, cid = _superseded(w)
    old_records = w.store.records(0)
    w.ask(sid, FIVE_KB[2:3])  # the aggregate moved on before its records were processed
    for record in old_records:
        streams.on_session_record(w.deps, record)
    assert w.get(sid).bundle(cid) is not None  # the older versions leave it to the newest record
    w.stream()
    assert w.get(sid).bundle(cid) is None and codec.session_to_item(w.get(sid))["archived"] == 1


class Counting:
    """A store proxy counting the calls of each member (each one request on DynamoDB, or a bounded few)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)
        return counted


def test_task_list__1000_tasks__a_page_costs_the_same_few_reads_as_with_10() -> None:
    """Issue 26's first observed case: with 1,000 tasks GET /tasks made one Query per task to repair the
    summaries (36 s, past API Gateway's 29 s) and answered them all. Now a page is one index read and one batch
    read of its tasks' sessions, however many tasks the workspace holds."""
    from dataclasses import replace

    from chalicelib.services import tasks
    from tests.support.world import USER

    def page_reads(count: int) -> tuple[dict[str, int], int, bool]:
        w = World()
        for n in range(count):
            task_id = w.task(f"Task {n}")
            if n % 10 == 0:
                w.session(task_id=task_id)
        store = Counting(w.store)
        page = tasks.list_tasks(replace(w.deps, store=store), USER, limit=50, cursor=None)
        return store.calls, len(page.tasks), page.next_cursor is not None

    calls, listed, more = page_reads(1000)
    assert (listed, more) == (50, True)
    reads = {name: n for name, n in calls.items() if name in READ_METHODS}
    assert reads == {"page_tasks": 1, "get_sessions": 1}, calls  # never a read per task
    assert calls.get("set_task_summary", 0) <= 50  # repairs: the page's own wrong summaries only
    assert {name: n for name, n in page_reads(60)[0].items() if name in READ_METHODS} == reads


@pytest.mark.parametrize("outcome", ["rejected", "answered"])
def test_live_answer__its_question_moves_to_history_before_the_responder_looks__still_200_live(outcome: str) -> None:
    """The waiter confirms, and the stream function moves the settled question to history at once: the live
    responder (and a retry of it) reads the outcome from the record instead of losing track of its claim."""
    from dataclasses import replace

    w = Streamed()
    sid = w.session("start").id
    cid = w.ask(sid, FIVE_KB[:1])
    w.stream()
    confirm, done = w.agent_confirms(cid), []

    def during_the_wait(seconds: float) -> None:
        if not done:
            done.append(True)
            confirm()
            w.report(sid, "message", content="on it")  # the agent's activity retires the watchdog
            w.stream()  # settled: archived right after
        w.sleeper(seconds)

    body = {"rejected": True} if outcome == "rejected" else {
        "answers": [{"question_id": "q0", "selected_options": ["o1"]}]}
    result = w.respond(cid, body, key="k-1", deps=replace(w.deps, sleep=during_the_wait))
    assert (result.status, result.delivery) == (outcome, "live")
    assert w.get(sid).bundle(cid) is None and w.memory.get_archived(sid, cid) is not None
    again = w.respond(cid, body, key="k-1")  # the retry tells the same outcome, from the record
    assert (again.status, again.delivery) == (outcome, "live")
    status, view = w.wait(cid)  # and the agent's waiter learns the question is over, not "not found"
    assert status == 410 and view["state"] == "inactive"
