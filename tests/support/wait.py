"""Waiting for something to become true, with a deadline generous enough for a loaded 2-core machine.

Tests wait on the condition itself, never on a sleep being long enough.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
DEADLINE = 30.0


def eventually(probe: Callable[[], T | None], what: str = "condition", timeout: float = DEADLINE,
               interval: float = 0.05) -> T:
    """Poll `probe` until it returns something truthy (returned), or fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    last: T | None = None
    while True:
        try:
            last = probe()
        except AssertionError:
            last = None
        if last:
            return last
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
