"""Tasks: create, list, get."""
from __future__ import annotations

from dataclasses import dataclass

from ..auth.tokens import Caller
from ..domain.commands import CreateTask
from ..domain.model import Session, Task
from . import paging
from .access import task_for_user
from .deps import Deps
from .projection import refresh_task_summary


def create_task(deps: Deps, caller: Caller, command: CreateTask) -> Task:
    caller.require_user()
    task = Task(id=deps.new_id(), workspace_id=caller.workspace_id, title=command.title,
                workflow_step=command.workflow_step, created_at=deps.now(), session_ids=())
    deps.store.put_task(task)  # task.created is published by the tasks stream function, so it cannot be lost
    return task


@dataclass(frozen=True)
class Listed:
    task: Task
    last_activity_at: str


@dataclass(frozen=True)
class TaskPage:
    tasks: list[Listed]
    next_cursor: str | None


def last_activity(task: Task, sessions: list[Session]) -> str:
    """When anything last happened in a task: its creation, its summary, or any session's latest write.

    Every session write (a turn, a question, an answer, a state change) touches the aggregate's updated_at,
    and the summary repair below reads the sessions anyway, so this costs no extra request.
    """
    return max([task.last_activity_at, *(s.updated_at for s in sessions)])


def list_tasks(deps: Deps, caller: Caller, *, limit: int, cursor: str | None) -> TaskPage:
    """One page of the workspace's tasks, in the list's order (pending first, then the latest activity),
    from one index Query; the page's summaries are repaired against the repository rule on this read from
    one batch read of the sessions the page's tasks name."""
    caller.require_user()
    page = deps.store.page_tasks(caller.workspace_id, limit, paging.decode(cursor, "cursor", 2))
    named = [sid for t in page.items for sid in (t.session_ids or ())]
    by_task: dict[str, list[Session]] = {t.id: [] for t in page.items}
    for session in deps.store.get_sessions(named) if named else []:
        by_task.setdefault(session.task_id, []).append(session)
    out = []
    for task in page.items:
        # A task stored before tasks named their sessions is read the old way (one Query for it).
        sessions = by_task[task.id] if task.session_ids is not None else deps.store.list_sessions(task.id)
        current = refresh_task_summary(deps, task.id, task=task, sessions=sessions) or task
        out.append(Listed(current, last_activity(current, sessions)))
    return TaskPage(out, paging.encode(page.after))


def get_task(deps: Deps, caller: Caller, task_id: str) -> Task:
    return task_for_user(deps, caller, task_id)
