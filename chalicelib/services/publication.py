"""Publishing client events: first the event bus, then the client feed.

The feed is the bus's ledger: an event is written to the feed only after the bus accepted it, so an event
found in the feed is on the bus. A redelivered stream record, whose events are all in the feed already, puts
nothing on the bus again; a rejected event is written nowhere, so whoever retries publishes it. A process
that dies between the bus's acceptance and the feed write puts that one event again when retried, with the
same id: consumers de-duplicate on `detail.id`, as EventBridge's own at-least-once delivery requires anyway.

Cost per new event, with a bus: its share of one strongly consistent BatchGetItem (up to 100 keys; 1 RCU per
event) and of one PutEvents call (up to 10 entries); the feed's PutItem is the one it always had. Without a
bus, only the feed write.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from ..bus import Entry, put_all
from ..domain.model import Event
from .deps import Deps, parse_iso
from .outbox import Outbox

log = logging.getLogger(__name__)


def detail(event: Event) -> dict[str, object]:
    """The bus event's `detail`: the public event as the feed serves it, with the ids consumers route on."""
    return {"id": event.id, "type": event.type, "workspace_id": event.workspace_id, "task_id": event.task_id,
            "session_id": event.session_id, "at": event.at, "payload": dict(event.payload)}


def bus_entry(event: Event) -> Entry:
    try:
        time = parse_iso(event.at)
    except ValueError:
        time = None  # the bus then stamps its own time; the id still identifies the change
    return Entry(id=event.id, detail_type=event.type, time=time,
                 detail=json.dumps(detail(event), sort_keys=True, separators=(",", ":")))


def publish(deps: Deps, events: Sequence[Event]) -> list[Event]:
    """Put the events that are not in the feed yet on the bus, then write the accepted ones to the feed.

    Returns the events the bus still rejected after `settings.bus_attempts` tries; they are not in the feed.
    Raises StoreUnavailable when the feed cannot be read or written.
    """
    unique: dict[str, Event] = {}
    for event in events:
        unique.setdefault(event.id, event)
    if deps.bus is None:
        for event in unique.values():
            deps.store.put_event(event, deps.now())
        return []
    if deps.feed_index is None:
        raise RuntimeError("a bus needs Deps.feed_index: without it a redelivery would put every event again")
    present = deps.feed_index.present(list(unique.values()))
    fresh = [e for e in unique.values() if e.id not in present]
    rejections = put_all(deps.bus, [bus_entry(e) for e in fresh], attempts=deps.settings.bus_attempts,
                         sleep=deps.sleep, backoff=deps.settings.bus_backoff)
    rejected = {r.entry_id for r in rejections}
    for r in rejections:
        log.error("bus %s rejected event %s after %d tries: %s %s", deps.bus.name, r.entry_id,
                  deps.settings.bus_attempts, r.code, r.message)
    for event in fresh:
        if event.id not in rejected:
            deps.store.put_event(event, deps.now())
    return [e for e in fresh if e.id in rejected]


def publish_now(deps: Deps, events: Sequence[Event]) -> bool:
    """Publish `events` at once (outside a stream batch). True iff every one is on the bus and in the feed,
    including ones that already were. False: the bus rejected some; they are in neither, so call again.
    Raises StoreUnavailable when the feed cannot be read or written.
    """
    return not publish(deps, events)


def flush(deps: Deps, outbox: Outbox) -> set[int]:
    """Publish a stream batch's events. Returns the positions of the records whose events are not all
    published (they must be retried)."""
    if not outbox.items:
        return set()
    try:
        rejected = {e.id for e in publish(deps, [e for _, e in outbox.items])}
    except Exception:
        log.exception("publishing a stream batch's events failed")
        return {i for i, _ in outbox.items}
    return {i for i, e in outbox.items if e.id in rejected}
