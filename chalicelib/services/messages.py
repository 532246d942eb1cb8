"""Ordinary messages: every message, a late answer included, takes this one admission path.

No turn open → sent (a new turn carrying the prompt, one conditional write) then dispatched; the agent
mid-turn → steered when asked and agentctl supports it, otherwise queued and dispatched in order when the
turn ends; a session that cannot take input → 409 session_unavailable with nothing stored.
`client_message_id` is the admission's identity: its record commits atomically with the admission.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..agentctl.client import AgentctlAmbiguous, PromptRequest
from ..auth.tokens import Caller
from ..domain import clarify
from ..domain.commands import ReplyTo, SendMessage
from ..domain.errors import (
    AlreadyRemembered,
    ClarificationActive,
    ClarificationInactive,
    ConditionFailed,
    Contended,
    DispatchAmbiguous,
    DispatchFailed,
    DomainError,
    IdempotencyMismatch,
    QueueFull,
    SessionUnavailable,
    ValidationError,
    by_code,
)
from ..domain.model import INPUT_CAPABLE_STATES, Dispatch, Message, Prompt, Session, Turn
from ..domain.respond import LateAnswer, late_answer
from ..domain.rules import bundle_is_active, input_capable
from ..store.protocol import Remembered
from . import archive
from .access import session_for_user
from .budget import ensure_room
from .deps import Deps
from .dispatch import dispatch_prompt
from .history import delivery_note
from .polling import poll
from .retry import fresh_session, on_conflict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admission:
    message_id: str
    admission: str  # sent | queued | steered
    turn_id: str | None
    replayed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"message_id": self.message_id, "admission": self.admission, "turn_id": self.turn_id}


def send_message(deps: Deps, caller: Caller, session_id: str, command: SendMessage) -> Admission:
    session = session_for_user(deps, caller, session_id)
    late = _late(deps, session, command.in_reply_to) if command.in_reply_to is not None else None
    fingerprint = hashlib.sha256(json.dumps({"content": command.content, "delivery": command.delivery,
                                             "in_reply_to": late.context if late else None},
                                            sort_keys=True).encode()).hexdigest()
    key = f"message:{session.id}:{command.client_message_id}"
    remembered = deps.store.get_remembered(key)
    if remembered is not None:
        return _replay(deps, key, remembered, fingerprint, session)
    try:
        return admit_message(deps, caller, session, client_message_id=command.client_message_id,
                             content=command.content, delivery=command.delivery, late=late,
                             remember=(key, fingerprint))
    except AlreadyRemembered:  # a concurrent retry of the same message won the admission
        remembered = deps.store.get_remembered(key)
        assert remembered is not None
        return _replay(deps, key, remembered, fingerprint, deps.store.get_session(session.id) or session)


def _late(deps: Deps, session: Session, reply: ReplyTo) -> LateAnswer:
    found = archive.find(deps, session, reply.clarification_id)
    if found is None or clarify.session_of(reply.clarification_id) != session.id:
        raise ValidationError("in_reply_to.clarification_id", "not a question of this session")
    session, bundle = found
    if bundle_is_active(session, bundle):
        raise ClarificationActive("the question is still active: answer it through respond")
    if not clarify.late_answer_allowed(session, bundle, deps.now()):
        raise ClarificationInactive("only an unanswered question the agent no longer waits for (superseded, "
                                    "expired or withdrawn) can be answered late",
                                    reason=clarify.derived_state(session, bundle, deps.now()))
    return late_answer(bundle, reply.answers)


def _replay(deps: Deps, key: str, remembered: Remembered, fingerprint: str, session: Session) -> Admission:
    """Every retry of one client_message_id is told the one outcome the original was told. While the original
    request is still dispatching the message that outcome is not known yet (the record says what was
    admitted, not whether the agent took it), so a retry waits, bounded, for it to settle; still unsettled,
    it is a retryable conflict, never a guess."""
    if remembered.fingerprint != fingerprint:
        raise IdempotencyMismatch("this client_message_id was used with a different message")
    first = [remembered]

    def settled() -> tuple[Remembered, Session] | None:
        # The aggregate is read after the record: one read before it may predate the admission it records.
        r = first.pop() if first else deps.store.get_remembered(key) or remembered
        s = deps.store.get_session(session.id) or session
        return None if _in_flight(r, s) else (r, s)
    found = poll(deps, settled, deps.settings.confirm_wait)
    if found is not None:
        return _told(*found)
    current = deps.store.get_session(session.id) or session
    own = _own_prompt(remembered, current)
    if own is not None and own.dispatch == Dispatch.REJECTED:  # its request died before recording why
        return _told(deps.store.get_remembered(key) or remembered, current)
    raise Contended("the original request is still sending this message; retry")


def _own_prompt(remembered: Remembered, session: Session) -> Prompt | None:
    p = session.prompt
    return p if p is not None and p.message_id == remembered.response.get("message_id") else None


def _in_flight(remembered: Remembered, session: Session) -> bool:
    """The original request has not told its outcome yet: its prompt is still being dispatched (pending,
    or attempted within its owner deadline), or it was refused and the request is recording why."""
    p = _own_prompt(remembered, session)
    if p is None or isinstance(remembered.response.get("error"), Mapping):
        return False
    return p.dispatch in (Dispatch.PENDING, Dispatch.REJECTED) or (p.dispatch == Dispatch.ATTEMPTED
                                                                   and p.deadline is not None)


def _told(remembered: Remembered, session: Session) -> Admission:
    """The original outcome of a settled admission. The aggregate outranks the record: a crash may have kept
    the record from learning that the agent refused this very prompt."""
    r = remembered.response
    error = r.get("error")
    if isinstance(error, Mapping):  # the admission ended with this error after the message was stored
        raise replayed_error(error)
    p = session.prompt
    if p is not None and p.message_id == r.get("message_id") and p.dispatch == Dispatch.REJECTED:
        raise DispatchFailed("the agent did not accept this message", message_id=p.message_id)
    if p is not None and p.message_id == r.get("message_id") and delivery_note(p).get("delivery_unknown"):
        raise DispatchAmbiguous("the connection to the agent broke while this message was being sent: it may "
                                "not have arrived, and is never sent twice", message_id=p.message_id)
    return Admission(str(r["message_id"]), str(r["admission"]), r.get("turn_id"), replayed=True)


def replayed_error(error: Mapping[str, Any]) -> DomainError:
    """The remembered error, as the same domain error: final, so never retryable."""
    cls = by_code(str(error.get("code")))
    replayed = cls.__new__(cls)
    DomainError.__init__(replayed, str(error.get("message", "")), **dict(error.get("details", {})))
    replayed.retryable = False
    return replayed


def admit_message(deps: Deps, caller: Caller, session: Session, *, client_message_id: str, content: str,
                  delivery: str = "auto", late: LateAnswer | None = None,
                  remember: tuple[str, str] | None = None) -> Admission:
    text = "\n\n".join(t for t in (content, late.text if late else "") if t)

    def attempt(s: Session) -> Admission:
        if not input_capable(s.state):
            raise SessionUnavailable(f"the session is {s.state.value} and cannot take input")
        if late is not None and s.bundle(late.bundle_id) is None and deps.store.get_archived(
                s.id, late.bundle_id) is None:  # deleted meanwhile (another device)
            raise ValidationError("in_reply_to.clarification_id", "the question was deleted; send the answer as "
                                  "an ordinary message")
        turn = s.current_turn
        if turn is not None and turn.open:
            if delivery == "steer" and _steer(deps, s, text):
                return _record_steered(deps, caller, s, client_message_id, content, late, remember)
            return _queue(deps, caller, s, client_message_id, text, late, remember)
        return _send(deps, caller, s, client_message_id, text, late, remember)
    return on_conflict(attempt, session, fresh_session(deps, session.id, "the session is gone"))


def _remembered(deps: Deps, remember: tuple[str, str] | None, response: Mapping[str, Any]) -> Remembered | None:
    if remember is None:
        return None
    expires = int((deps.clock() + deps.settings.idempotency_ttl).timestamp())
    return Remembered(remember[0], remember[1], dict(response), expires)


def _prompt(deps: Deps, caller: Caller, session: Session, client_message_id: str, text: str,
            late: LateAnswer | None, turn_id: str) -> Prompt:
    return Prompt(message_id=deps.new_id(), client_message_id=client_message_id, turn_id=turn_id, content=text,
                  author_id=caller.sub, created_at=deps.now(), generation=session.generation + 1,
                  dispatch=Dispatch.PENDING, deadline=deps.deadline(),
                  reply_to=dict(late.context) if late else None)


def _send(deps: Deps, caller: Caller, session: Session, client_message_id: str, text: str,
          late: LateAnswer | None, remember: tuple[str, str] | None) -> Admission:
    turn = Turn(id=deps.new_id(), seq=session.turn_seq + 1, started_at=deps.now())
    prompt = _prompt(deps, caller, session, client_message_id, text, late, turn.id)
    ensure_room(deps, session, "content", prompt)
    admission = Admission(prompt.message_id, "sent", turn.id)
    entry = _remembered(deps, remember, admission.as_dict())
    session = deps.store.admit(session.id, prompt, start=turn,
                               expected_turn_id=session.current_turn.id if session.current_turn else None,
                               from_states=INPUT_CAPABLE_STATES, link_bundle=_linked(session, late),
                               remember=entry, queue_cap=deps.settings.queue_cap, at=deps.now())
    _link_archived(deps, session, late, prompt.message_id)
    try:
        dispatch_prompt(deps, session, prompt)
    except DomainError as failed:
        exc = _ended_meanwhile(deps, session.id, failed) or failed
        exc.details["message_id"] = prompt.message_id
        if entry is not None:  # the retry of this message answers what this attempt answered
            error = {"code": exc.code, "message": exc.message, "details": dict(exc.details)}
            deps.store.update_remembered(replace(entry, response={"error": error}))
        if exc is failed:
            raise
        raise exc from failed
    return admission


def _ended_meanwhile(deps: Deps, session_id: str, failed: DomainError) -> DomainError | None:
    """The session was cancelled (or ended) between the admission and the dispatch, so the agent never took
    the prompt (refused, or never asked): the message was not sent, and resending cannot help — say that,
    not "retry"."""
    if not isinstance(failed, DispatchFailed):
        return None
    current = deps.store.get_session(session_id)
    if current is None or not current.terminal:
        return None
    return SessionUnavailable(f"the session was {current.state.value.lower()} before this message reached the "
                              "agent: it was not sent")


def _queue(deps: Deps, caller: Caller, session: Session, client_message_id: str, text: str,
           late: LateAnswer | None, remember: tuple[str, str] | None) -> Admission:
    assert session.current_turn is not None
    if len(session.queue) >= deps.settings.queue_cap:
        raise QueueFull(f"the session already queues {len(session.queue)} messages; send again once the "
                        "agent's turn ends")
    prompt = _prompt(deps, caller, session, client_message_id, text, late, "")
    ensure_room(deps, session, "content", prompt)
    admission = Admission(prompt.message_id, "queued", None)
    admitted = deps.store.admit(session.id, prompt, start=None, expected_turn_id=session.current_turn.id,
                                from_states=INPUT_CAPABLE_STATES, link_bundle=_linked(session, late),
                                remember=_remembered(deps, remember, admission.as_dict()),
                                queue_cap=deps.settings.queue_cap, at=deps.now())
    _link_archived(deps, admitted, late, prompt.message_id)
    return admission


def _linked(session: Session, late: LateAnswer | None) -> str | None:
    """The question a late answer links to in the admission's own write: one still in the aggregate."""
    return late.bundle_id if late is not None and session.bundle(late.bundle_id) is not None else None


