"""The bus as publishers see it: one call puts at most ten entries and says which it did not accept."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

SOURCE = "clarify"  # EventBridge `source` of every event Clarify puts on its bus
MAX_ENTRIES = 10  # PutEvents' limit per call
MAX_REQUEST_BYTES = 256 * 1024  # PutEvents' limit on the summed entry sizes of one call


@dataclass(frozen=True)
class Entry:
    """One bus event. `id` is the feed event's stable id; it is also inside `detail` for consumers."""

    id: str
    detail_type: str
    detail: str  # JSON
    time: datetime | None = None

    def size(self) -> int:
        """The entry's size by EventBridge's rule (source, detail type, detail, and 14 bytes for a time)."""
        return (len(SOURCE.encode()) + len(self.detail_type.encode()) + len(self.detail.encode())
                + (14 if self.time is not None else 0))


@dataclass(frozen=True)
class Rejection:
    entry_id: str
    code: str
    message: str


class Bus(Protocol):
    name: str

    def put(self, entries: Sequence[Entry]) -> list[Rejection]:
        """One PutEvents call of at most MAX_ENTRIES entries. Returns the entries the bus did not accept;
        when the call itself fails (throttled, unreachable), that is every entry. Never raises for the bus."""
        ...
