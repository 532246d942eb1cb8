"""Publication on the event bus, over the in-memory store and the in-memory bus.

Every event goes to the bus before the feed; the feed is therefore the ledger of what the bus accepted. A
stream batch publishes its records' events together; an entry the bus keeps rejecting fails its record (and
the later ones) as batch item failures, so Lambda retries them and nothing is dropped or put twice.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from chalicelib import aws, bootstrap
from chalicelib.auth.tokens import Caller
from chalicelib.bus import Entry, put_all
from chalicelib.bus.eventbridge import EventBridgeBus
from chalicelib.bus.memory import MemoryBus
from chalicelib.domain import commands
from chalicelib.domain.model import Task
from chalicelib.functions import streams
from chalicelib.services import clarifications, sessions, tasks
from chalicelib.services.deps import Deps, Settings
from chalicelib.services.events import emit_event, event, turn_started
from chalicelib.services.outbox import Outbox
from chalicelib.services.publication import bus_entry, publish_now
from chalicelib.store.feed_index import MemoryFeedIndex
from chalicelib.store.memory import MemoryStore
from tests.support.crash import SessionTap, to_attrs
from tests.support.fakes import CounterIds, FakeAgentctl, StepClock, agent_token

USER = Caller(sub="user-1", role="user", workspace_id="ws-1")
QUESTION = {"questions": [{"question_id": "q1", "prompt": "Which database?",
                           "options": [{"option_id": "pg", "label": "Postgres"},
                                       {"option_id": "my", "label": "MySQL"}]}]}
Record = dict[str, Any]


@dataclass
class World:
    memory: MemoryStore = field(default_factory=MemoryStore)
    bus: MemoryBus = field(default_factory=MemoryBus)
    sleeps: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tap = SessionTap(self.memory)
        self.deps = Deps(store=self.tap, agentctl=FakeAgentctl(store=self.memory),  # type: ignore[arg-type]
                         clock=StepClock(step=timedelta(milliseconds=1)), new_id=CounterIds(),
                         agent_token=agent_token, settings=Settings(deployment_id="bus"), sleep=self.sleeps.append,
                         bus=self.bus, feed_index=MemoryFeedIndex(self.memory.tables["events"]))

    def asked_and_detached(self) -> tuple[str, str]:
        """A task, a session whose first turn started, a question asked in it, the agent gone: (session, bundle)."""
        task = tasks.create_task(self.deps, USER, commands.create_task({"title": "Cache"}))
        sid = sessions.create_session(self.deps, USER, task.id, commands.create_session({"prompt": "go"})).session.id
        agent = Caller(sub=f"agent:{sid}", role="agent", workspace_id="ws-1", session_id=sid)
        bundle = clarifications.ask(self.deps, agent, sid, commands.ask(QUESTION))
        assert clarifications.detach(self.deps, agent, bundle.id) == ["q1"]
        return sid, bundle.id

    def records(self) -> list[Record]:
        return self.tap.records()

    def run(self, records: list[Record]) -> list[str]:
        """One Lambda invocation of the sessions stream function; returns the reported sequence numbers."""
        result = streams.process_batch(self.deps, records, streams.on_session_record)
        return [f["itemIdentifier"] for f in result["batchItemFailures"]]

    def feed(self) -> list[str]:
        return [e.id for e in self.memory.all_events()]


def seq(record: Record) -> str:
    return str(record["dynamodb"]["SequenceNumber"])


def events_of(w: World, records: list[Record]) -> list[list[str]]:
    """The event ids each record yields, derived again without publishing (the handlers are idempotent)."""
    out = []
    for record in records:
        outbox = Outbox()
        streams.on_session_record(replace(w.deps, outbox=outbox), record)
        out.append([e.id for _, e in outbox.items])
    return out


@pytest.fixture
def w() -> World:
    return World()


# ====================================================================== stream batches
def test_process_batch__every_event_on_the_bus_once_and_in_the_feed(w: World) -> None:
    w.asked_and_detached()
    assert w.run(w.records()) == []
    put = w.bus.ids()
    assert put and len(put) == len(set(put))
    assert set(put) == set(w.feed())
    assert {"turn.started", "session.updated", "message.updated", "task.status_summary.updated"} <= {
        json.loads(e.detail)["type"] for e in w.bus.accepted}
    assert all(len(call) <= 10 for call in w.bus.calls)


def test_process_batch__redelivered__nothing_put_on_the_bus_again(w: World) -> None:
    w.asked_and_detached()
    records = w.records()
    assert w.run(records) == []
    calls, feed = list(w.bus.calls), sorted(w.feed())

    assert w.run(records) == []  # Lambda delivers the same batch again
    assert w.run(records[2:]) == []  # or a part of it

    assert w.bus.calls == calls and sorted(w.feed()) == feed


def test_process_batch__entry_rejected_then_accepted_within_its_tries__no_failure(w: World) -> None:
    sid, _ = w.asked_and_detached()
    started = f"turn.started:{w.memory.sessions[sid].current_turn.id}"  # type: ignore[union-attr]
    w.bus.fail(started, times=2)

    assert w.run(w.records()) == []

    assert Counter(w.bus.ids())[started] == 1 and started in w.feed()
    assert sum(call.count(started) for call in w.bus.calls) == 3  # three tries, only it was put again
    assert [c for c in w.bus.calls[1:] if c != [started]] == []
    assert w.sleeps == [0.2, 0.4]  # bounded backoff between tries


def test_process_batch__entry_keeps_being_rejected__its_record_and_later_ones_reported_then_published(
        w: World) -> None:
    sid, _ = w.asked_and_detached()
    records = w.records()
    started = f"turn.started:{w.memory.sessions[sid].current_turn.id}"  # type: ignore[union-attr]
    w.bus.fail(started, times=3)

    reported = w.run(records)

    first = next(i for i, ids in enumerate(events_of(w, records)) if started in ids)
    assert 0 < first < len(records) - 1  # records before and after it in the batch

    assert reported == [seq(r) for r in records[first:]]  # from the record whose event was rejected on
    assert started not in w.bus.ids() and started not in w.feed()  # in neither: nothing says it was published
    earlier = {e for ids in events_of(w, records[:first]) for e in ids}
    assert earlier <= set(w.bus.ids()) and earlier <= set(w.feed())

    assert w.run(records[first:]) == []  # Lambda retries from the first reported record; the bus is back

    assert Counter(w.bus.ids())[started] == 1
    assert [i for i, n in Counter(w.bus.ids()).items() if n > 1] == []  # the later records' events: once
    assert set(w.bus.ids()) == set(w.feed())


def test_process_batch__handler_fails__earlier_records_published_failed_one_retried(w: World) -> None:
    w.asked_and_detached()
    records = w.records()
    broken = 2

    def handle(deps: Deps, record: Record) -> None:
        if record is records[broken]:
            raise RuntimeError("projection store unavailable")
        streams.on_session_record(deps, record)

    result = streams.process_batch(w.deps, records, handle)

    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == [seq(r) for r in records[broken:]]
    assert set(w.bus.ids()) == {e for ids in events_of(w, records[:broken]) for e in ids}
    assert w.run(records[broken:]) == []
    assert len(w.bus.ids()) == len(set(w.bus.ids())) and set(w.bus.ids()) == set(w.feed())


# ====================================================================== outside a stream batch
def test_publish_now__rejected__false_and_in_neither__retry_true_once(w: World) -> None:
    sid, _ = w.asked_and_detached()
    session = w.memory.sessions[sid]
    assert session.current_turn is not None
    e = turn_started(session, session.current_turn)
    w.bus.fail(e.id, times=3)

    assert publish_now(w.deps, [e]) is False
    assert e.id not in w.bus.ids() and e.id not in w.feed()
    assert publish_now(w.deps, [e]) is True
    assert publish_now(w.deps, [e]) is True  # already published: nothing is put again
    assert w.bus.ids() == [e.id] and w.feed() == [e.id]
    # The stream function derives the same event from the same change: it is not put again either.
    assert w.run(w.records()) == [] and Counter(w.bus.ids())[e.id] == 1


def test_summary_repaired_by_a_read__bus_down__read_served_and_tasks_stream_publishes_it(w: World) -> None:
    task = tasks.create_task(w.deps, USER, commands.create_task({"title": "Cache"}))
    stale = w.memory.set_task_summary(task.id, pending_action="clarification", primary_session_id=None,
                                      expected_revision=0, at="2025-01-01T12:00:00.000000Z")
    revision = f"task.status_summary.updated:{task.id}:{stale.summary.revision + 1}"
    w.bus.fail(revision, times=3)

    (listed,) = tasks.list_tasks(w.deps, USER, limit=50, cursor=None).tasks  # its publication fails; the read not

    assert listed.task.summary.pending_action is None and revision not in w.bus.ids()
    repaired = w.memory.get_task(task.id)
    assert repaired is not None
    result = streams.process_batch(w.deps, [task_record(stale, repaired, 2)], streams.on_task_record)
    assert result == {"batchItemFailures": []}
    assert Counter(w.bus.ids())[revision] == 1 and revision in w.feed()


def test_tasks_stream__new_task__task_created_on_the_bus_once(w: World) -> None:
    task = tasks.create_task(w.deps, USER, commands.create_task({"title": "Cache"}))
    assert w.feed() == []  # the request writes the task only
    record = task_record(None, task, 1)

    for _ in range(2):  # delivered, then redelivered
        assert streams.process_batch(w.deps, [record], streams.on_task_record) == {"batchItemFailures": []}

    (entry,) = w.bus.accepted
    assert (entry.id, entry.detail_type) == (f"task.created:{task.id}", "task.created")
    assert json.loads(entry.detail)["payload"]["title"] == "Cache" and w.feed() == [entry.id]


# ====================================================================== the bus event
def test_bus_event__public_event_with_its_ids__private_fields_stripped() -> None:
    w = World()
    e = event(workspace_id="ws-1", task_id="t1", session_id="s1", event_id="turn.started:x", kind="turn.started",
              at="2025-01-01T12:00:00.000000Z",
              payload={"turn_id": "x", "reservation": {"turn_id": "y"}, "nested": [{"prompt_generation": 3}]})
    assert emit_event(w.deps, e) is True

    (entry,) = w.bus.accepted
    assert entry == bus_entry(e) and entry.detail_type == "turn.started" and entry.time is not None
    assert json.loads(entry.detail) == {"id": "turn.started:x", "type": "turn.started", "workspace_id": "ws-1",
                                        "task_id": "t1", "session_id": "s1", "at": "2025-01-01T12:00:00.000000Z",
                                        "payload": {"turn_id": "x", "nested": [{}]}}


# ====================================================================== putting entries
def entries(n: int, size: int = 10) -> list[Entry]:
    return [Entry(id=f"e{i}", detail_type="t", detail=json.dumps({"x": "y" * size})) for i in range(n)]


def test_put_all__calls_of_at_most_ten_entries_and_256_kib() -> None:
    bus = MemoryBus()
    assert put_all(bus, entries(25), attempts=3, sleep=lambda s: None) == []
    assert [len(c) for c in bus.calls] == [10, 10, 5]
    big = MemoryBus()
    assert put_all(big, entries(5, size=100_000), attempts=3, sleep=lambda s: None) == []
    assert [len(c) for c in big.calls] == [2, 2, 1]


def test_put_all__rejected_after_every_try__reported() -> None:
    bus = MemoryBus()
    bus.fail("e3", times=10, code="ThrottlingException")
    sleeps: list[float] = []
    (rejection,) = put_all(bus, entries(12), attempts=4, sleep=sleeps.append, backoff=0.5)
    assert (rejection.entry_id, rejection.code) == ("e3", "ThrottlingException")
    assert bus.calls[2:] == [["e3"]] * 3 and sleeps == [0.5, 1.0, 2.0]
    assert sorted(bus.ids()) == sorted(f"e{i}" for i in range(12) if i != 3)


def test_eventbridge_put__failed_entries_matched_by_position() -> None:
    client = aws.client("events", endpoint_url="http://127.0.0.1:9")
    bus = EventBridgeBus("clarify-test-events", client=client)
    with Stubber(client) as stub:
        stub.add_response("put_events", {"FailedEntryCount": 1, "Entries": [
            {"EventId": "1"}, {"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}, {"EventId": "3"}]})
        rejected = bus.put(entries(3))
        stub.add_client_error("put_events", service_error_code="ThrottlingException", http_status_code=400)
        down = bus.put(entries(2))
    assert [(r.entry_id, r.code) for r in rejected] == [("e1", "InternalFailure")]
    assert [(r.entry_id, r.code) for r in down] == [("e0", "ThrottlingException"), ("e1", "ThrottlingException")]
    with pytest.raises(ValueError):
        bus.put(entries(11))


def test_eventbridge_put__request_names_bus_source_type_and_time() -> None:
    client = aws.client("events", endpoint_url="http://127.0.0.1:9")
    bus = EventBridgeBus("clarify-test-events", client=client)
    e = event(workspace_id="ws", task_id="t", session_id=None, event_id="task.created:t", kind="task.created",
              at="2025-01-01T12:00:00.000000Z", payload={"id": "t"})
    entry = bus_entry(e)
    with Stubber(client) as stub:
        stub.add_response("put_events", {"FailedEntryCount": 0, "Entries": [{"EventId": "1"}]}, {"Entries": [{
            "EventBusName": "clarify-test-events", "Source": "clarify", "DetailType": "task.created",
            "Detail": entry.detail, "Time": entry.time}]})
        assert bus.put([entry]) == []


# ====================================================================== configuration
def test_event_bus__must_be_named_or_explicitly_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLARIFY_EVENT_BUS", raising=False)
    with pytest.raises(RuntimeError, match="CLARIFY_EVENT_BUS"):
        bootstrap.event_bus()
    monkeypatch.setenv("CLARIFY_EVENT_BUS", "none")
    assert bootstrap.event_bus() is None
    monkeypatch.setenv("CLARIFY_EVENT_BUS", "clarify-prod-events")
    bus = bootstrap.event_bus()
    assert isinstance(bus, EventBridgeBus) and bus.name == "clarify-prod-events"


def test_publish__no_bus__feed_only_as_before() -> None:
    w = World()
    deps = replace(w.deps, bus=None, feed_index=None)
    e = event(workspace_id="ws", task_id="t", session_id=None, event_id="task.created:t", kind="task.created",
              at="2025-01-01T12:00:00.000000Z", payload={})
    assert publish_now(deps, [e]) is True and w.feed() == ["task.created:t"] and w.bus.calls == []


# ------------------------------------------------------------------ helpers
def task_item(task: Task) -> dict[str, Any]:
    item: dict[str, Any] = {"task_id": task.id, "workspace_id": task.workspace_id, "created_at": task.created_at,
                            "title": task.title, "workflow_step": task.workflow_step,
                            "summary_revision": task.summary.revision}
    for key, value in (("pending_action", task.summary.pending_action),
                       ("primary_session_id", task.summary.primary_session_id),
                       ("summary_at", task.summary.updated_at or None)):
        if value is not None:
            item[key] = value
    return item


def task_record(old: Task | None, new: Task, sequence: int) -> Record:
    """A tasks-table stream record (NEW_AND_OLD_IMAGES) in Lambda's shape."""
    dynamodb: dict[str, Any] = {"Keys": {"task_id": {"S": new.id}}, "NewImage": to_attrs(task_item(new)),
                                "SequenceNumber": f"{sequence:021d}", "StreamViewType": "NEW_AND_OLD_IMAGES"}
    if old is not None:
        dynamodb["OldImage"] = to_attrs(task_item(old))
    return {"eventName": "MODIFY" if old else "INSERT", "eventSource": "aws:dynamodb", "dynamodb": dynamodb}


