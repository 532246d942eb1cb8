"""Writing client events. Every event id derives from the change that caused it (stable across redelivery)."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..domain.model import Event, Session
from ..domain.public import strip_private
from .deps import Deps

log = logging.getLogger(__name__)


def emit(deps: Deps, *, workspace_id: str, task_id: str, session_id: str | None, event_id: str, kind: str,
         at: str, payload: Mapping[str, Any]) -> bool:
    event = Event(id=event_id, workspace_id=workspace_id, type=kind, task_id=task_id, session_id=session_id,
                  payload=strip_private(payload), at=at)
    written = deps.store.put_event(event, deps.now())
    if not written:
        log.debug("event %s already in the feed", event_id)
    return written


def emit_for(deps: Deps, session: Session, event_id: str, kind: str, at: str, payload: Mapping[str, Any]) -> bool:
    return emit(deps, workspace_id=session.workspace_id, task_id=session.task_id, session_id=session.id,
                event_id=event_id, kind=kind, at=at, payload=payload)
