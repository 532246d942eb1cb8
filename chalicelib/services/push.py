"""Web Push delivery: a new pending question reaches every device of every user of its workspace.

Called with the bus event of the pending-question rule (infra/bus.py QUESTION_PENDING). Each (question, device)
push is claimed with a conditional marker first, so a redelivered event sends nothing twice; a question no
longer active when the event arrives is not pushed at all. A push service's 404/410 removes the subscription;
429, 5xx and an unreachable service are retried with backoff (Retry-After honoured, bounded); other refusals
are counted and left. Failures that remain are reported, so the caller can have the event delivered again:
only the unsent devices are tried then.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .. import observability as obs
from ..domain import devices as d
from ..domain.model import Bundle, Session
from ..domain.rules import bundle_is_active
from ..push import webpush
from ..push.vapid import Vapid, unb64url
from .deps import Deps

log = logging.getLogger(__name__)
MARKER_TTL = timedelta(days=8)  # longer than EventBridge (24 h) and Lambda (6 h) redeliver an event
RETRYABLE = frozenset({0, 429, 500, 502, 503, 504})
GONE = frozenset({404, 410})
MAX_RETRY_WAIT = 10.0


class PushIncomplete(Exception):
    """Some devices could not be reached (429, 5xx, unreachable) after the tries: deliver the event again."""


@dataclass
class Pusher:
    """What sends: the VAPID key (read lazily from the secret store), the HTTP transport and the policy."""

    vapid: Callable[[], Vapid]
    transport: webpush.Transport = webpush.http_transport
    ttl: int = 24 * 3600  # a push service keeps an undelivered message this long
    attempts: int = 4  # tries per device within one invocation
    backoff: float = 0.5  # seconds before the second try, doubling after


@dataclass
class Report:
    sent: int = 0
    skipped: int = 0  # already pushed (or being pushed) for this question
    expired: int = 0
    failed: list[str] = field(default_factory=list)  # device ids still to be tried
    reason: str = ""  # why nothing was pushed

    def as_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "skipped": self.skipped, "expired": self.expired, "failed": self.failed,
                **({"reason": self.reason} if self.reason else {})}


def question(detail: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(workspace, session, clarification) of a pending-question event's detail; None for any other event."""
    payload = detail.get("payload")
    if detail.get("type") != "message.added" or not isinstance(payload, Mapping) \
            or payload.get("type") != "clarification":
        return None
    ids = (detail.get("workspace_id"), detail.get("session_id"), payload.get("clarification_id"))
    return (ids[0], ids[1], ids[2]) if all(isinstance(i, str) and i for i in ids) else None  # type: ignore[return-value]


def deliver(deps: Deps, detail: Mapping[str, Any]) -> Report:
    """Push the event's question to its workspace's devices. Raises StoreUnavailable when the store fails."""
    ids = question(detail)
    if ids is None or deps.devices is None or deps.pusher is None:
        return Report(reason="not a pending question" if ids is None else "push is not configured")
    workspace_id, session_id, clarification_id = ids
    with obs.scope(workspace=workspace_id, session=session_id, clarification=clarification_id):
        devices = deps.devices.list_devices(workspace_id)
        if not devices:  # most workspaces: nothing else to read
            return Report(reason="no devices")
        session = deps.store.get_session(session_id)
        bundle = session.bundle(clarification_id) if session and session.workspace_id == workspace_id else None
        if session is None or bundle is None or not bundle_is_active(session, bundle):
            return Report(reason="the question is no longer pending")
        body = _payload(deps, session, bundle)
        report = Report()
        for device in devices:
            _deliver_one(deps, deps.pusher, device, clarification_id, body, report)
        log.info("push for %s: %s", clarification_id, report.as_dict())
        return report


def _payload(deps: Deps, session: Session, bundle: Bundle) -> bytes:
    task = deps.store.get_task(session.task_id)
    first = bundle.rows[0].question
    answerable = None
    if len(bundle.rows) == 1 and len(first.options) <= 2:
        answerable = (first.question_id, [(o.option_id, o.label) for o in first.options])
    return d.notification(clarification_id=bundle.id, session_id=session.id, task_id=session.task_id,
                          title=task.title if task else "", question=first.prompt or first.title,
                          answerable=answerable, max_bytes=webpush.MAX_PAYLOAD)


def _deliver_one(deps: Deps, pusher: Pusher, device: d.Device, clarification_id: str, body: bytes,
                 report: Report) -> None:
    store = deps.devices
    assert store is not None
    expires = int((deps.clock() + MARKER_TTL).timestamp())
    if not store.claim_push(device.workspace_id, clarification_id, device.id, now=deps.now(), until=deps.deadline(),
                            expires_at=expires):
        report.skipped += 1
        return
    status = _send(deps, pusher, device, clarification_id, body)
    if 200 <= status < 300:
        store.finish_push(device.workspace_id, clarification_id, device.id, sent=True)
        report.sent += 1
        obs.count(obs.PUSHES, outcome="sent")
        return
    store.finish_push(device.workspace_id, clarification_id, device.id, sent=False)
    if status in GONE:
        store.delete_device(device.workspace_id, device.id)
        report.expired += 1
        obs.count(obs.PUSHES, outcome="expired")
        return
    log.warning("push to device %s failed with status %s", device.id, status)
    obs.count(obs.PUSHES, outcome="failed")
    if status in RETRYABLE:
        report.failed.append(device.id)


def _send(deps: Deps, pusher: Pusher, device: d.Device, clarification_id: str, body: bytes) -> int:
    """The push service's last status after up to `pusher.attempts` tries (0: unreachable)."""
    target = webpush.Target(device.endpoint, unb64url(device.p256dh), unb64url(device.auth))
    vapid = pusher.vapid()
    status = 0
    for attempt in range(max(1, pusher.attempts)):
        # Encrypted afresh each try: a new salt and key, as RFC 8291 wants for every message.
        message = webpush.encrypt(body, target.p256dh, target.auth)
        headers = webpush.request_headers(vapid, target, ttl=pusher.ttl, urgency="high", topic_key=clarification_id)
        outcome = pusher.transport(target.endpoint, message, headers)
        status = outcome.status
        if status not in RETRYABLE or attempt == pusher.attempts - 1:
            return status
        obs.count(obs.PUSHES, outcome="retried")
        wait = outcome.retry_after if outcome.retry_after is not None else pusher.backoff * 2 ** attempt
        deps.sleep(min(wait, MAX_RETRY_WAIT))
    return status
