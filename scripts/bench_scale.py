"""The `scale` part of the benchmark (issue 26): paged reads at 10,000 tasks and a 5,000-message session, and
the session item's size and a write's cost as its history grows.

Seeds a workspace with 10,000 tasks (each with one session, 1 % with a pending question) and a session with
5,000 messages straight through the store's item shapes (BatchWriteItem: fast), then measures over HTTP on the
local stack: the first task page, a transcript page and the event feed's first page. For each: DynamoDB
requests per call, read capacity by AWS's rules (1 RCU per 4 KB of a strongly consistent read, half for an
eventually consistent one, per item for a batch read) and the median latency as a ratio to one bare Query of
the same page size on the same table or index. The same at 100 tasks. Then 1,000 turns of ignored 5 KB
questions, the sessions stream function run after every write (in memory: the sizes are the store's own
encoding): the session item's size and the WCU of a write at turn 1, 100 and 1,000.

    python -m scripts.bench_scale [--tasks N] [--messages N] [--rounds N]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

import requests  # noqa: E402

from chalicelib import bootstrap  # noqa: E402
from chalicelib.domain.model import (  # noqa: E402
    Bundle,
    Event,
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
from chalicelib.store import codec  # noqa: E402
from chalicelib.store.attrs import to_attr  # noqa: E402
from chalicelib.store.models import EventRecord, HistoryRecord, SessionRecord, TaskRecord  # noqa: E402
from chalicelib.store.size import item_size as stored_size  # noqa: E402
from scripts.local.sim_agent import SimAgent  # noqa: E402
from scripts.local.stack import LocalStack, aws_clients  # noqa: E402

AT = "2030-01-01T00:00:00.000000Z"


def _size(item: dict[str, Any] | None) -> int:
    return stored_size(codec.from_attrs(item)) if item else 0


class ReadMeter:
    """Counts this process's DynamoDB requests and their read capacity by AWS's rules."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.rcu = 0.0
        self.enabled = False
        self.lock = threading.Lock()
        self._params = threading.local()

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build.dynamodb", self._before)
        client.meta.events.register("after-call.dynamodb", self._after)

    def _before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self._params.value = dict(params)

    def _after(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if not self.enabled:
            return
        body = getattr(self._params, "value", {})
        rcu = 0.0
        if model.name in ("GetItem", "Query"):
            per = 1.0 if body.get("ConsistentRead") else 0.5
            items = [parsed.get("Item")] if model.name == "GetItem" else parsed.get("Items", [])
            rcu = max(1, math.ceil(sum(_size(i) for i in items) / 4096)) * per
        elif model.name == "BatchGetItem":
            for table, found in parsed.get("Responses", {}).items():
                per = 1.0 if body.get("RequestItems", {}).get(table, {}).get("ConsistentRead") else 0.5
                rcu += sum(max(1, math.ceil(_size(i) / 4096)) * per for i in found)  # each item on its own
        with self.lock:
            self.calls[model.name] += 1
            self.rcu += rcu

    def measure(self, call: Callable[[], Any]) -> tuple[Counter[str], float]:
        with self.lock:
            self.calls, self.rcu = Counter(), 0.0
        self.enabled = True
        try:
            call()
        finally:
            self.enabled = False
        with self.lock:
            return Counter(self.calls), self.rcu


class Scale:
    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.sim = SimAgent("http://127.0.0.1:9", port=0).start()
        self.stack = LocalStack(agentctl_url=self.sim.url).start()
        self.sim.api_url = self.stack.url
        self.raw, _ = aws_clients(self.stack.endpoint)
        self.meter = ReadMeter()
        store: Any = bootstrap.deps().store
        self.meter.attach(store.client)
        from chalicelib.store.models import ALL_MODELS
        for model in ALL_MODELS:
            self.meter.attach(model._get_connection().connection.client)
        self.base = self.stack.url + "/api/v1"
        self.rows: list[tuple[str, Counter[str], float, float, float]] = []

    def stop(self) -> None:
        self.stack.stop()
        self.sim.stop()

    # ---------------------------------------------------------------- seeding (item shapes of the store)
    def _write(self, table: str, items: list[dict[str, Any]]) -> None:
        for start in range(0, len(items), 25):
            request = {table: [{"PutRequest": {"Item": {k: to_attr(v) for k, v in i.items()}}}
                               for i in items[start:start + 25]]}
            while request:
                request = self.raw.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}

    def seed_tasks(self, workspace: str, count: int) -> None:
        tasks, sessions = [], []
        for n in range(count):
            tid, sid = f"{workspace}-t{n:05d}", f"{workspace}-s{n:05d}"
            at = f"2030-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000000Z"
            pending = "clarification" if n % 100 == 0 else None
            tasks.append(codec.task_to_item(Task(id=tid, workspace_id=workspace, title=f"Task {n}",
                                                 workflow_step="todo", created_at=at, session_ids=(sid,),
                                                 summary=StatusSummary(pending_action=pending, revision=1,
                                                                       primary_session_id=sid, updated_at=at))))
            turn = Turn(id=f"{sid}-turn", seq=1, started_at=at)
            asked = (Bundle(id=f"{sid}.b1", turn_id=turn.id, message_id=f"{sid}.b1", created_at=at, context="",
                            rows=(Row(Question("q1", "", "Which database?", (Option("a", "Postgres"),
                                                                            Option("b", "SQLite"))), "pending"),)),)
            sessions.append(codec.session_to_item(Session(
                id=sid, workspace_id=workspace, task_id=tid, created_at=at, updated_at=at, is_primary=True,
                state=State.WAITING_FOR_INPUT if pending else State.IDLE, version=1, execution_id="e",
                turn_seq=1, current_turn=turn, bundles=asked if pending else ())))
        self._write(str(TaskRecord.Meta.table_name), tasks)
        self._write(str(SessionRecord.Meta.table_name), sessions)

    def seed_session(self, workspace: str, messages: int) -> str:
        sid = f"{workspace}-long"
        turn = Turn(id="turn-1", seq=1, started_at=AT)
        self._write(str(SessionRecord.Meta.table_name), [codec.session_to_item(Session(
            id=sid, workspace_id=workspace, task_id=f"{workspace}-t00001", created_at=AT, updated_at=AT,
            is_primary=False, state=State.IDLE, version=1, execution_id="e", turn_seq=1,
            current_turn=turn))])
        self._write(str(HistoryRecord.Meta.table_name), [codec.message_to_item(Message(
            id=f"m{n:05d}", session_id=sid, workspace_id=workspace, task_id=f"{workspace}-t00001",
            turn_id=turn.id, turn_seq=1, author_type="agent" if n % 2 else "user", type="message",
            content=f"Message {n}: " + "a realistic line of agent output. " * 12,
            created_at=f"2030-01-01T01:{n // 60 % 60:02d}:{n % 60:02d}.{n // 3600:06d}Z")) for n in range(messages)])
        return sid

    def seed_events(self, workspace: str, count: int) -> None:
        self._write(str(EventRecord.Meta.table_name), [codec.event_to_item(Event(
            id=f"message.added:e{n:05d}", workspace_id=workspace, type="message.added", task_id="t",
            session_id="s", payload={"id": f"e{n:05d}", "content": "x" * 200}, at=AT[:-8] + f"{n:06d}Z"),
            AT, 2_000_000_000) for n in range(count)])

    # ---------------------------------------------------------------- measuring
    def bare_query(self, limit: int, **kwargs: Any) -> float:
        samples = []
        for _ in range(max(10, self.rounds * 2)):
            t = time.perf_counter()
            self.raw.query(Limit=limit, **kwargs)
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    def page(self, name: str, workspace: str, path: str, params: dict[str, Any], bare: float) -> None:
        token = self.stack.user_token(workspace=workspace)

        def call() -> None:
            resp = requests.get(self.base + path, params=params, headers={"Authorization": f"Bearer {token}"},
                                timeout=60)
            assert resp.status_code == 200, resp.text[:300]

        call()  # warm
        calls, rcu = self.meter.measure(call)
        samples = []
        for _ in range(self.rounds):
            t = time.perf_counter()
            call()
            samples.append(time.perf_counter() - t)
        self.rows.append((name, calls, rcu, statistics.median(samples) * 1000, statistics.median(samples) / bare))

    def run(self, tasks: int, messages: int) -> None:
        big, small = f"ws-scale-{uuid.uuid4().hex[:6]}", f"ws-small-{uuid.uuid4().hex[:6]}"
        self.seed_tasks(big, tasks)
        self.seed_tasks(small, 100)
        sid = self.seed_session(big, messages)
        self.seed_events(big, 1000)
        index = {"TableName": TaskRecord.Meta.table_name, "IndexName": TaskRecord.by_activity.Meta.index_name,
                 "KeyConditionExpression": "workspace_id = :w", "ScanIndexForward": False}
        for ws, n in ((big, tasks), (small, 100)):
            bare = self.bare_query(51, ExpressionAttributeValues={":w": {"S": ws}}, **index)
            self.page(f"first task page (50 of {n:,} tasks)", ws, "/tasks", {"limit": 50}, bare)
        bare = self.bare_query(102, TableName=HistoryRecord.Meta.table_name, ConsistentRead=True,
                               ScanIndexForward=False, KeyConditionExpression="session_id = :s",
                               ExpressionAttributeValues={":s": {"S": sid}})
        self.page(f"transcript page (100 of {messages:,} messages)", big, f"/sessions/{sid}/transcript",
                  {"limit": 100}, bare)
        bare = self.bare_query(200, TableName=EventRecord.Meta.table_name, ConsistentRead=True,
                               KeyConditionExpression="workspace_id = :w",
                               ExpressionAttributeValues={":w": {"S": big}})
        self.page("event feed, first page (200 of 1,000 events)", big, "/events", {}, bare)


