"""The one retry-on-conflict loop: decide on the freshest state until the conditional write wins."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..domain.errors import ConditionFailed, Contended, NotFound
from ..domain.model import Session
from .deps import Deps

S = TypeVar("S")
T = TypeVar("T")
ATTEMPTS = 5


def on_conflict(attempt: Callable[[S], T], state: S, refresh: Callable[[ConditionFailed], S],
                what: str = "the session") -> T:
    """Run `attempt(state)`; when its conditional write loses, `refresh` the state and decide again.

    Bounded: after ATTEMPTS lost races it raises Contended (retryable: the race settles).
    """
    for _ in range(ATTEMPTS):
        try:
            return attempt(state)
        except ConditionFailed as exc:
            state = refresh(exc)
    raise Contended(f"{what} kept changing; retry")


def fresh_session(deps: Deps, session_id: str, missing: str = "session not found") -> Callable[[ConditionFailed],
                                                                                              Session]:
    """A refresh for `on_conflict`: the item the failed write saw, or a fresh read."""
    def refresh(exc: ConditionFailed) -> Session:
        current = exc.session or deps.store.get_session(session_id)
        if current is None:
            raise NotFound(missing) from exc
        return current
    return refresh


def with_session(deps: Deps, session: Session, attempt: Callable[[Session], T]) -> T:
    return on_conflict(attempt, session, fresh_session(deps, session.id))
