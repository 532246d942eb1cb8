"""Push devices: a browser's Web Push subscription registered by one user, and what a push says.

Pure: validation of a PushSubscription, the device id (derived from the endpoint, so registering the same
subscription again finds the same device), and the notification payload cut to fit one push message.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..push import ec
from ..push.vapid import unb64url
from . import validation as v
from .errors import ValidationError

MAX_ENDPOINT = 2048
MAX_LABEL = 100
LOCAL_HOSTS = ("127.0.0.1",)  # the local stage's push service (tests/support/push_service.py) is plain HTTP
# What one notification carries: generous for a phone's lock screen, far under a push message's 3993 bytes.
MAX_TITLE_CHARS, MAX_QUESTION_CHARS = 120, 600


@dataclass(frozen=True)
class Device:
    id: str
    workspace_id: str
    user: str  # the owning caller's `sub`
    endpoint: str
    p256dh: str  # base64url, as the browser gave it
    auth: str
    label: str
    created_at: str


@dataclass(frozen=True)
class Subscription:
    endpoint: str
    p256dh: str
    auth: str
    label: str


def device_id(endpoint: str) -> str:
    """One id per push endpoint (an endpoint is unique to one browser's subscription)."""
    return "dev-" + hashlib.sha256(endpoint.encode()).hexdigest()[:32]


def subscription(body: Any, *, local: bool) -> Subscription:
    """A PushSubscription's JSON `{endpoint, keys: {p256dh, auth}, label?}`; ValidationError names the field.
    The endpoint must be https (`local` also allows http://127.0.0.1), the keys a P-256 point and 16 bytes."""
    body = v.body_object(body)
    endpoint = v.text(body, "endpoint", max_len=MAX_ENDPOINT)
    assert endpoint is not None
    _check_endpoint(endpoint, local=local)
    keys = body.get("keys")
    if not isinstance(keys, Mapping):
        raise ValidationError("keys", "keys must be an object {p256dh, auth}")
    p256dh = _key(keys, "p256dh", 65)
    auth = _key(keys, "auth", 16)
    try:
        ec.decode_point(unb64url(p256dh))
    except ValueError as exc:
        raise ValidationError("keys.p256dh", f"keys.p256dh: {exc}") from None
    label = v.text(body, "label", max_len=MAX_LABEL, required=False, allow_empty=True) or ""
    return Subscription(endpoint, p256dh, auth, label)


def _check_endpoint(endpoint: str, *, local: bool) -> None:
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
    except ValueError:
        raise ValidationError("endpoint", "endpoint must be a URL") from None
    local_http = local and parts.scheme == "http" and host in LOCAL_HOSTS
    if not (parts.scheme == "https" or local_http) or not host or parts.username or parts.password:
        allowed = "https" + (" (or http://127.0.0.1 on the local stage)" if local else "")
        raise ValidationError("endpoint", f"endpoint must be an {allowed} URL of a push service")
    if any(c.isspace() or not c.isprintable() for c in endpoint):
        raise ValidationError("endpoint", "endpoint must not contain spaces or control characters")


def _key(keys: Mapping[str, Any], name: str, size: int) -> str:
    field = f"keys.{name}"
    value = keys.get(name)
    if not isinstance(value, str) or len(value) > 200:
        raise ValidationError(field, f"{field} must be a base64url string")
    try:
        raw = unb64url(value)
    except ValueError:
        raise ValidationError(field, f"{field} must be base64url") from None
    if len(raw) != size:
        raise ValidationError(field, f"{field} must encode {size} bytes")
    return value


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def notification(*, clarification_id: str, session_id: str, task_id: str, title: str, question: str,
                 answerable: tuple[str, list[tuple[str, str]]] | None = None, max_bytes: int = 3993) -> bytes:
    """The push payload: ids, the task's title and the first question's prompt, cut to fit `max_bytes`; never
    an answer. `answerable` (question id, [(option id, label)]) only for a bundle of one question with at most
    two options: the notification's actions answer it."""
    payload: dict[str, Any] = {"type": "clarification", "clarification_id": clarification_id,
                               "session_id": session_id, "task_id": task_id}
    if answerable is not None:
        payload["question_id"] = answerable[0]
        payload["options"] = [{"option_id": oid, "label": _cut(label, 40)} for oid, label in answerable[1]]
    limit = MAX_QUESTION_CHARS
    while True:
        payload.update(title=_cut(title, min(limit, MAX_TITLE_CHARS)), question=_cut(question, limit))
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        if len(data) <= max_bytes or limit <= 1:
            return data
        limit //= 2