def session_growth(turns: tuple[int, ...] = (1, 100, 1000)) -> list[tuple[int, int, int, int]]:
    """(turn, the item's size after the turn settled, WCU of the turn's ask, WCU of a later write)."""
    from chalicelib.functions import streams
    from chalicelib.store.memory import MemoryStore
    from tests.support.crash import SessionTap
    from tests.support.world import World

    questions = [{"question_id": f"q{q}", "title": f"Decision {q}", "prompt": "Which approach should we take? " * 6,
                  "options": [{"option_id": f"o{o}", "label": f"Option {o}",
                               "description": "A described trade-off of this option, " * 4} for o in range(6)]}
                 for q in range(4)]
    w = World(SessionTap(MemoryStore()))
    fed = 0

    def stream() -> None:
        nonlocal fed
        end = len(w.store.changes)
        for record in w.store.records(fed):
            streams.on_session_record(w.deps, record)
        fed = end

    sid = w.session().id
    size = lambda: stored_size(w.memory.items[sid])  # noqa: E731
    out = []
    for turn in range(1, max(turns) + 1):
        before = size()
        w.ask(sid, questions)
        ask_wcu = math.ceil(max(before, size()) / 1024)
        stream()
        before = size()
        w.report(sid, "turn_completed")
        later_wcu = math.ceil(max(before, size()) / 1024)
        stream()
        if turn in turns:
            out.append((turn, size(), ask_wcu, later_wcu))
    return out


def fmt(calls: Counter[str]) -> str:
    return f"{sum(calls.values())} ({', '.join(f'{k} {v}' for k, v in sorted(calls.items()))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    scale = Scale(args.rounds)
    try:
        scale.run(args.tasks, args.messages)
    finally:
        scale.stop()
    print("| page | DynamoDB requests per call | RCU | median latency | × one bare Query of the page |")
    print("|---|---|---|---|---|")
    for name, calls, rcu, ms, ratio in scale.rows:
        print(f"| {name} | {fmt(calls)} | {rcu:.1f} | {ms:.1f} ms | {ratio:.1f} |")
    print()
    print("| turn (ignored 5 KB questions) | session item | WCU of the turn's ask | WCU of a later write |")
    print("|---|---|---|---|")
    for turn, size, ask, later in session_growth():
        print(f"| {turn:,} | {size / 1024:.1f} KB | {ask} | {later} |")


if __name__ == "__main__":
    main()
