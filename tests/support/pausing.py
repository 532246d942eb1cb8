"""Pausing an operation at one of its durable boundaries while others run to completion.

An operation's boundaries are: right before and right after each of its store writes (every write is one
Store call, as for the crash-point harness), and right before and right after each call to agentctl. The
paused operation runs in a thread of its own and blocks at boundary k until released; nothing else runs
in it meanwhile, so each interleaving is exact and repeatable.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from tests.support.crash import WRITE_METHODS

AGENTCTL_CALLS = ("prompt", "cancel", "steer")
HOLD = 60.0  # a paused operation gives up waiting after this long (a stuck case fails, it never hangs)


class Gate:
    """Counts the boundaries its operation passes; blocks at boundary `target` until `release()`."""

    def __init__(self, target: int | None = None) -> None:
        self.target = target
        self.passed: list[str] = []
        self.reached = threading.Event()
        self._release = threading.Event()

    def boundary(self, label: str) -> None:
        index = len(self.passed)
        self.passed.append(label)
        if index == self.target:
            self.reached.set()
            if not self._release.wait(HOLD):
                raise RuntimeError(f"paused at {label} and never released")

    def release(self) -> None:
        self._release.set()


class PausingStore:
    """A store proxy whose writes are boundaries of `gate` (reads pass through)."""

    def __init__(self, inner: Any, gate: Gate) -> None:
        self._inner, self._gate = inner, gate

    @property
    def inner(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in WRITE_METHODS or not callable(attr):
            return attr
        return _bounded(self._gate, f"store.{name}", attr)


class PausingAgent:
    """An agentctl proxy whose calls are boundaries of `gate`."""

    def __init__(self, inner: Any, gate: Gate) -> None:
        self._inner, self._gate = inner, gate

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in AGENTCTL_CALLS or not callable(attr):
            return attr
        return _bounded(self._gate, f"agentctl.{name}", attr)


def _bounded(gate: Gate, label: str, call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        gate.boundary(f"before {label}")
        try:
            return call(*args, **kwargs)
        finally:
            gate.boundary(f"after {label}")
    return bounded


class Paused:
    """`run` in its own thread; `pause()` returns once it reached the gate's target (or finished first)."""

    def __init__(self, run: Callable[[], Any], gate: Gate) -> None:
        self.gate = gate
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(run,), daemon=True)

    def _main(self, run: Callable[[], Any]) -> None:
        try:
            run()
        except BaseException as exc:  # reported by finish()
            self.error = exc
        finally:
            self.done.set()

    def pause(self) -> bool:
        """True when the operation stopped at the target boundary; False when it finished before it."""
        self._thread.start()
        while not (self.gate.reached.wait(0.01) or self.done.is_set()):
            pass
        return self.gate.reached.is_set()

    def finish(self) -> BaseException | None:
        self.gate.release()
        if not self.done.wait(HOLD):
            raise RuntimeError("the paused operation did not finish once released")
        return self.error
