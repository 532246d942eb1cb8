"""The session's byte budget: what asks and user messages may fill the aggregate with.

DynamoDB refuses an item over 400 KB, and a session item that reached it would refuse every later write,
cancel and the reconciler's repairs included. So growth the user or the agent controls (a question bundle, a
sent or queued message) is refused once the item would pass `session_budget_bytes`, counted in UTF-8 bytes by
DynamoDB's own rules; the headroom above it keeps every other write possible. Before that, once the item
passes `session_compact_bytes`, closed bundles move to history (services.archive): only what is still open
counts, so a long session stays small and its writes cheap.
"""
from __future__ import annotations

from typing import Any

from ..domain.errors import ConditionFailed, ItemTooLarge
from ..domain.model import Session
from ..store import codec
from ..store.size import item_size, value_size
from . import archive
from .deps import Deps


def ensure_room(deps: Deps, session: Session, field: str, addition: dict[str, Any]) -> None:
    """Raise 409 session_full (final, naming `field`) when adding `addition` would pass the budget.

    A session past the compaction size first archives its closed bundles, then raises ConditionFailed with
    the smaller aggregate: the caller's retry loop decides again on it.
    """
    budget = deps.settings.session_budget_bytes
    used = item_size(codec.session_to_item(session))
    adding = value_size(addition)
    if used + adding > deps.settings.session_compact_bytes:
        compacted = archive.compact(deps, session)
        if compacted is not None:
            raise ConditionFailed("closed questions moved to history", current=compacted)
    if used + adding > budget:
        raise ItemTooLarge(f"the session holds {used // 1024} KB and this {field} adds {adding // 1024} KB: "
                           f"over its budget of {budget // 1024} KB. Start a new session, or send less",
                           field=field, used_bytes=used, adding_bytes=adding, budget_bytes=budget)
