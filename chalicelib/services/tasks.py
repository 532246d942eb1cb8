"""Tasks: create, list, get."""
from __future__ import annotations

from dataclasses import dataclass

from ..auth.tokens import Caller
from ..domain.commands import CreateTask
from ..domain.model import Session, Task
from .access import task_for_user
from .deps import Deps
from .projection import refresh_task_summary


def create_task(deps: Deps, caller: Caller, command: CreateTask) -> Task:
    caller.require_user()
    task = Task(id=deps.new_id(), workspace_id=caller.workspace_id, title=command.title,
                workflow_step=command.workflow_step, created_at=deps.now())
    deps.store.put_task(task)  # task.created is published by the tasks stream function, so it cannot be lost
    return task


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
