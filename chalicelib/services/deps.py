"""What services need from the outside world, injected (real ones are built in chalicelib.bootstrap)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..domain.time import iso, parse_iso

if TYPE_CHECKING:  # the real implementations are built (and imported) by chalicelib.bootstrap
    from ..agentctl.client import Agentctl
    from ..bus.protocol import Bus
    from ..store.devices import DeviceStore
    from ..store.feed_index import FeedIndex
    from ..store.protocol import Store
    from .outbox import Outbox
    from .push import Pusher

__all__ = ["Deps", "Settings", "iso", "parse_iso"]


@dataclass(frozen=True)
class Settings:
    deployment_id: str = "default"
    # An owner deadline: how long an invocation may hold a claim before the scheduled reconciler acts.
    owner_window: timedelta = timedelta(seconds=60)
    events_lookback: timedelta = timedelta(seconds=30)
    # How long an event's put may land after its writer stamped `written_at` (its call, retries and clock skew
    # between writers included): the feed reads that far back in write time. Well under the lookback.
    events_write_margin: timedelta = timedelta(seconds=10)
    max_event_wait: int = 25
    max_waiter_poll: int = 25  # under API Gateway's 29 s limit
    waiter_lease_margin: timedelta = timedelta(seconds=10)
    confirm_wait: float = 8.0  # how long a live responder waits for the waiter's durable confirmation
    watchdog_timeout: timedelta = timedelta(seconds=15)
    reservation_wait: float = 10.0  # how long a delayed ready frame waits for a reservation to resolve
    poll_first: float = 0.05  # a waiting party's first re-read; each later one waits twice as long ...
    poll_cap: float = 1.0  # ... up to this: about 1.2 reads per second over a 25-second wait
    # An ask opens its waiter lease for this long (the agent's first wait renews it); an agent that never
    # waits leaves a question that detaches once the lease lapses. Well under the owner window.
    ask_lease: timedelta = timedelta(seconds=30)
    idempotency_ttl: timedelta = timedelta(days=1)
    queue_cap: int = 10
    # What asks and user messages may fill a session item with (UTF-8 bytes, by DynamoDB's size rules). The
    # rest, up to DynamoDB's 400 KB item limit, is headroom every other write (answers, detach, frames,
    # cancel, the reconciler) can always rely on.
    session_budget_bytes: int = 300 * 1024
    # Past this size, the next ask or message first moves the session's closed bundles to history.
    session_compact_bytes: int = 32 * 1024
    bus_attempts: int = 3  # tries per bus entry within one publication before it is reported as failed
    bus_backoff: float = 0.2  # seconds before the second try, doubling after


@dataclass
class Deps:
    store: Store
    agentctl: Agentctl
    clock: Callable[[], datetime]
    new_id: Callable[[], str]
    agent_token: Callable[[str, str], str]  # (workspace_id, session_id) -> bearer token for the agent
    settings: Settings = field(default_factory=Settings)
    sleep: Callable[[float], None] = lambda s: None
    # The event bus and what the feed already holds (= what the bus accepted). No bus: events reach the
    # client feed only (bootstrap makes that an explicit choice: CLARIFY_EVENT_BUS=none).
    bus: Bus | None = None
    feed_index: FeedIndex | None = None
    # Set for one stream batch (functions.streams.process_batch): events wait there to be published together.
    outbox: Outbox | None = None
    # Web Push: registered devices, and what sends to them (None: this deployment sends no push).
    devices: DeviceStore | None = None
    pusher: Pusher | None = None

    def now(self) -> str:
        return iso(self.clock())

    def deadline(self) -> str:
        return iso(self.clock() + self.settings.owner_window)

    def after(self, delta: timedelta) -> str:
        return iso(self.clock() + delta)
