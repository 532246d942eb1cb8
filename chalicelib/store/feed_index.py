"""Which events the client feed already holds: one strongly consistent batch read of their keys.

Publication writes an event to the feed only after the bus accepted it, so this is also what the bus has.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..domain.model import Event
from .models import EventRecord
from .records import batch_get


def feed_key(event: Event) -> tuple[str, str]:
    """The event's key in the feed table (workspace, `at#id`), as the store's put_event writes it."""
    return event.workspace_id, f"{event.at}#{event.id}"


class FeedIndex(Protocol):
    def present(self, events: Sequence[Event]) -> set[str]:
        """Ids of `events` already in the feed. Raises StoreUnavailable."""
        ...


class DynamoFeedIndex:
    """Over the DynamoDB store's client (`store.client`)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def present(self, events: Sequence[Event]) -> set[str]:
        keys = {feed_key(e): e.id for e in events}
        if not keys:
            return set()
        found = batch_get(self.store.client, str(EventRecord.Meta.table_name),
                          [{"workspace_id": {"S": w}, "sk": {"S": sk}} for w, sk in keys],
                          projection="workspace_id, sk")
        return {keys[(i["workspace_id"], i["sk"])] for i in found}


class MemoryFeedIndex:
    """Over a MemoryStore's feed table (`tables["events"]`: (workspace, sort key) -> item)."""

    def __init__(self, feed: Mapping[tuple[str, str], object]) -> None:
        self.feed = feed

    def present(self, events: Sequence[Event]) -> set[str]:
        return {e.id for e in events if feed_key(e) in self.feed}
