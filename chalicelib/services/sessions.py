"""Sessions: create (and start the agent), list, get, cancel."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..agentctl.client import AgentctlAmbiguous, CancelRequest
from ..auth.tokens import Caller
from ..domain.commands import CreateSession
from ..domain.errors import ConditionFailed
from ..domain.model import Session, State
from . import paging
from .access import session_for_user, task_for_user
from .deps import Deps
from .lifecycle import end_session
from .messages import Admission, admit_message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Created:
    session: Session
    admission: Admission | None


def create_session(deps: Deps, caller: Caller, task_id: str, command: CreateSession) -> Created:
    prompt = command.prompt
    task = task_for_user(deps, caller, task_id)
    now = deps.now()
    is_primary = command.primary or not deps.store.page_sessions(task.id, 1, None).items
    session = Session(id=deps.new_id(), workspace_id=task.workspace_id, task_id=task.id, created_at=now,
                      updated_at=now, is_primary=is_primary, state=State.IDLE, version=0,
                      execution_id=deps.new_id())
    try:  # named on its task first: a crash between the two leaves a name without a session, harmless
        deps.store.add_task_session(task.id, session.id)
    except ConditionFailed:
        pass  # a task stored before tasks named their sessions: its list reads query them instead
    deps.store.create_session(session)
    admission = None
    if prompt:
        admission = admit_message(deps, caller, session, client_message_id=f"start-{session.id}", content=prompt)
        session = deps.store.get_session(session.id) or session
    return Created(session, admission)


def list_sessions(deps: Deps, caller: Caller, task_id: str, *, limit: int,
                  cursor: str | None) -> tuple[list[Session], str | None]:
    """One page of the task's sessions, newest first, and the cursor of the next (None: this is the last)."""
    task = task_for_user(deps, caller, task_id)
    page = deps.store.page_sessions(task.id, limit, paging.decode(cursor, "cursor", 2))
    return page.items, paging.encode(page.after)


def get_session(deps: Deps, caller: Caller, session_id: str) -> Session:
    return session_for_user(deps, caller, session_id, reading=True)


def cancel_session(deps: Deps, caller: Caller, session_id: str) -> Session:
    """Terminal CANCELLED in one conditional write, then a best-effort agent cancel."""
    session = session_for_user(deps, caller, session_id)
    if session.state == State.CANCELLED:
        return session  # a repeated cancel is a no-op
    session = end_session(deps, session, State.CANCELLED)
    try:
        deps.agentctl.cancel(CancelRequest(session_id=session.id, execution_id=session.execution_id,
                                           prompt_generation=session.generation, silent=False))
    except AgentctlAmbiguous as exc:  # the session is cancelled durably either way
        log.warning("agent cancel for %s failed: %s", session.id, exc)
    return session
