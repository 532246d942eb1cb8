"""The reconciler: one function, two triggers (ARCHITECTURE §5).

Before traffic it repairs every item that carries outstanding work, then sets the traffic flag; any
failure fails the run and traffic stays off. Scheduled, it touches only items whose owner deadline has
passed, so it never races a live invocation. Work is found through the sparse reconciler index.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..domain.errors import ConditionFailed, DispatchAmbiguous, DispatchFailed
from ..domain.model import Dispatch, Session
from ..services.deps import Deps
from ..services.dispatch import dispatch_prompt, retire_ambiguous
from ..services.readiness import mark_ready

log = logging.getLogger(__name__)


class ReconcileFailed(Exception):
    pass


@dataclass
class Report:
    examined: int = 0
    dispatched: int = 0
    retired: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"examined": self.examined, "dispatched": self.dispatched, "retired": self.retired,
                "errors": list(self.errors)}


def reconcile(deps: Deps, *, before_traffic: bool) -> Report:
    report = Report()
    due = deps.store.due_sessions(None if before_traffic else deps.now())
    for session_id in due:
        report.examined += 1
        try:
            _session(deps, session_id, report)
        except Exception as exc:  # one broken item must not stop the pass; the run still fails
            log.exception("reconciling session %s failed", session_id)
            report.errors.append(f"{session_id}: {exc}")
    if report.errors:
        raise ReconcileFailed("; ".join(report.errors))
    if before_traffic:
        mark_ready(deps)
    return report


def _session(deps: Deps, session_id: str, report: Report) -> None:
    session = deps.store.get_session(session_id)
    if session is None or session.prompt is None:
        return
    prompt = session.prompt
    if prompt.dispatch == Dispatch.PENDING:
        _pending_prompt(deps, session, report)
    elif prompt.dispatch == Dispatch.ATTEMPTED and prompt.deadline:
        # The owner died after the at-most-once marker: the agent may have it. Never resend.
        retire_ambiguous(deps, session)
        report.retired += 1


def _pending_prompt(deps: Deps, session: Session, report: Report) -> None:
    """Stored but never attempted: dispatch it once, if its turn is still the session's current turn."""
    prompt = session.prompt
    assert prompt is not None
    turn = session.current_turn
    if session.terminal or turn is None or turn.id != prompt.turn_id:
        deps.store.set_dispatch(session.id, prompt.message_id, expect=Dispatch.PENDING, to=Dispatch.REJECTED,
                                at=deps.now(), deadline=None)
        report.retired += 1
        return
    try:
        dispatch_prompt(deps, session, prompt)
        report.dispatched += 1
    except (DispatchFailed, DispatchAmbiguous, ConditionFailed) as exc:
        log.warning("recovered prompt %s: %s", prompt.message_id, exc)
        report.dispatched += 1
