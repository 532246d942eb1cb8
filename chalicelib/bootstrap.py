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
from typing import TYPE_CHECKING, Any

from . import aws
from .auth.agent_keys import AgentKeys, secret_store
from .auth.identity import LOCAL_STAGE, Authenticator
from .auth.pool import PoolVerifier, UserPool
from .auth.tokens import DEFAULT_MAX_LIFETIME, mint
from .services.deps import Deps, Settings

if TYPE_CHECKING:
    from .bus.protocol import Bus
    from .services.push import Pusher

log = logging.getLogger(__name__)
NO_BUS = "none"
_lock = threading.RLock()  # deps() builds the authenticator under it
_deps: Deps | None = None
_auth: Authenticator | None = None


def auth_secret() -> str:
    secret = os.environ.get("CLARIFY_AUTH_SECRET", "")
    if not secret:
        raise RuntimeError("CLARIFY_AUTH_SECRET is not set")
    return secret


def token_max_lifetime() -> int:
    """CLARIFY_TOKEN_MAX_LIFETIME: the longest token lifetime (exp - iat, and exp - now) accepted, in seconds."""
    return int(os.environ.get("CLARIFY_TOKEN_MAX_LIFETIME", DEFAULT_MAX_LIFETIME))


def stage() -> str:
    """CLARIFY_STAGE: the Chalice stage. Only `local` accepts development tokens; unset is not local."""
    return os.environ.get("CLARIFY_STAGE", "").strip()


def user_pool() -> UserPool | None:
    """CLARIFY_USER_POOL_ID and CLARIFY_USER_POOL_CLIENT_ID: the pool whose access tokens are users."""
    pool_id, client_id = (os.environ.get(name, "").strip() for name in
                          ("CLARIFY_USER_POOL_ID", "CLARIFY_USER_POOL_CLIENT_ID"))
    return UserPool.at(pool_id, client_id, aws.emulator_endpoint()) if pool_id and client_id else None


def agent_keys() -> AgentKeys | None:
    """CLARIFY_AGENT_KEYS_SECRET: the secret holding the agent-token keyring (read on first use)."""
    secret = os.environ.get("CLARIFY_AGENT_KEYS_SECRET", "").strip()
    return AgentKeys(secret_store(secret), max_lifetime=token_max_lifetime()) if secret else None


def sign_in_config() -> dict[str, Any]:
    """What the web client needs to sign in (public): the pool's app client and the Cognito endpoint to call
    (the emulator's locally), and whether this stage takes development tokens."""
    pool = user_pool()
    return {"user_pool": None if pool is None else {
                "client_id": pool.client_id, "region": pool.region,
                "endpoint": aws.emulator_endpoint() or f"https://cognito-idp.{pool.region}.amazonaws.com/"},
            "development_tokens": stage() == LOCAL_STAGE}


def build_authenticator() -> Authenticator:
    """The stage's trust: its user pool and agent keyring; the development secret on the local stage only.
    Any other stage without a pool and a keyring is misconfigured and fails loudly."""
    pool, keys, local = user_pool(), agent_keys(), stage() == LOCAL_STAGE
    if not local and (pool is None or keys is None):
        raise RuntimeError(f"stage {stage() or '(unset)'!r} needs CLARIFY_USER_POOL_ID, CLARIFY_USER_POOL_CLIENT_ID "
                           "and CLARIFY_AGENT_KEYS_SECRET")
    return Authenticator(users=PoolVerifier(pool, max_lifetime=token_max_lifetime()) if pool else None,
                         agents=keys, dev_secret=auth_secret() if local else None,
                         max_lifetime=token_max_lifetime())


def authenticator() -> Authenticator:
    """Built once per container: the JWKS and the keyring it caches are read once."""
    global _auth
    if _auth is None:
        with _lock:
            if _auth is None:
                _auth = build_authenticator()
    return _auth


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


DEFAULT_VAPID_SUBJECT = "mailto:push@example.com"


def pusher() -> Pusher | None:
    """CLARIFY_VAPID_SECRET: the secret holding the VAPID key (made on first use); unset, no Web Push.
    CLARIFY_VAPID_SUBJECT: the contact push services see (mailto: or https:)."""
    secret = os.environ.get("CLARIFY_VAPID_SECRET", "").strip()
    if not secret:
        return None
    from .push.vapid import Vapid, load_or_make, secret_store
    from .services.push import Pusher

    subject = os.environ.get("CLARIFY_VAPID_SUBJECT", "").strip() or DEFAULT_VAPID_SUBJECT
    holder: list[Vapid] = []

    def vapid() -> Vapid:
        if not holder:  # read once per container; a race makes the same key twice (the secret has one)
            holder.append(Vapid(load_or_make(*secret_store(secret)), subject))
        return holder[0]
    return Pusher(vapid=vapid)


def build() -> Deps:
    from .agentctl.client import HttpAgentctl
    from .store.devices import DynamoDevices
    from .store.dynamo import DynamoStore
    from .store.feed_index import DynamoFeedIndex

    configure_tables()
    bus = event_bus()
    store = DynamoStore()

    def agent_token(workspace_id: str, session_id: str) -> str:
        # The stage's trust is needed by a dispatch only: an operator's command that reads never asks for it.
        auth = authenticator()
        if auth.agents is not None:
            return auth.agents.mint(workspace_id, session_id)
        assert auth.dev_secret  # the local stage without a keyring: development tokens
        return mint(auth.dev_secret, sub=f"agent:{session_id}", role="agent", workspace_id=workspace_id,
                    session_id=session_id)

    store = DynamoStore()
    return Deps(
        store=store,
        agentctl=HttpAgentctl(os.environ.get("CLARIFY_AGENTCTL_URL", "http://127.0.0.1:8001"),
                              timeout=float(os.environ.get("CLARIFY_AGENTCTL_TIMEOUT", "10"))),
        clock=lambda: datetime.now(UTC),
        new_id=lambda: uuid.uuid4().hex,
        agent_token=agent_token,
        settings=Settings(deployment_id=os.environ.get("CLARIFY_DEPLOYMENT_ID", "default")),
        sleep=time.sleep,
        bus=bus,
        feed_index=DynamoFeedIndex(store) if bus is not None else None,
        devices=DynamoDevices(store.client),
        pusher=pusher(),
    )


def deps() -> Deps:
    global _deps
    if _deps is None:
        with _lock:
            if _deps is None:
                _deps = build()
    return _deps


def override(value: Deps | None) -> None:
    """Tests install their own dependencies (or None to rebuild them, and the authenticator, from the
    environment)."""
    global _deps, _auth
    with _lock:
        _deps = value
        if value is None:
            _auth = None
