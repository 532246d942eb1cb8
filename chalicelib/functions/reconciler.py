"""The reconciler: one function, two triggers.

Before traffic it repairs every item that carries outstanding work and then sets the traffic flag. An item
it cannot repair is quarantined (marked, counted, refused by every write route until an operator releases
it), so one session never holds the others or the API; a start event the bus does not accept fails the run
and stays for the next one. Scheduled, it touches only
work whose owner deadline has passed, so it never races a live invocation. It finds work through the
sparse reconciler index, so its cost grows with outstanding work, not with the number of sessions.

Order per session: reservations (an attempted one becomes the start-event outbox marker), then start-event
replay, then response-delivery intents, then prompts, then lapsed waiter leases and due watchdogs; finally
the owner deadline is rescheduled or cleared. Every run then takes a bounded step of the backfills of items
stored before an attribute existed (chalicelib.services.backfill) until they are done.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .. import observability as obs
from ..domain.errors import ConditionFailed, DispatchAmbiguous, DispatchFailed, DomainError, StoreUnavailable
from ..domain.model import Dispatch, Session
from ..domain.rules import bundle_is_active, moved_on, row_pending
from ..services import backfill, watchdog
from ..services.clarifications import pause_for_input
from ..services.deps import Deps
from ..services.dispatch import dispatch_prompt, retire_ambiguous
from ..services.lifecycle import settle_deferred_ready
from ..services.messages import drain, drainable
from ..services.readiness import mark_ready
from ..services.resume import recover, replay_start_event, rollback

log = logging.getLogger(__name__)


class ReconcileFailed(Exception):
    pass


class Unpublished(ReconcileFailed):
    """The event bus did not accept a start event: the marker stays for the next run."""


@dataclass
class Report:
    examined: int = 0
    reservations_kept: int = 0
    reservations_rolled_back: int = 0
    start_events_published: int = 0
    intents_restored: int = 0
    intents_retired: int = 0
    prompts_dispatched: int = 0
    prompts_retired: int = 0
    prompts_ambiguous: int = 0
    waiters_detached: int = 0
    watchdogs_fired: int = 0
    ready_settled: int = 0  # delayed ready frames applied or dropped once their reservation resolved
    queue_drained: int = 0
    tasks_listed: int = 0  # old tasks given their place in the task list's index (services.backfill)
    quarantined: list[str] = field(default_factory=list)  # set apart by this run: it could not repair them
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def reconcile(deps: Deps, *, before_traffic: bool) -> Report:
    report = Report()
    now = deps.now()
    for session_id in deps.store.due_sessions(None if before_traffic else now):
        report.examined += 1
        try:
            with obs.scope(session=session_id):
                _session(deps, session_id, report, now=now, everything=before_traffic)
        except (Unpublished, StoreUnavailable) as exc:  # the bus or the database, not this session's item:
            log.error("reconciling session %s: %s", session_id, exc)  # the run fails; the next one retries
            report.errors.append(f"{session_id}: {exc}")
        except Exception as exc:  # this session's item itself: set it apart, never let it hold the others
            log.exception("reconciling session %s failed: quarantined", session_id)
            _quarantine(deps, session_id, f"{type(exc).__name__}: {exc}", report)
    _backfill(deps, report)
    obs.report_metrics(report)
    if report.errors:
        raise ReconcileFailed("; ".join(report.errors))
    if before_traffic:
        mark_ready(deps)
    return report


def _backfill(deps: Deps, report: Report) -> None:
    """A bounded, resumable step of the backfills (both triggers: a step a run until it is done)."""
    try:
        report.tasks_listed += backfill.list_old_tasks(deps)
    except StoreUnavailable as exc:  # the next run goes on from the last position it kept
        log.error("backfilling the task list: %s", exc)
        report.errors.append(f"backfill: {exc}")


def _quarantine(deps: Deps, session_id: str, reason: str, report: Report) -> None:
    """Marked, counted, excluded from admission, out of the reconciler's work: never silently skipped."""
    try:
        deps.store.quarantine(session_id, reason, deps.now())
        report.quarantined.append(session_id)
        obs.count(obs.QUARANTINES)
    except Exception as exc:  # could not even mark it: the run fails and the next one tries again
        log.exception("quarantining session %s failed", session_id)
        report.errors.append(f"{session_id}: {reason}; quarantine failed: {exc}")


def _due(deadline: str | None, now: str, everything: bool) -> bool:
    return everything or (deadline is not None and deadline < now)


def _session(deps: Deps, session_id: str, report: Report, *, now: str, everything: bool) -> None:
    session = deps.store.get_session(session_id)
    if session is None:
        return
    session = _reservation(deps, session, report, now, everything)
    if session.deferred_ready is not None and session.reservation is None:
        session = settle_deferred_ready(deps, session)
        report.ready_settled += 1
    session = _start_event(deps, session, report)
    session = _intents(deps, session, report, now)
    session = _prompt(deps, session, report, now, everything)
    session = _leases(deps, session, report, now)
    if session.queue:
        before = len(session.queue)
        session = drain(deps, session)
        report.queue_drained += before - len(session.queue)
    if session.watchdog is not None and session.watchdog.due < now and watchdog.fire(deps, session):
        report.watchdogs_fired += 1
    fresh = deps.store.get_session(session_id)
    if fresh is not None:  # compare-and-set: a deadline a writer set meanwhile is never dropped
        deps.store.reschedule(session_id, expected_due=fresh.recon_due, next_due=next_due(fresh, now))


