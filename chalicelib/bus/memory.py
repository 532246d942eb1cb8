"""An in-memory bus for unit tests: accepts entries, or rejects the ones it was told to."""
from __future__ import annotations

from collections.abc import Sequence

from .protocol import MAX_ENTRIES, Entry, Rejection


class MemoryBus:
    name = "memory"

    def __init__(self) -> None:
        self.accepted: list[Entry] = []
        self.calls: list[list[str]] = []  # entry ids of every put, in order
        self._failures: dict[str, tuple[int, str]] = {}
        self.down = False  # reject every entry (as an unavailable bus would), until set back

    def fail(self, entry_id: str, times: int = 1, code: str = "InternalFailure") -> None:
        """Reject `entry_id` the next `times` times it is put (as EventBridge does, within a call that succeeds)."""
        self._failures[entry_id] = (times, code)

    def put(self, entries: Sequence[Entry]) -> list[Rejection]:
        if len(entries) > MAX_ENTRIES:
            raise ValueError(f"PutEvents takes at most {MAX_ENTRIES} entries, got {len(entries)}")
        self.calls.append([e.id for e in entries])
        rejected = []
        for entry in entries:
            times, code = self._failures.get(entry.id, (0, ""))
            if self.down:
                rejected.append(Rejection(entry.id, "ServiceUnavailable", "the bus is down"))
            elif times > 0:
                self._failures[entry.id] = (times - 1, code)
                rejected.append(Rejection(entry.id, code, "told to fail"))
            else:
                self.accepted.append(entry)
        return rejected

    def ids(self) -> list[str]:
        return [e.id for e in self.accepted]
