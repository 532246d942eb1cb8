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
    """Counts the boundaries its operation passes; blocks at each of its `targets` until `release()`."""

    def __init__(self, *targets: int | None) -> None:
        self.targets = {t for t in targets if t is not None}
        self.passed: list[str] = []
        self._cond = threading.Condition()
        self._waiting_at: int | None = None
        self._released: set[int] = set()
        self.owner: threading.Thread | None = None  # only the operation's own thread is ever held

    def boundary(self, label: str) -> None:
        index = len(self.passed)
        self.passed.append(label)
        if index not in self.targets or threading.current_thread() is not self.owner:
            return
        with self._cond:
            self._waiting_at = index
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: index in self._released, HOLD):
                raise RuntimeError(f"paused at {label} and never released")

    def wait_paused(self, done: threading.Event) -> bool:
        """Block until the operation is held at a target (True) or finished (False)."""
        with self._cond:
            while self._waiting_at is None:
                if done.is_set():
                    return False
                self._cond.wait(0.01)
            return True

    def release(self, *, for_good: bool = False) -> None:
        """Let the held operation go on (for good: past every later target too)."""
        with self._cond:
            if for_good:
                self.targets.clear()
            if self._waiting_at is not None:
                self._released.add(self._waiting_at)
                self._waiting_at = None
            self._cond.notify_all()


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
        self.gate.owner = threading.current_thread()
        try:
            run()
        except BaseException as exc:  # reported by finish()
            self.error = exc
        finally:
            self.done.set()

    def pause(self) -> bool:
        """True when the operation stopped at its (first) target boundary; False when it finished before."""
        self._thread.start()
        return self.gate.wait_paused(self.done)

    def resume_to_next(self) -> bool:
        """Release it to its next target: True when held there, False when it finished first."""
        self.gate.release()
        return self.gate.wait_paused(self.done)

    def finish(self) -> BaseException | None:
        self.gate.release(for_good=True)
        if not self.done.wait(HOLD):
            raise RuntimeError("the paused operation did not finish once released")
        return self.error
