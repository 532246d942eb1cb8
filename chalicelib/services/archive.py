"""Closed bundles leave the session aggregate for history, so a long session stays small.

A bundle whose every question was answered, skipped or withdrawn, with nothing on its way and nothing of the
session pointing at it (rules.archivable), can only be read or deleted from then on. Once the aggregate grows
past `session_compact_bytes`, the next ask or message moves every such bundle into its history record in one
transaction (store.archive_bundles), before it counts against the budget. Readers find an archived bundle
through `find`/`with_archived`: the session they get back holds it again, so every rule derives its state,
its 409 winner and an Idempotency-Key replay exactly as before it moved.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..domain.model import Bundle, Session
from ..domain.rules import archivable
from .deps import Deps

BATCH = 99  # a transaction takes 100 items: the aggregate's update and up to 99 records


def find(deps: Deps, session: Session, bundle_id: str) -> tuple[Session, Bundle] | None:
    """The bundle from the aggregate, else from its history record; the session returned holds it."""
    bundle = session.bundle(bundle_id)
    if bundle is not None:
        return session, bundle
    archived = deps.store.get_archived(session.id, bundle_id) if session.archived else None
    return (holding(session, [archived]), archived) if archived is not None else None


def with_archived(deps: Deps, session: Session) -> Session:
    """The session holding its archived bundles too (for reading: a transcript)."""
    return holding(session, deps.store.list_archived(session.id)) if session.archived else session


def holding(session: Session, bundles: Iterable[Bundle]) -> Session:
    live = {b.id for b in session.bundles}
    extra = tuple(b for b in bundles if b.id not in live)  # the aggregate outranks a record
    if not extra:
        return session
    return replace(session, bundles=tuple(sorted((*session.bundles, *extra), key=lambda b: (b.created_at, b.id))))


def compact(deps: Deps, session: Session) -> Session | None:
    """Archive every closed bundle of `session`; returns the smaller aggregate, or None when none was
    closed. A lost race (ConditionFailed, carrying the current aggregate) leaves everything as it was."""
    closed = [b for b in session.bundles if archivable(session, b)]
    if not closed:
        return None
    while closed:
        batch, closed = closed[:BATCH], closed[BATCH:]
        session = deps.store.archive_bundles(session, batch, deps.now())
    return session
