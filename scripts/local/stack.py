"""An in-process local stack for tests and benchmarks: emulator, tables, API, stream pump, scheduler."""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from typing import Any

from chalicelib import aws, bootstrap
from chalicelib.auth.tokens import mint
from chalicelib.services import readiness
from chalicelib.services.stream_health import STATUS_KEY
from chalicelib.store.tables import create_tables

from .api_server import ApiThread
from .bus import LocalBus, ensure_bus
from .emulator import EmulatorThread
from .env import apply, local_env
from .handlers import stream_handlers
from .identity import add_user, ensure_identity, new_password, sign_in
from .pump import MAX_ATTEMPTS, RETRY_DELAY, StreamPump, Target
from .scheduler import Scheduler


def aws_clients(endpoint: str) -> tuple[Any, Any]:
    return aws.client("dynamodb", endpoint_url=endpoint), aws.client("dynamodbstreams", endpoint_url=endpoint)


def make_pump(endpoint: str, **options: Any) -> StreamPump:
    """The pump over the app's stream functions; `options` go to StreamPump (retries, failure store)."""
    dynamodb, streams = aws_clients(endpoint)
    store = bootstrap.deps().store
    options.setdefault("retry_delay", float(os.environ.get("CLARIFY_STREAM_RETRY_DELAY", RETRY_DELAY)))
    options.setdefault("max_attempts", int(os.environ.get("CLARIFY_STREAM_MAX_ATTEMPTS", MAX_ATTEMPTS)))
    return StreamPump(
        dynamodb, streams, [Target(table, handler) for table, handler in stream_handlers().items()],
        get_checkpoint=store.get_meta,
        set_checkpoint=lambda key, seq: store.set_meta(key, seq, "pump"),
        set_status=lambda value: store.set_meta(STATUS_KEY, value, "pump"), **options)


def make_scheduler(interval: float) -> Scheduler:
    import app as application
    return Scheduler({"reconcile_scheduled": application.reconcile_scheduled}, interval)


class LocalStack:
    """Everything in one process on free ports. `pump.drain()` makes stream processing deterministic."""

    def __init__(self, agentctl_url: str = "http://127.0.0.1:9", prefix: str | None = None) -> None:
        self.prefix = prefix or f"t{uuid.uuid4().hex[:8]}-"
        self.agentctl_url = agentctl_url
        self.emulator: EmulatorThread | None = None
        self.api: ApiThread | None = None
        self.pump: StreamPump | None = None
        self.bus: LocalBus | None = None
        self.failure_dir: str | None = None

    def start(self, *, reconcile: bool = True, endpoint: str | None = None) -> LocalStack:
        if endpoint is None:
            self.emulator = EmulatorThread().start()
            endpoint = self.emulator.url
        self.endpoint = endpoint
        env = local_env(CLARIFY_TABLE_PREFIX=self.prefix, CLARIFY_AGENTCTL_URL=self.agentctl_url,
                        CLARIFY_DEPLOYMENT_ID=f"test-{uuid.uuid4().hex[:8]}", CLARIFY_EVENT_BUS=f"{self.prefix}events")
        env["AWS_ENDPOINT_URL"] = endpoint
        env.update(ensure_identity(endpoint, self.prefix))
        self.failure_dir = env["CLARIFY_STREAM_FAILURE_DIR"] = tempfile.mkdtemp(prefix="clarify-stream-failures-")
        os.environ.update(env)
        bootstrap.override(None)
        readiness.forget()
        bootstrap.configure_tables()
        create_tables(aws_clients(endpoint)[0])
        self.bus = ensure_bus(env["CLARIFY_EVENT_BUS"], endpoint)
        import app as application
        self.app = application
        self.api = ApiThread(application.app).start()
        self.url = self.api.url
        self.pump = make_pump(endpoint)
        if reconcile:
            self.reconcile()
        return self

    def reconcile(self) -> dict[str, Any]:
        return dict(self.app.reconcile_before_traffic({}, None))

    def user_token(self, workspace: str = "ws-1", sub: str = "user-1") -> str:
        return mint(bootstrap.auth_secret(), sub=sub, role="user", workspace_id=workspace)

    def pool_user(self, workspace: str = "ws-1", email: str | None = None) -> tuple[str, str]:
        """A user of the emulator's pool in `workspace`; returns (email, password)."""
        email = email or f"{uuid.uuid4().hex[:10]}@example.com"
        password = new_password()
        add_user(aws.client("cognito-idp", endpoint_url=self.endpoint), os.environ["CLARIFY_USER_POOL_ID"], email,
                 workspace, password=password)
        return email, password

    def pool_tokens(self, workspace: str = "ws-1") -> dict[str, Any]:
        """A new pool user of `workspace`, signed in: Cognito's AuthenticationResult (AccessToken, ...)."""
        email, password = self.pool_user(workspace)
        return sign_in(aws.client("cognito-idp", endpoint_url=self.endpoint),
                       os.environ["CLARIFY_USER_POOL_CLIENT_ID"], email, password)

    def keyring_agent_token(self, session_id: str, workspace: str = "ws-1") -> str:
        """An agent token as dispatch mints it: signed with the current key of the stack's agent keyring."""
        agents = bootstrap.authenticator().agents
        assert agents is not None
        return agents.mint(workspace, session_id)

    def agent_token(self, session_id: str, workspace: str = "ws-1") -> str:
        return mint(bootstrap.auth_secret(), sub=f"agent:{session_id}", role="agent", workspace_id=workspace,
                    session_id=session_id)

    def stop(self) -> None:
        if self.api:
            self.api.stop()
        if self.emulator:
            self.emulator.stop()
        if self.failure_dir:
            shutil.rmtree(self.failure_dir, ignore_errors=True)
        bootstrap.override(None)
        readiness.forget()


__all__ = ["LocalStack", "apply", "local_env"]
