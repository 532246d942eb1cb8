"""The session's byte budget: what asks and user messages may fill the aggregate with.

DynamoDB refuses an item over 400 KB, and a session item that reached it would refuse every later write,
cancel and the reconciler's repairs included. So growth the user or the agent controls (a question bundle, a
sent or queued message) is refused once the item would pass `session_budget_bytes`, counted in UTF-8 bytes by
DynamoDB's own rules; the headroom above it keeps every other write possible. Before that, once the item
passes `session_compact_bytes`, closed bundles move to history (services.archive): only what is still open
counts, so a long session stays small and its writes cheap.
"""
from __future__ import annotations

from ..domain.errors import ConditionFailed, ItemTooLarge
from ..domain.model import Bundle, Prompt, Session
from . import archive
from .deps import Deps
from .history import bundle_message


def ensure_room(deps: Deps, session: Session, field: str, addition: Bundle | Prompt) -> None:
    """Raise 409 session_full (final, naming `field`) when adding `addition` would pass the budget.

    A session past the compaction size first archives its closed bundles, then raises ConditionFailed with
    the smaller aggregate: the caller's retry loop decides again on it.
    """
    budget = deps.settings.session_budget_bytes
    used, adding = deps.store.room(session, addition)
    if used + adding > deps.settings.session_compact_bytes:
        compacted = archive.compact(deps, session, anchor=lambda b: _anchor(deps, session, b))
        if compacted is not None:
            raise ConditionFailed("closed questions moved to history", current=compacted)
    if used + adding > budget:
        raise ItemTooLarge(f"the session holds {used // 1024} KB and this {field} adds {adding // 1024} KB: "
                           f"over its budget of {budget // 1024} KB. Start a new session, or send less",
                           field=field, used_bytes=used, adding_bytes=adding, budget_bytes=budget)


def _anchor(deps: Deps, session: Session, bundle: Bundle) -> None:
    """A closed bundle leaving before the stream function copied its transcript anchor (the stream lags) would
    be missing from the transcript until it did: its anchor is written first, where the stream files it (the
    stream's own copy then finds it there, and a deleted one's tombstone is never overwritten)."""
    if bundle.turn_seq:  # stored before bundles kept their turn's number: the stream's copy only
        deps.store.put_message(bundle_message(session, bundle.id, bundle.turn_seq))
