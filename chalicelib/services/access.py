"""Scope-checked loading: anything outside the caller's scope is NotFound, exactly like a missing item."""
from __future__ import annotations

from .. import observability as obs
from ..auth.tokens import Caller
from ..domain.errors import NotFound, SessionUnavailable
from ..domain.model import Session, Task
from .deps import Deps


def task_for_user(deps: Deps, caller: Caller, task_id: str) -> Task:
    caller.require_user()
    task = deps.store.get_task(task_id)
    if task is None or task.workspace_id != caller.workspace_id:
        raise NotFound("task not found")
    obs.bind(task=task.id)
    return task


def session_for_user(deps: Deps, caller: Caller, session_id: str, *, reading: bool = False) -> Session:
    """The caller's session. Unless only `reading`, a quarantined one is refused (session_unavailable)."""
    caller.require_user()
    session = deps.store.get_session(session_id)
    if session is None or session.workspace_id != caller.workspace_id:
        raise NotFound("session not found")
    obs.bind_session(session)
    return session if reading else admitted(session)


def session_for_agent(deps: Deps, caller: Caller, session_id: str) -> Session:
    caller.require_agent_for(session_id)
    session = deps.store.get_session(session_id)
    if session is None or session.workspace_id != caller.workspace_id:
        raise NotFound("session not found")
    obs.bind_session(session)
    return admitted(session)


def admitted(session: Session) -> Session:
    """A quarantined aggregate takes no input until an operator repaired and released it."""
    if session.quarantine is not None:
        raise SessionUnavailable("this session is set apart for repair; an operator has been alerted",
                                 reason="quarantined")
    return session
