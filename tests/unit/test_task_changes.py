"""Renaming and deleting tasks, and a task's last activity, at the service layer over the in-memory store; the
tasks stream function announces both (task.updated, task.deleted) with ids derived from the change."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.auth.tokens import Caller
from chalicelib.domain import commands
from chalicelib.domain.errors import NotFound, ValidationError
from chalicelib.domain.model import State, Task
from chalicelib.functions import streams
from chalicelib.services import task_changes, tasks
from chalicelib.store import codec
from tests.support.crash import to_attrs
from tests.support.world import USER, World

OTHER = Caller(sub="user-2", role="user", workspace_id="ws-2")


def _events(w: World, kind: str) -> list[dict[str, Any]]:
    rows = w.memory.list_events("ws-1", low_sk="", after_sk="", written_after="", limit=1000)
    return [dict(e.payload) for _, _, e in rows if e.type == kind]


def _record(old: Task | None, new: Task | None, sequence: int) -> dict[str, Any]:
    change: dict[str, Any] = {"Keys": {"task_id": {"S": (new or old).id}}, "SequenceNumber": f"{sequence:021d}",  # type: ignore[union-attr]
                              "ApproximateCreationDateTime": 1735732800.0}
    if old is not None:
        change["OldImage"] = to_attrs(codec.task_to_item(old))
    if new is not None:
        change["NewImage"] = to_attrs(codec.task_to_item(new))
    name = "MODIFY" if old and new else ("INSERT" if new else "REMOVE")
    return {"eventName": name, "eventSource": "aws:dynamodb", "dynamodb": change}


def test_rename__new_title__stored() -> None:
    w = World()
    task_id = w.task("Old")
    renamed = task_changes.rename_task(w.deps, USER, task_id, commands.rename_task({"title": "  New name "}))
    assert renamed.title == "New name" and tasks.get_task(w.deps, USER, task_id).title == "New name"


@pytest.mark.parametrize("body, field", [({}, "title"), ({"title": " "}, "title"), ({"title": 7}, "title"),
                                         ([], "body"), ({"title": "x" * 201}, "title")])
def test_rename__bad_body__validation_error_naming_the_field(body: object, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        commands.rename_task(body)
    assert raised.value.field == field


def test_rename_and_delete__other_workspace__not_found_nothing_changed() -> None:
    w = World()
    task_id = w.task("Mine")
    with pytest.raises(NotFound):
        task_changes.rename_task(w.deps, OTHER, task_id, commands.rename_task({"title": "Theirs"}))
    with pytest.raises(NotFound):
        task_changes.delete_task(w.deps, OTHER, task_id)
    assert tasks.get_task(w.deps, USER, task_id).title == "Mine"


def test_delete__live_sessions_cancelled_then_the_task_gone() -> None:
    w = World()
    task_id = w.task("Doomed")
    running = w.session("work", task_id=task_id)
    ended = w.session(task_id=task_id)
    w.cancel(ended.id)
    kept = w.task("Kept")

    task_changes.delete_task(w.deps, USER, task_id)

    assert [t.task.id for t in tasks.list_tasks(w.deps, USER, limit=50, cursor=None).tasks] == [kept]
    with pytest.raises(NotFound):
        tasks.get_task(w.deps, USER, task_id)
    assert w.get(running.id).state == State.CANCELLED
    with pytest.raises(NotFound):  # a repeated delete is a missing task
        task_changes.delete_task(w.deps, USER, task_id)


def test_tasks_stream__rename_and_delete__announced_once_each_even_when_redelivered() -> None:
    w = World()
    task = tasks.get_task(w.deps, USER, w.task("Old"))
    renamed = replace(task, title="New")
    records = [_record(task, renamed, 2), _record(renamed, None, 3)]

    for _ in range(2):  # delivered, then delivered again
        assert streams.process_batch(w.deps, records, streams.on_task_record) == {"batchItemFailures": []}

    assert [p["title"] for p in _events(w, "task.updated")] == ["New"]
    assert [p["id"] for p in _events(w, "task.deleted")] == [task.id]


def test_list__last_activity__latest_session_write() -> None:
    w = World()
    quiet = w.task("Quiet")
    busy = w.task("Busy")
    w.clock.advance(5)
    session = w.session(task_id=busy)
    w.send(session.id, "hello", "m1")
    listed = {t.task.id: t.last_activity_at for t in tasks.list_tasks(w.deps, USER, limit=50, cursor=None).tasks}
    stored = w.get(session.id)
    created = tasks.get_task(w.deps, USER, quiet).created_at
    assert listed[quiet] == created
    assert listed[busy] >= stored.updated_at > created  # (the list may repair the summary: later)
