"""Waiting on the aggregate without a tight poll: reads back off from `poll_first` to `poll_cap` seconds.

A waiting party (an agent's long-poll, a responder awaiting its confirmation, a delayed ready frame, a
client's event feed) costs about log2(cap/first) + wait/cap reads: ~1.2 reads per second over a 25-second
wait with the defaults, instead of ten. Elapsed time is read from the injected clock, so a bound is a bound
in time, not a count of sleeps.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .deps import Deps

T = TypeVar("T")


def poll(deps: Deps, probe: Callable[[], T | None], timeout: float) -> T | None:
    """Call `probe` until it returns something other than None, or `timeout` seconds have passed (then None).

    The first call happens at once; a timeout of 0 probes exactly once.
    """
    started = deps.clock()
    interval = deps.settings.poll_first
    while True:
        found = probe()
        if found is not None:
            return found
        left = timeout - (deps.clock() - started).total_seconds()
        if left <= 0:
            return None
        deps.sleep(min(interval, left))
        interval = min(interval * 2, deps.settings.poll_cap)