# ====================================================================== the start-event outbox marker
@pytest.mark.parametrize("before_traffic", [True, False])
def test_start_event_marker__bus_rejects__marker_stays_then_the_reconciler_publishes_and_clears_it(
        w: World, before_traffic: bool) -> None:
    """A resume whose outcome is known only later (the agent took it, its reply was lost) replaces the
    reservation by the start-event marker. The marker is cleared only once the bus accepted turn.started;
    with the bus down it stays, and a later reconciler run publishes the event and clears it."""
    from chalicelib.domain.errors import DispatchAmbiguous
    from chalicelib.functions.reconciler import reconcile
    from chalicelib.services import responses

    sid, cid = w.asked_and_detached()
    agent = w.deps.agentctl
    assert isinstance(agent, FakeAgentctl)
    agent.script("accept-then-fail")
    w.bus.down = True
    body = {"answers": [{"question_id": "q1", "selected_options": ["pg"]}]}

    with pytest.raises(DispatchAmbiguous):
        responses.respond(w.deps, USER, cid, commands.respond(body), "key-1")

    s = w.memory.sessions[sid]
    assert s.start_event is not None and s.reservation is None
    started = f"turn.started:{s.start_event.turn_id}"
    assert not any(e.startswith(started) for e in w.bus.ids() + w.feed())

    w.bus.down = False
    clock = w.deps.clock
    assert isinstance(clock, StepClock)
    clock.advance(300)  # past the owner window: the scheduled reconciler finds it due too
    report = reconcile(w.deps, before_traffic=before_traffic)

    assert report.start_events_published == 1
    assert w.memory.sessions[sid].start_event is None
    published = [e for e in w.bus.ids() if e.startswith(started)]
    assert len(published) == 1 and published[0] in w.feed()
    assert reconcile(w.deps, before_traffic=before_traffic).start_events_published == 0  # nothing left