def _link_archived(deps: Deps, session: Session, late: LateAnswer | None, message_id: str) -> None:
    """A question already in history is linked to its late answer's message right after the admission (a
    crash between the two leaves it answerable late once more: nothing is lost)."""
    if late is not None and session.bundle(late.bundle_id) is None:
        deps.store.mark_archived(session.id, late.bundle_id, late_message_id=message_id)


def _steer(deps: Deps, session: Session, text: str) -> bool:
    steer = getattr(deps.agentctl, "steer", None)
    if steer is None:
        return False
    assert session.current_turn is not None
    try:
        return bool(steer(PromptRequest(session_id=session.id, execution_id=session.execution_id,
                                        prompt_generation=session.generation, turn_id=session.current_turn.id,
                                        text=text, agent_token=deps.agent_token(session.workspace_id, session.id))))
    except AgentctlAmbiguous:
        return False


def _record_steered(deps: Deps, caller: Caller, session: Session, client_message_id: str, content: str,
                    late: LateAnswer | None, remember: tuple[str, str] | None) -> Admission:
    turn = session.current_turn
    assert turn is not None
    message = Message(id=deps.new_id(), session_id=session.id, workspace_id=session.workspace_id,
                      task_id=session.task_id, turn_id=turn.id, turn_seq=turn.seq, author_type="user",
                      type="message", content=content, created_at=deps.now(),
                      meta={"in_reply_to": dict(late.context)} if late else None)
    admission = Admission(message.id, "steered", turn.id)
    entry = _remembered(deps, remember, admission.as_dict())
    if entry is not None:  # the agent has it now: remember that first, so no retry steers it again
        deps.store.remember(entry)
    deps.store.put_message(message)
    if late is not None:
        bundle = session.bundle(late.bundle_id) or deps.store.get_archived(session.id, late.bundle_id)
        if bundle is not None:
            archive.mark(deps, session, bundle, late_message_id=message.id)
    return admission


