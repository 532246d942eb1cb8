"""Tasks: create, list, get."""
from __future__ import annotations

from typing import Any

from ..auth.tokens import Caller
from ..domain import validation as v
from ..domain.model import Task
from .access import task_for_user
from .deps import Deps
from .projection import refresh_task_summary

DEFAULT_STEP = "todo"


def create_task(deps: Deps, caller: Caller, body: Any) -> Task:
    caller.require_user()
    data = v.body_object(body)
    title = v.text(data, "title", max_len=v.MAX_TITLE)
    step = v.identifier(data, "workflow_step", required=False) or DEFAULT_STEP
    assert title is not None
    task = Task(id=deps.new_id(), workspace_id=caller.workspace_id, title=title, workflow_step=step,
                created_at=deps.now())
    deps.store.put_task(task)  # task.created is published by the tasks stream function, so it cannot be lost
    return task


def task_payload(task: Task) -> dict[str, object]:
    return {"id": task.id, "title": task.title, "workflow_step": task.workflow_step, "created_at": task.created_at,
            "status_summary": {"pending_action": task.summary.pending_action, "revision": task.summary.revision,
                               "primary_session_id": task.summary.primary_session_id}}


def list_tasks(deps: Deps, caller: Caller) -> list[Task]:
    """The workspace's tasks; each summary is repaired against the repository rule on this read."""
    caller.require_user()
    out = []
    for task in deps.store.list_tasks(caller.workspace_id):
        out.append(refresh_task_summary(deps, task.id, task=task) or task)
    return out


def get_task(deps: Deps, caller: Caller, task_id: str) -> Task:
    return task_for_user(deps, caller, task_id)
