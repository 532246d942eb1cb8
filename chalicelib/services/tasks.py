"""Tasks: create, list, get."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..auth.tokens import Caller
from ..domain import validation as v
from ..domain.model import Session, Task
from .access import task_for_user
from .deps import Deps
from .events import emit
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
    deps.store.put_task(task)
    emit(deps, workspace_id=task.workspace_id, task_id=task.id, session_id=None, event_id=f"task.created:{task.id}",
         kind="task.created", at=task.created_at, payload=task_payload(task))
    return task


def task_payload(task: Task) -> dict[str, object]:
    return {"id": task.id, "title": task.title, "workflow_step": task.workflow_step, "created_at": task.created_at,
            "status_summary": {"pending_action": task.summary.pending_action, "revision": task.summary.revision,
                               "primary_session_id": task.summary.primary_session_id}}


@dataclass(frozen=True)
class Listed:
    task: Task
    last_activity_at: str


def last_activity(task: Task, sessions: list[Session]) -> str:
    """When anything last happened in a task: its creation, its summary, or any session's latest write.

    Every session write (a turn, a question, an answer, a state change) touches the aggregate's updated_at,
    and the summary repair below reads the sessions anyway, so this costs no extra request.
    """
    return max([task.created_at, task.summary.updated_at, *(s.updated_at for s in sessions)])


def list_tasks(deps: Deps, caller: Caller) -> list[Listed]:
    """The workspace's tasks; each summary is repaired against the repository rule on this read."""
    caller.require_user()
    out = []
    for task in deps.store.list_tasks(caller.workspace_id):
        sessions = deps.store.list_sessions(task.id)
        current = refresh_task_summary(deps, task.id, task=task, sessions=sessions) or task
        out.append(Listed(current, last_activity(current, sessions)))
    return out


def get_task(deps: Deps, caller: Caller, task_id: str) -> Task:
    return task_for_user(deps, caller, task_id)
