"""Putting any number of entries: PutEvents-sized calls, failed entries retried a bounded number of times."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from .protocol import MAX_ENTRIES, MAX_REQUEST_BYTES, Bus, Entry, Rejection


def chunks(entries: Sequence[Entry]) -> Iterator[list[Entry]]:
    """Consecutive calls of at most MAX_ENTRIES entries and MAX_REQUEST_BYTES each (an oversized entry alone)."""
    chunk: list[Entry] = []
    size = 0
    for entry in entries:
        if chunk and (len(chunk) == MAX_ENTRIES or size + entry.size() > MAX_REQUEST_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry.size()
    if chunk:
        yield chunk


def put_all(bus: Bus, entries: Sequence[Entry], *, attempts: int, sleep: Callable[[float], None],
            backoff: float = 0.2) -> list[Rejection]:
    """Put `entries` (unique ids); only the rejected ones are put again, up to `attempts` tries in all.

    Returns the rejections of the last try: an empty list means the bus accepted every entry.
    """
    pending = list(entries)
    rejected: list[Rejection] = []
    for attempt in range(max(1, attempts)):
        if attempt:
            sleep(backoff * 2 ** (attempt - 1))
        rejected = [r for chunk in chunks(pending) for r in bus.put(chunk)]
        if not rejected:
            return []
        again = {r.entry_id for r in rejected}
        pending = [e for e in pending if e.id in again]
    return rejected
