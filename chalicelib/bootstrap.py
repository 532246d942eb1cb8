"""Builds the real dependencies once, lazily, from the environment (Chalice sets it per stage).

The store, the bus and the agent client are imported by `build`, not by this module: every function of the
stack imports app.py, and the authorizer (on every request's path) never needs them; the others import them
on their first invocation.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from . import aws
from .auth.tokens import DEFAULT_MAX_LIFETIME, mint
from .services.deps import Deps, Settings

if TYPE_CHECKING:
    from .bus.protocol import Bus

log = logging.getLogger(__name__)
NO_BUS = "none"
_lock = threading.Lock()
_deps: Deps | None = None


def auth_secret() -> str:
    secret = os.environ.get("CLARIFY_AUTH_SECRET", "")
    if not secret:
        raise RuntimeError("CLARIFY_AUTH_SECRET is not set")
    return secret


def token_max_lifetime() -> int:
    """CLARIFY_TOKEN_MAX_LIFETIME: the longest token lifetime (exp - iat, and exp - now) accepted, in seconds."""
    return int(os.environ.get("CLARIFY_TOKEN_MAX_LIFETIME", DEFAULT_MAX_LIFETIME))


def configure_tables() -> None:
    from .store import models

    models.configure(prefix=os.environ.get("CLARIFY_TABLE_PREFIX", "clarify-local-"),
                     host=aws.emulator_endpoint(), region=aws.region())


def event_bus() -> Bus | None:
    """The bus named by CLARIFY_EVENT_BUS. It must be set: `none` is the explicit choice of no bus, in which
    case events reach the client feed only and nothing else hears of them."""
    name = os.environ.get("CLARIFY_EVENT_BUS", "").strip()
    if not name:
        raise RuntimeError(f"CLARIFY_EVENT_BUS is not set: name the event bus, or set it to {NO_BUS!r} to publish "
                           "events to the client feed only")
    if name == NO_BUS:
        log.warning("CLARIFY_EVENT_BUS=none: events reach the client feed only; no event bus hears of them")
        return None
    from .bus.eventbridge import EventBridgeBus

    return EventBridgeBus(name)


def build() -> Deps:
    from .agentctl.client import HttpAgentctl
    from .store.dynamo import DynamoStore
    from .store.feed_index import DynamoFeedIndex

    configure_tables()
    secret = auth_secret()
    bus = event_bus()

    def agent_token(workspace_id: str, session_id: str) -> str:
        return mint(secret, sub=f"agent:{session_id}", role="agent", workspace_id=workspace_id,
                    session_id=session_id)

    return Deps(
        store=DynamoStore(),
        agentctl=HttpAgentctl(os.environ.get("CLARIFY_AGENTCTL_URL", "http://127.0.0.1:8001"),
                              timeout=float(os.environ.get("CLARIFY_AGENTCTL_TIMEOUT", "10"))),
        clock=lambda: datetime.now(UTC),
        new_id=lambda: uuid.uuid4().hex,
        agent_token=agent_token,
        settings=Settings(deployment_id=os.environ.get("CLARIFY_DEPLOYMENT_ID", "default")),
        sleep=time.sleep,
        bus=bus,
        feed_index=DynamoFeedIndex() if bus is not None else None,
    )


def deps() -> Deps:
    global _deps
    if _deps is None:
        with _lock:
            if _deps is None:
                _deps = build()
    return _deps


def override(value: Deps | None) -> None:
    """Tests install their own dependencies (or None to rebuild from the environment)."""
    global _deps
    with _lock:
        _deps = value
