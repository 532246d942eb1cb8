"""The store's durable write boundaries, exposed to tests.

Every write the application makes is one call of a Store method (chalicelib.store.protocol). The set of
WRITE methods is derived from the protocol: every member that is not declared a read below. A method added
to the protocol is therefore a write boundary until someone declares it a read, and the crash-point harness
fails until it reaches that boundary.

`CrashingStore` wraps any store, records each write call, and can kill the process right before or right
after the k-th write by raising `ProcessDied`, a BaseException: the application's `except Exception`
handlers cannot swallow it, exactly as they cannot catch a Lambda timeout or an out-of-memory kill.

`SessionTap` wraps a MemoryStore and keeps every committed change of a session aggregate as an
(old image, new image) pair, which is what a DynamoDB stream with NEW_AND_OLD_IMAGES delivers.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.model import Session
from chalicelib.store import codec
from chalicelib.store.attrs import to_attr
from chalicelib.store.protocol import Store

# Store members that never write. Anything else in the protocol is a durable write boundary.
READ_METHODS = frozenset({
    "get_task", "list_tasks", "get_session", "list_sessions", "get_remembered", "list_history", "list_events",
    "get_meta", "list_meta", "due_sessions", "quarantined_sessions", "get_archived", "list_archived", "page_tasks",
    "page_sessions", "get_sessions", "page_messages", "page_turns", "get_archived_many", "room", "unlisted_tasks",
})


def protocol_members(protocol: type = Store) -> frozenset[str]:
    """The public methods a Store must provide, read from the protocol class itself."""
    return frozenset(name for name, value in vars(protocol).items()
                     if not name.startswith("_") and callable(value))


def write_methods(protocol: type = Store, reads: frozenset[str] = READ_METHODS) -> frozenset[str]:
    members = protocol_members(protocol)
    unknown = reads - members
    if unknown:  # a renamed or removed read must not silently stay "declared a read"
        raise AssertionError(f"declared reads that the Store protocol does not have: {sorted(unknown)}")
    return members - reads


WRITE_METHODS = write_methods()
PHASES = ("before", "after")


class ProcessDied(BaseException):
    """The invocation died at a write boundary (not an Exception: nothing in the app may survive it)."""

    def __init__(self, method: str, index: int, phase: str) -> None:
        super().__init__(f"process died {phase} write #{index} ({method})")
        self.method, self.index, self.phase = method, index, phase


@dataclass(frozen=True)
class KillPoint:
    """Where to die: `phase` ("before" | "after") the write number `index` (0-based) of this store, or,
    with `method`, of the first call of that method (then `index` counts calls of that method only)."""

    index: int
    phase: str
    method: str | None = None

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}")


@dataclass(frozen=True)
class WriteCall:
    method: str
    ok: bool  # False: the conditional write failed (nothing was written)


class CrashingStore:
    """A proxy around any Store. Reads pass through; every write is a numbered boundary."""

    def __init__(self, inner: Any, kill: KillPoint | None = None,
                 writes: frozenset[str] = WRITE_METHODS) -> None:
        self._inner = inner
        self._kill = kill
        self._writes = writes
        self.calls: list[WriteCall] = []
        self.died: ProcessDied | None = None

    @property
    def inner(self) -> Any:
        return self._inner

    @property
    def methods(self) -> list[str]:
        """The write method names in call order (the dry run's boundaries)."""
        return [c.method for c in self.calls]

    def _dies(self, method: str, index: int, phase: str) -> bool:
        k = self._kill
        if k is None or k.phase != phase:
            return False
        if k.method is None:
            return k.index == index
        return k.method == method and k.index == sum(1 for c in self.calls[:index] if c.method == method)

    def _die(self, method: str, index: int, phase: str) -> ProcessDied:
        self.died = ProcessDied(method, index, phase)
        return self.died

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        if self.died is not None:  # a dead process makes no further calls, reads included
            raise ProcessDied(name, len(self.calls), "after-death")
        if name not in self._writes:
            return attr
        return self._boundary(name, attr)

    def _boundary(self, name: str, attr: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(attr)
        def write(*args: Any, **kwargs: Any) -> Any:
            if self.died is not None:
                raise ProcessDied(name, len(self.calls), "after-death")
            index = len(self.calls)
            if self._dies(name, index, "before"):
                self.calls.append(WriteCall(name, ok=False))
                raise self._die(name, index, "before")
            try:
                result = attr(*args, **kwargs)
            except Exception as exc:
                self.calls.append(WriteCall(name, ok=False))
                if self._dies(name, index, "after"):
                    raise self._die(name, index, "after") from exc
                raise
            self.calls.append(WriteCall(name, ok=True))
            if self._dies(name, index, "after"):
                raise self._die(name, index, "after")
            return result
        return write


# ------------------------------------------------------------------ a stream of aggregate changes
def to_attrs(item: dict[str, Any]) -> dict[str, Any]:
    """Plain values to the low-level `{"S": ...}` shape of stream images."""
    return {k: to_attr(v) for k, v in item.items()}


def session_record(old: Session | None, new: Session, sequence: int) -> dict[str, Any]:
    """A DynamoDB stream record (Lambda's event shape) for one committed change of a session aggregate."""
    dynamodb: dict[str, Any] = {
        "Keys": {"session_id": {"S": new.id}},
        "NewImage": to_attrs(codec.session_to_item(new)),
        "SequenceNumber": f"{sequence:021d}",
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if old is not None:
        dynamodb["OldImage"] = to_attrs(codec.session_to_item(old))
    return {"eventName": "MODIFY" if old is not None else "INSERT", "eventSource": "aws:dynamodb",
            "dynamodb": dynamodb}


class SessionTap:
    """A proxy around a MemoryStore that logs every committed session change as a stream record.

    It compares the store's session map before and after each write, so writes that change several
    aggregates, or that another write method implements internally, are all seen once, in commit order.
    """

    def __init__(self, inner: Any, writes: frozenset[str] = WRITE_METHODS) -> None:
        if not hasattr(inner, "sessions"):
            raise TypeError("SessionTap needs a MemoryStore (it diffs its session map)")
        self._inner = inner
        self._writes = writes
        self.changes: list[tuple[Session | None, Session]] = []

    @property
    def inner(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._writes or not callable(attr):
            return attr

        @functools.wraps(attr)
        def write(*args: Any, **kwargs: Any) -> Any:
            before = dict(self._inner.sessions)
            try:
                return attr(*args, **kwargs)
            finally:
                for sid, new in self._inner.sessions.items():
                    old = before.get(sid)
                    if old is not new and (old is None or old.version != new.version):
                        self.changes.append((old, new))
        return write

    def records(self, start: int = 0) -> list[dict[str, Any]]:
        return [session_record(old, new, start + i + 1) for i, (old, new) in enumerate(self.changes[start:])]


__all__ = ["READ_METHODS", "WRITE_METHODS", "PHASES", "ProcessDied", "KillPoint", "WriteCall", "CrashingStore",
           "SessionTap", "session_record", "protocol_members", "write_methods"]
