"""Writing client events. Every event id derives from the change that caused it (stable across redelivery)."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..domain.model import Event, Session
from .deps import Deps

log = logging.getLogger(__name__)

# Private prompt-dispatch and recovery fields: never in a public event.
# ("prompt" is not among them: a question's prompt text is public; the aggregate's prompt slot never
# reaches a payload because payloads are built from views.)
PRIVATE_FIELDS = frozenset({"agent_token", "recon_due", "recon_shard", "reservation", "dispatch", "deadline",
                            "client_message_id", "delivery", "delivery_pending", "recovery", "idempotency_key",
                            "fingerprint", "watchdog", "queue", "prompt_generation", "execution_id"})


def public(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The one place private fields are stripped, recursively, from every public event."""
    def clean(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: clean(v) for k, v in value.items() if k not in PRIVATE_FIELDS}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return dict(clean(payload))


def emit(deps: Deps, *, workspace_id: str, task_id: str, session_id: str | None, event_id: str, kind: str,
         at: str, payload: Mapping[str, Any]) -> bool:
    event = Event(id=event_id, workspace_id=workspace_id, type=kind, task_id=task_id, session_id=session_id,
                  payload=public(payload), at=at)
    written = deps.store.put_event(event, deps.now())
    if not written:
        log.debug("event %s already in the feed", event_id)
    return written


def emit_for(deps: Deps, session: Session, event_id: str, kind: str, at: str, payload: Mapping[str, Any]) -> bool:
    return emit(deps, workspace_id=session.workspace_id, task_id=session.task_id, session_id=session.id,
                event_id=event_id, kind=kind, at=at, payload=payload)
