"""Renaming and deleting tasks, and a task's last activity, at the service layer over the in-memory store."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib.auth.tokens import Caller
from chalicelib.domain.errors import NotFound, ValidationError
from chalicelib.domain.model import State
from chalicelib.services import messages, sessions, task_changes, tasks
from chalicelib.services.deps import Deps
from chalicelib.store.memory import MemoryStore
from tests.support.fakes import CounterIds, FakeAgentctl, StepClock, agent_token

USER = Caller(sub="user-1", role="user", workspace_id="ws-1")
OTHER = Caller(sub="user-2", role="user", workspace_id="ws-2")


@pytest.fixture
def deps() -> Deps:
    store = MemoryStore()
    return Deps(store=store, agentctl=FakeAgentctl(store), clock=StepClock(step=timedelta(milliseconds=1)),
                new_id=CounterIds(), agent_token=agent_token)


def _events(deps: Deps, kind: str) -> list[dict[str, object]]:
    rows = deps.store.list_events("ws-1", low_sk="", after_sk="", written_after="", limit=1000)
    return [dict(e.payload) for _, _, e in rows if e.type == kind]


def test_rename__new_title__stored_and_announced(deps: Deps) -> None:
    task = tasks.create_task(deps, USER, {"title": "Old"})
    renamed = task_changes.rename_task(deps, USER, task.id, {"title": "  New name "})
    assert renamed.title == "New name" and tasks.get_task(deps, USER, task.id).title == "New name"
    assert [p["title"] for p in _events(deps, "task.updated")] == ["New name"]


@pytest.mark.parametrize("body, field", [({}, "title"), ({"title": " "}, "title"), ({"title": 7}, "title"),
                                         ([], "body"), ({"title": "x" * 201}, "title")])
def test_rename__bad_body__validation_error_naming_the_field_nothing_written(deps: Deps, body: object,
                                                                            field: str) -> None:
    task = tasks.create_task(deps, USER, {"title": "Keep"})
    with pytest.raises(ValidationError) as raised:
        task_changes.rename_task(deps, USER, task.id, body)
    assert raised.value.field == field
    assert tasks.get_task(deps, USER, task.id).title == "Keep" and not _events(deps, "task.updated")


def test_rename_and_delete__other_workspace__not_found_nothing_changed(deps: Deps) -> None:
    task = tasks.create_task(deps, USER, {"title": "Mine"})
    with pytest.raises(NotFound):
        task_changes.rename_task(deps, OTHER, task.id, {"title": "Theirs"})
    with pytest.raises(NotFound):
        task_changes.delete_task(deps, OTHER, task.id)
    assert tasks.get_task(deps, USER, task.id).title == "Mine"


def test_delete__live_sessions_cancelled_task_gone_and_announced(deps: Deps) -> None:
    task = tasks.create_task(deps, USER, {"title": "Doomed"})
    running = sessions.create_session(deps, USER, task.id, {"prompt": "work"}).session
    ended = sessions.create_session(deps, USER, task.id, {}).session
    sessions.cancel_session(deps, USER, ended.id)
    kept = tasks.create_task(deps, USER, {"title": "Kept"})

    task_changes.delete_task(deps, USER, task.id)

    assert [t.task.id for t in tasks.list_tasks(deps, USER)] == [kept.id]
    with pytest.raises(NotFound):
        tasks.get_task(deps, USER, task.id)
    stored = deps.store.get_session(running.id)
    assert stored is not None and stored.state == State.CANCELLED
    assert [p["id"] for p in _events(deps, "task.deleted")] == [task.id]
    with pytest.raises(NotFound):  # a repeated delete is a missing task
        task_changes.delete_task(deps, USER, task.id)


def test_list__last_activity__latest_session_write(deps: Deps) -> None:
    quiet = tasks.create_task(deps, USER, {"title": "Quiet"})
    busy = tasks.create_task(deps, USER, {"title": "Busy"})
    session = sessions.create_session(deps, USER, busy.id, {}).session
    messages.send_message(deps, USER, session.id, {"client_message_id": "m1", "content": "hello"})
    listed = {t.task.id: t.last_activity_at for t in tasks.list_tasks(deps, USER)}
    stored = deps.store.get_session(session.id)
    assert stored is not None
    assert listed[quiet.id] == quiet.created_at
    assert listed[busy.id] >= stored.updated_at > quiet.created_at  # (the list may repair the summary: later)