def _reservation(deps: Deps, s: Session, report: Report, now: str, everything: bool) -> Session:
    r = s.reservation
    if r is None or not _due(r.deadline, now, everything):
        return s
    bundle = s.bundle(r.bundle_id)
    delivery = bundle.delivery if bundle else None
    if delivery is None:
        raise ReconcileFailed(f"reservation {r.turn_id} names no claimed bundle")
    if r.attempted:
        # The agent may have it: keep the successor and the terminal claim; the reservation becomes the
        # start-event outbox marker, published (turn.started, then turn.completed if it already finished)
        # and cleared once the bus accepted them.
        s = recover(deps, s, r, "ambiguous")
        report.reservations_kept += 1
        return s
    undone = rollback(deps, s.id, r, r.bundle_id, delivery)
    if undone.session is None:
        fresh = deps.store.get_session(s.id)
        if fresh is not None and (fresh.reservation is None or fresh.reservation.turn_id != r.turn_id):
            return fresh  # another writer (an overlapping run, the resume itself) resolved it meanwhile
        raise ReconcileFailed(f"could not roll back reservation {r.turn_id}")
    report.reservations_rolled_back += 1
    return undone.session


def _start_event(deps: Deps, s: Session, report: Report) -> Session:
    """An outbox marker left by an earlier attempt: publish its turn events, then clear it. A bus that does
    not accept fails this run and leaves the marker for the next one."""
    if s.start_event is None:
        return s
    if not replay_start_event(deps, s):
        raise Unpublished(f"the start events of turn {s.start_event.turn_id} were not accepted by the bus")
    report.start_events_published += 1
    return deps.store.get_session(s.id) or s


def _intents(deps: Deps, s: Session, report: Report, now: str) -> Session:
    """Claims whose owner deadline passed, whichever the trigger: a deploy's reconciler may run while traffic
    flows, and a live claim within its deadline still has a responder waiting for the agent's confirmation."""
    for bundle in s.bundles:
        d = bundle.delivery
        if d is None or not d.pending or not _due(d.deadline, now, everything=False):
            continue
        if s.reservation is not None and s.reservation.bundle_id == bundle.id:
            continue  # owned by an unresolved reservation
        try:
            if moved_on(s, bundle):  # superseded or terminal: retire the claim, never reactivate history
                s = deps.store.retire_claim(s.id, bundle.id, d.delivery_id, list(d.row_ids), outcome=d.outcome,
                                            at=deps.now())
                report.intents_retired += 1
            else:  # unhanded: the answer goes back to pending, to be answered again
                s = deps.store.restore_claim(s.id, bundle.id, d.delivery_id, list(d.row_ids), outcome=d.outcome,
                                             detach=False, at=deps.now())
                report.intents_restored += 1
        except ConditionFailed:
            s = deps.store.get_session(s.id) or s  # confirmation won meanwhile
    return s


def _prompt(deps: Deps, s: Session, report: Report, now: str, everything: bool) -> Session:
    p = s.prompt
    if p is None or not _due(p.deadline, now, everything):
        return s
    if p.dispatch == Dispatch.ATTEMPTED and p.deadline:
        report.prompts_ambiguous += 1
        return retire_ambiguous(deps, s)  # the agent may have it: never resend
    if p.dispatch != Dispatch.PENDING:
        return s
    turn = s.current_turn
    if s.terminal or turn is None or turn.id != p.turn_id:
        report.prompts_retired += 1
        return deps.store.set_dispatch(s.id, p.message_id, expect=Dispatch.PENDING, to=Dispatch.REJECTED,
                                       at=deps.now(), deadline=None)
    try:  # stored but never attempted: dispatch it once
        s = dispatch_prompt(deps, s, p)
    except (DispatchFailed, DispatchAmbiguous) as exc:
        log.warning("recovered prompt %s: %s", p.message_id, exc)
    report.prompts_dispatched += 1
    return deps.store.get_session(s.id) or s


def _leases(deps: Deps, s: Session, report: Report, now: str) -> Session:
    """A waiter that let its lease lapse is gone: detach durably and pause the agent's turn."""
    for bundle in s.bundles:
        if not bundle.waiter_until or bundle.waiter_until >= now or not bundle_is_active(s, bundle):
            continue
        if all(r.agent_disconnected for r in bundle.rows if row_pending(r)):
            continue
        expected = s.current_turn.id if s.current_turn else None
        try:
            pause_for_input(deps, s, bundle.id, expected)
            report.waiters_detached += 1
        except DomainError as exc:
            log.warning("detaching lapsed waiter of %s: %s", bundle.id, exc)
        s = deps.store.get_session(s.id) or s
    return s


def next_due(s: Session, now: str) -> str | None:
    """The earliest outstanding owner deadline of the aggregate, or None when nothing is outstanding."""
    candidates: list[str] = []
    if s.reservation is not None:
        candidates.append(s.reservation.deadline)
    if s.start_event is not None:  # nobody else publishes it: due at once
        candidates.append(now)
    if s.deferred_ready is not None and s.reservation is None:  # its reservation resolved: settle it now
        candidates.append(now)
    for b in s.bundles:
        if b.delivery is not None and b.delivery.pending:
            candidates.append(b.delivery.deadline)
        if b.waiter_until and bundle_is_active(s, b) and not all(
                r.agent_disconnected for r in b.rows if row_pending(r)):
            candidates.append(b.waiter_until)
    if s.prompt is not None and s.prompt.dispatch in (Dispatch.PENDING, Dispatch.ATTEMPTED) and s.prompt.deadline:
        candidates.append(s.prompt.deadline)
    if s.watchdog is not None:
        candidates.append(s.watchdog.due)
    if drainable(s, now):  # a queue left behind by a crash between completion and drain
        candidates.append(s.queue[0].deadline or now)
    return min(candidates) if candidates else None
