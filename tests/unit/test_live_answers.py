"""Live answers that never strand the user: the ask opens the waiter lease, an unconfirmed live answer
continues as a detached one in the same request, and nobody waits by polling tightly."""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.domain.model import Delivery, Session
from chalicelib.functions import streams
from chalicelib.functions.reconciler import reconcile
from chalicelib.services.deps import Settings
from chalicelib.services.polling import poll
from chalicelib.store.memory import MemoryStore
from tests.support.crash import SessionTap
from tests.support.world import ANSWER, SKIP, World

WAIT = 25


class CountingStore(MemoryStore):
    """Counts aggregate reads (what a waiting party costs)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get_session(self, session_id: str) -> Session | None:
        self.reads += 1
        return super().get_session(session_id)


def _entry(w: World, session_id: str) -> dict[str, Any]:
    [entry] = [m for m in w.transcript(session_id)["messages"] if m["type"] == "clarification"]
    return entry


def _answer_prompts(w: World) -> list[Any]:
    return [p for p in w.agent.prompts if "Which database?" in p.text]


def test_ask__opens_the_waiter_lease_in_the_same_write() -> None:
    w = World()
    s = w.session("start")
    writes = w.store.writes

    cid = w.ask(s.id)

    bundle = w.bundle(cid)
    assert w.store.writes == writes + 1
    assert bundle.waiter_until == w.deps.after(w.deps.settings.ask_lease)
    assert w.get(s.id).recon_due == bundle.waiter_until  # the reconciler finds it when it lapses
    assert w.deps.settings.ask_lease < w.deps.settings.owner_window


def test_ask_then_never_wait__lease_lapses__detached_with_the_same_events_as_any_detachment() -> None:
    tap = SessionTap(MemoryStore())
    w = World(tap)
    s = w.session("start")
    cid = w.ask(s.id)
    assert _entry(w, s.id)["state"] == "active_live"

    w.clock.advance(w.deps.settings.ask_lease.total_seconds() + 1)

    assert _entry(w, s.id)["state"] == "active_detached"  # at once, from the rule's read
    seen = len(tap.changes)
    report = reconcile(w.deps, before_traffic=False)
    assert report.waiters_detached == 1
    assert [(st, d) for st, d, _ in w.rows(cid).values()] == [("pending", True)] * 2  # durably detached
    assert [c.silent for c in w.agent.cancels] == [True]  # and the agent's turn paused, as a pause does
    for record in tap.records(seen):
        streams.on_session_record(w.deps, record)
    events = [e for _, _, e in w.memory.list_events("ws-1", low_sk="", after_sk="", written_after="", limit=500)
              if e.type == "message.updated" and e.payload["clarification_id"] == cid]
    assert len(events) == 1 and events[0].payload["agent_disconnected"] is True
    assert events[0].payload["changed_question_ids"] == ["q1", "q2"]
    assert reconcile(w.deps, before_traffic=False).waiters_detached == 0  # a repeat detaches nothing


def test_ask_then_never_wait__answered_within_the_lease__resumed_once_in_the_same_request() -> None:
    w = World()
    s = w.session("start")
    cid = w.ask(s.id)  # the agent died before its first wait

    result = w.respond(cid, ANSWER)

    assert result.delivery == "resumed"
    assert len(_answer_prompts(w)) == 1
    assert w.sleeper.slept == pytest.approx(w.deps.settings.confirm_wait)  # it waited for a waiter, then on


def test_ask_then_never_wait__skipped__recorded_without_resuming() -> None:
    w = World()
    s = w.session("start")
    cid = w.ask(s.id)

    result = w.respond(cid, SKIP)

    assert (result.status, result.delivery) == ("rejected", "recorded")
    assert w.agent.prompts[1:] == [] and [st for st, _, _ in w.rows(cid).values()] == ["rejected"] * 2


def test_waiting_agent__a_whole_long_poll__at_most_two_reads_per_second() -> None:
    w = World(CountingStore())
    s = w.session("start")
    cid = w.ask(s.id)
    reads = w.store.reads

    assert w.wait(cid, timeout=WAIT) == (200, {"state": "pending"})

    per_second = (w.store.reads - reads) / WAIT
    assert per_second <= 2, per_second


def test_waiting_agent__answer_arrives__seen_within_one_back_off_step() -> None:
    w = World()
    s = w.session("start")
    cid = w.ask(s.id)
    taken: list[float] = []

    def answer_after_ten_seconds(_: float) -> None:
        """Another request claims the bundle for this waiter once it has waited 10 s."""
        if taken or w.sleeper.slept < 10:
            return
        now = w.deps.now()
        w.memory.claim(s.id, cid, {q: {"question_id": q, "selected_options": [], "custom_text": "x"}
                                   for q in ("q1", "q2")},
                       status="answered", delivery=Delivery("d1", ("q1", "q2"), "answered", "live", now, now),
                       reservation=None, at=now)
        taken.append(w.sleeper.slept)
    w.sleeper.every = answer_after_ten_seconds

    status, body = w.wait(cid, timeout=WAIT)

    assert status == 200 and body["delivery_id"] == "d1"
    assert w.sleeper.slept - taken[0] <= w.deps.settings.poll_cap  # found at the next read, at most 1 s later


def test_responder_awaiting_confirmation__at_most_two_reads_per_second() -> None:
    w = World(CountingStore(), settings=Settings(deployment_id="reads", confirm_wait=20.0))
    sid, cid = w.waiting()
    reads: list[int] = []

    class Stop(Exception):
        pass

    def stop_at_fall_through(*args: Any, **kwargs: Any) -> Session:
        reads.append(w.store.reads)
        raise Stop()
    w.memory.fall_through = stop_at_fall_through  # type: ignore[method-assign]
    before = w.store.reads

    with pytest.raises(Stop):
        w.respond(cid, ANSWER)  # the claim, then the wait for a confirmation that never comes

    waited = w.deps.settings.confirm_wait
    assert (reads[0] - before) / waited <= 2, (reads[0] - before) / waited


def test_poll__bounded_in_time_not_in_sleeps() -> None:
    w = World()
    calls: list[float] = []

    assert poll(w.deps, lambda: calls.append(w.sleeper.slept), 3.0) is None

    assert w.sleeper.slept == pytest.approx(3.0) and calls[0] == 0.0  # the first probe is at once
    assert calls == sorted(calls) and len(calls) <= 2 + 3 / w.deps.settings.poll_cap + 4
