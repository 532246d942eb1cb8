"""Building and emitting client events. Every event id derives from the change that caused it (stable across
redelivery); publication (bus, then feed) is in publication.py."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..domain.model import Event, Session, Turn
from ..domain.public import strip_private
from .deps import Deps
from .publication import publish_now

log = logging.getLogger(__name__)


def event(*, workspace_id: str, task_id: str, session_id: str | None, event_id: str, kind: str, at: str,
          payload: Mapping[str, Any]) -> Event:
    return Event(id=event_id, workspace_id=workspace_id, type=kind, task_id=task_id, session_id=session_id,
                 payload=strip_private(payload), at=at)


def session_event(session: Session, event_id: str, kind: str, at: str, payload: Mapping[str, Any]) -> Event:
    return event(workspace_id=session.workspace_id, task_id=session.task_id, session_id=session.id,
                 event_id=event_id, kind=kind, at=at, payload=payload)


def turn_started(session: Session, turn: Turn) -> Event:
    """`turn.started` of one turn: the stream and an explicit publication build the same event."""
    return session_event(session, f"turn.started:{turn.id}", "turn.started", turn.started_at, _turn(turn))


def turn_completed(session: Session, turn: Turn, completed_at: str, *, abandoned: bool = False) -> Event:
    payload = {**_turn(turn), "completed_at": completed_at, **({"abandoned": True} if abandoned else {})}
    return session_event(session, f"turn.completed:{turn.id}", "turn.completed", completed_at, payload)


def _turn(turn: Turn) -> dict[str, Any]:
    return {"turn_id": turn.id, "seq": turn.seq, "started_at": turn.started_at}


def emit_event(deps: Deps, e: Event) -> bool:
    """Inside a stream batch the event waits in the batch's outbox (published, or the record retried, at the
    batch's end). Elsewhere it is published at once; a rejection is logged and returns False: every such
    event is also derived by a stream function from the change that caused it, which publishes it then."""
    if deps.outbox is not None:
        deps.outbox.add(e)
        return True
    published = publish_now(deps, [e])
    if not published:
        log.error("event %s was not published now; the stream function publishes it with the same id", e.id)
    return published


def emit(deps: Deps, *, workspace_id: str, task_id: str, session_id: str | None, event_id: str, kind: str,
         at: str, payload: Mapping[str, Any]) -> bool:
    return emit_event(deps, event(workspace_id=workspace_id, task_id=task_id, session_id=session_id,
                                  event_id=event_id, kind=kind, at=at, payload=payload))


def emit_for(deps: Deps, session: Session, event_id: str, kind: str, at: str, payload: Mapping[str, Any]) -> bool:
    return emit_event(deps, session_event(session, event_id, kind, at, payload))
