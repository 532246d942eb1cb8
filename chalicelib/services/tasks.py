"""Tasks: create, list, get."""
from __future__ import annotations

from ..auth.tokens import Caller
from ..domain.commands import CreateTask
from ..domain.model import Task
from .access import task_for_user
from .deps import Deps
from .projection import refresh_task_summary


def create_task(deps: Deps, caller: Caller, command: CreateTask) -> Task:
    caller.require_user()
    task = Task(id=deps.new_id(), workspace_id=caller.workspace_id, title=command.title,
                workflow_step=command.workflow_step, created_at=deps.now())
    deps.store.put_task(task)  # task.created is published by the tasks stream function, so it cannot be lost
    return task


def list_tasks(deps: Deps, caller: Caller) -> list[Task]:
    """The workspace's tasks; each summary is repaired against the repository rule on this read."""
    caller.require_user()
    out = []
    for task in deps.store.list_tasks(caller.workspace_id):
        out.append(refresh_task_summary(deps, task.id, task=task) or task)
    return out


def get_task(deps: Deps, caller: Caller, task_id: str) -> Task:
    return task_for_user(deps, caller, task_id)
