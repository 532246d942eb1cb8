"""Key material fetched once per container and kept: the pool's JWKS, the agent-token keyring."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Fetched(Generic[T]):
    """`load()`'s value, loaded on first use and again when older than `max_age`. `get(unknown=True)` (a key id
    not in the value) reloads too, at most once per `min_interval`: a stream of made-up key ids cannot turn
    every request into a fetch. A failed reload keeps the value it had; a failed first load raises."""

    def __init__(self, load: Callable[[], T], *, max_age: float, min_interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load, self._max_age, self._min_interval, self._clock = load, max_age, min_interval, clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._at = 0.0

    def get(self, *, unknown: bool = False) -> T:
        with self._lock:
            now = self._clock()
            age = now - self._at
            if self._value is None or age > self._max_age or (unknown and age >= self._min_interval):
                try:
                    value = self._load()
                except Exception:
                    if self._value is None:
                        raise
                    value = self._value
                self._value, self._at = value, now
            return self._value
