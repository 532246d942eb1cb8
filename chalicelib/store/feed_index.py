"""Which events the client feed already holds: one strongly consistent batch read of their keys.

Publication writes an event to the feed only after the bus accepted it, so this is also what the bus has.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from ..domain.errors import StoreUnavailable
from ..domain.model import Event
from .models import EventRecord


def feed_key(event: Event) -> tuple[str, str]:
    """The event's key in the feed table (workspace, `at#id`), as the store's put_event writes it."""
    return event.workspace_id, f"{event.at}#{event.id}"


class FeedIndex(Protocol):
    def present(self, events: Sequence[Event]) -> set[str]:
        """Ids of `events` already in the feed. Raises StoreUnavailable."""
        ...


class DynamoFeedIndex:
    def present(self, events: Sequence[Event]) -> set[str]:
        keys = {feed_key(e): e.id for e in events}
        if not keys:
            return set()
        try:
            # BatchGetItem: up to 100 keys a request; PynamoDB splits larger sets and retries unprocessed keys.
            found = EventRecord.batch_get(list(keys), consistent_read=True, attributes_to_get=["workspace_id", "sk"])
            return {keys[(rec.workspace_id, rec.sk)] for rec in found}
        except (PynamoDBException, ClientError, BotoCoreError) as exc:
            raise StoreUnavailable(f"storage error: {exc}") from exc


class MemoryFeedIndex:
    """Over a MemoryStore's feed (`events`: workspace -> sort key -> (written_at, event))."""

    def __init__(self, feed: Mapping[str, Mapping[str, object]]) -> None:
        self.feed = feed

    def present(self, events: Sequence[Event]) -> set[str]:
        return {e.id for e in events if feed_key(e)[1] in self.feed.get(e.workspace_id, {})}
