"""The events of one stream batch, held until its records are handled, then published together."""
from __future__ import annotations

from ..domain.model import Event


class Outbox:
    """Each event is tagged with the batch position of the record that caused it."""

    def __init__(self) -> None:
        self.record = 0  # the position of the record being handled
        self.items: list[tuple[int, Event]] = []

    def add(self, event: Event) -> None:
        self.items.append((self.record, event))

    def discard(self, records: set[int]) -> None:
        """Drop the events of these records: they are derived again when the records are retried."""
        self.items = [(i, e) for i, e in self.items if i not in records]
