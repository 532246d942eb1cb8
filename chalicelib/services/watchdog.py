"""The primary-answer watchdog: after a confirmed live answer, an agent that shows no activity gets the
answer again in a replacement prompt — never into a successor turn, never twice into the same turn."""
from __future__ import annotations

import logging

from ..agentctl.client import AgentctlAmbiguous, CancelRequest
from ..domain.commands import Frame
from ..domain.errors import ConditionFailed, DomainError
from ..domain.model import Dispatch, Prompt, Session, Watchdog
from .deps import Deps
from .dispatch import dispatch_prompt
from .resume import SYSTEM_AUTHOR

log = logging.getLogger(__name__)


def turn_still_current(session: Session, turn_id: str) -> bool:
    """The clarification's turn is still the open current turn of a live session: a re-prompt may go there."""
    turn = session.current_turn
    return not session.terminal and turn is not None and turn.id == turn_id and turn.open


def fire(deps: Deps, session: Session) -> bool:
    """Fire a due watchdog. Returns True when a replacement prompt was admitted."""
    w = session.watchdog
    if w is None or w.due > deps.now():
        return False
    if not turn_still_current(session, w.turn_id):  # preflight: a successor turn owns the session now
        _disarm(deps, session, w.clarification_id)
        return False
    try:  # silently cancel the stuck prompt (its own cancel_ack frames do not count as activity)
        deps.agentctl.cancel(CancelRequest(session_id=session.id, execution_id=w.execution_id,
                                           prompt_generation=w.prompt_generation, silent=True))
    except AgentctlAmbiguous as exc:
        log.warning("watchdog cancel for %s failed: %s", session.id, exc)
    prompt = Prompt(message_id=deps.new_id(), client_message_id=f"watchdog-{w.clarification_id}",
                    turn_id=w.turn_id, content=w.text, author_id=SYSTEM_AUTHOR, created_at=deps.now(),
                    generation=session.generation + 1, dispatch=Dispatch.PENDING, deadline=deps.deadline())
    try:
        # Serialized admission: the same write re-checks that the watchdog is armed and its turn current,
        # and disarms it, so activity or a newer turn in between stops the fallback.
        session = deps.store.admit_watchdog_prompt(session.id, w, prompt, at=deps.now())
    except ConditionFailed:
        log.info("watchdog of %s interrupted before admission", session.id)
        return False
    try:
        dispatch_prompt(deps, session, prompt)
    except DomainError as exc:
        log.warning("watchdog replacement prompt for %s: %s", session.id, exc)
    return True


def _disarm(deps: Deps, session: Session, clarification_id: str) -> None:
    try:
        deps.store.clear_watchdog(session.id, clarification_id, deps.now())
    except ConditionFailed:
        pass


def own_cancel_ack(w: Watchdog, frame: Frame) -> bool:
    """The acknowledgement of the cancellation the fallback itself sent: the captured execution and prompt
    generation, and a cancel_ack. It alone does not count as the agent's activity."""
    return frame.type == "cancel_ack" and frame.execution_id == w.execution_id \
        and frame.prompt_generation == w.prompt_generation


def on_activity(deps: Deps, session: Session) -> Session:
    """Message, thinking and tool frames are agent activity: they disarm the watchdog."""
    if session.watchdog is None:
        return session
    try:
        return deps.store.clear_watchdog(session.id, session.watchdog.clarification_id, deps.now())
    except ConditionFailed as exc:
        return exc.current if isinstance(exc.current, Session) else session
