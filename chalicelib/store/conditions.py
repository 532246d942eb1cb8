"""The repository rule and its parts as DynamoDB condition expressions.

chalicelib.domain.rules.bundle_is_active is the same predicate over a read aggregate; every write that
depends on "is this bundle active?" carries the expression built here, so read and write cannot disagree.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..domain.model import TERMINAL_STATES
from ..domain.rules import PENDING
from .expr import Expr


def turn_is(e: Expr, turn_id: str | None) -> str:
    """Turn authority: the pointer is still the turn the caller saw (None: the session has no turn yet)."""
    if turn_id is None:
        return f"attribute_not_exists({e.path('current_turn')})"
    return f"{e.path('current_turn', 'id')} = {e.value(turn_id)}"


def bundle_current(e: Expr, bundle_id: str) -> str:
    """The bundle belongs to the session's current turn (attribute-to-attribute comparison)."""
    return f"{e.path('current_turn', 'id')} = {e.path('bundles', bundle_id, 'turn_id')}"


def not_terminal(e: Expr) -> str:
    values = ", ".join(e.value(s.value) for s in sorted(TERMINAL_STATES))
    return f"NOT ({e.path('state')} IN ({values}))"


def row_pending(e: Expr, bundle_id: str, row_id: str) -> str:
    """Absent or empty status counts as pending; any other value does not."""
    path = e.path("bundles", bundle_id, "rows", row_id, "status")
    return f"(attribute_not_exists({path}) OR {path} IN ({e.value(PENDING)}, {e.value('')}))"


def row_not_detached(e: Expr, bundle_id: str, row_id: str) -> str:
    """Stored flags may be true, "true", "1" or 1: all of them mean detached."""
    path = e.path("bundles", bundle_id, "rows", row_id, "agent_disconnected")
    truthy = ", ".join(e.value(v) for v in (True, "true", "1", 1))
    return f"NOT ({path} IN ({truthy}))"


def bundle_active(e: Expr, bundle_id: str, row_ids: Iterable[str]) -> str:
    """THE rule: a pending row AND the current turn AND a non-terminal session."""
    rows = [row_pending(e, bundle_id, q) for q in row_ids]
    if not rows:
        raise ValueError("an active bundle needs at least one candidate row")
    any_pending = rows[0] if len(rows) == 1 else "(" + " OR ".join(rows) + ")"
    return f"{bundle_current(e, bundle_id)} AND {not_terminal(e)} AND {any_pending}"
