"""Bundles that can no longer be answered leave the session aggregate for history: it holds live state only.

A bundle that respond can no longer answer (superseded, expired, cancelled, answered, rejected), with nothing
on its way and nothing of the session pointing at it (rules.archivable), moves into its history record right
after the write that closed it: the sessions stream function, having copied the bundle's transcript anchor,
archives it from the very aggregate version its record carries (`settle`), in one transaction (the record is
created and the bundle dropped together, or neither: a crash between the two cannot lose it, and a bundle
that left can never be archived again or come back). A stale or redelivered record finds another version and
leaves it to the newer record. Should the stream lag, the next ask or message past `session_compact_bytes`
does the same first (`compact`). Readers find an archived bundle through `find`: the session they get back
holds it again, so every rule derives its state, its 409 winner and an Idempotency-Key replay exactly as
before it moved; a late answer links to the record and a dismissal marks it (`mark`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from ..domain.errors import ConditionFailed
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


def settle(deps: Deps, session: Session) -> None:
    """Archive what `session` (a stream record's new image) holds that can no longer be answered; a newer
    version (ConditionFailed) is left to its own record."""
    try:
        compact(deps, session)
    except ConditionFailed:
        pass


def mark(deps: Deps, session: Session, bundle: Bundle, *, dismissed_by: str | None = None,
         late_message_id: str | None = None) -> bool:
    """Dismiss `bundle` (not active) for a user, or link it to the message that answered it late, wherever it
    lives: in the aggregate (a conditional write; ConditionFailed when it is active again) or, once archived
    (even between the read and this write), in its record. False: it is gone (deleted)."""
    if session.bundle(bundle.id) is not None:
        try:
            if dismissed_by is not None:
                deps.store.dismiss(session.id, bundle.id, [r.question.question_id for r in bundle.rows],
                                   dismissed_by, deps.now())
            if late_message_id is not None:
                deps.store.link_late_message(session.id, bundle.id, late_message_id, deps.now())
            return True
        except ConditionFailed as exc:
            current = exc.session or deps.store.get_session(session.id)
            if current is not None and current.bundle(bundle.id) is not None:
                raise
    return deps.store.mark_archived(session.id, bundle.id, dismissed_by=dismissed_by,
                                    late_message_id=late_message_id)


def compact(deps: Deps, session: Session, anchor: Callable[[Bundle], None] | None = None) -> Session | None:
    """Archive every closed bundle of `session`; returns the smaller aggregate, or None when none was
    closed. A lost race (ConditionFailed, carrying the current aggregate) leaves everything as it was.
    `anchor` first writes a bundle's transcript anchor (idempotent), for a caller that cannot know whether the
    stream function copied it yet."""
    closed = [b for b in session.bundles if archivable(session, b)]
    if not closed:
        return None
    if anchor is not None:
        for bundle in closed:
            anchor(bundle)
    while closed:
        batch, closed = closed[:BATCH], closed[BATCH:]
        session = deps.store.archive_bundles(session, batch, deps.now())
    return session