def live_bundles(session: Session, now: str) -> bool:
    """A live (not detached) active clarification blocks the queue drain; a detached one does not."""
    return any(bundle_is_active(session, b) and not clarify.is_detached(b, now) for b in session.bundles)


def drainable(session: Session, now: str) -> bool:
    """The queue's head may start a turn now: the agent's turn is over and no live question holds it."""
    turn = session.current_turn
    return bool(session.queue) and not session.terminal and (turn is None or not turn.open) \
        and not live_bundles(session, now)


def drain(deps: Deps, session: Session) -> Session:
    """Dispatch the queue's head as a new turn once the agent's turn is over (in order, one at a time).

    The new turn supersedes a detached question: the documented trade-off of draining.
    """
    turn = session.current_turn
    if not drainable(session, deps.now()):
        return session
    head = session.queue[0]
    new_turn = Turn(id=deps.new_id(), seq=session.turn_seq + 1, started_at=deps.now())
    prompt = replace(head, turn_id=new_turn.id, generation=session.generation + 1, dispatch=Dispatch.PENDING,
                     deadline=deps.deadline())
    try:
        session = deps.store.start_from_queue(session.id, expected_turn_id=turn.id if turn else None,
                                              turn=new_turn, head=prompt, at=deps.now())
    except ConditionFailed as exc:
        log.info("queue drain of %s lost a race: %s", session.id, exc)
        return exc.session or session
    try:
        return dispatch_prompt(deps, session, prompt)
    except DomainError as exc:
        log.warning("queued message %s of %s: %s", head.message_id, session.id, exc)
        return deps.store.get_session(session.id) or session
