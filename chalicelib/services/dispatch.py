"""Prompt dispatch with an at-most-once boundary.

pending --(attempted marker written)--> attempted --agentctl--> accepted | rejected
A crash before the marker leaves the prompt pending: the reconciler dispatches it once.
A crash or timeout after the marker is ambiguous: nothing ever dispatches it again.
"""
from __future__ import annotations

import logging

from .. import observability as obs
from ..agentctl.client import AgentctlAmbiguous, PromptOutcome, PromptRequest
from ..domain.errors import ConditionFailed, DispatchAmbiguous, DispatchFailed
from ..domain.model import Dispatch, Prompt, Session
from .deps import Deps

log = logging.getLogger(__name__)


def dispatch_prompt(deps: Deps, session: Session, prompt: Prompt) -> Session:
    """Mark attempted, call agentctl, record the outcome. Raises DispatchFailed / DispatchAmbiguous."""
    store = deps.store
    try:
        session = store.set_dispatch(session.id, prompt.message_id, expect=Dispatch.PENDING,
                                     to=Dispatch.ATTEMPTED, at=deps.now(), deadline=deps.deadline())
    except ConditionFailed as exc:
        if exc.session is not None and exc.session.terminal:  # nothing was sent, nothing ever will be
            raise DispatchFailed("the session ended before the prompt reached the agent") from exc
        # Someone else (a retry, the reconciler) owns this prompt now: never dispatch twice.
        raise DispatchAmbiguous("the prompt is already being dispatched") from exc
    request = PromptRequest(session_id=session.id, execution_id=session.execution_id,
                            prompt_generation=prompt.generation, turn_id=prompt.turn_id, text=prompt.content,
                            agent_token=deps.agent_token(session.workspace_id, session.id))
    try:
        outcome = deps.agentctl.prompt(request)
    except AgentctlAmbiguous as exc:
        log.warning("prompt %s of session %s is ambiguous: %s", prompt.message_id, session.id, exc)
        obs.count(obs.AMBIGUOUS_DISPATCHES, path="prompt")
        raise DispatchAmbiguous("the agent may have received the prompt; it will not be sent again") from exc
    if outcome is PromptOutcome.ACCEPTED:
        try:
            return store.set_dispatch(session.id, prompt.message_id, expect=Dispatch.ATTEMPTED,
                                      to=Dispatch.ACCEPTED, at=deps.now(), deadline=None)
        except ConditionFailed as exc:  # the agent's own output proved it first (frames._evidence)
            current = exc.session or store.get_session(session.id)
            if current is not None and current.prompt is not None and \
                    current.prompt.message_id == prompt.message_id and current.prompt.dispatch == Dispatch.ACCEPTED:
                return current
            raise
    settle(deps, session.id, prompt, Dispatch.REJECTED)
    raise DispatchFailed("the agent did not accept the prompt; the session is idle again")


def settle(deps: Deps, session_id: str, prompt: Prompt, to: Dispatch) -> Session:
    """Record a final dispatch state and, in the same write, close the prompt's turn if it is still open and
    RUNNING (nothing else will: the agent refused it, or nobody knows whether it has it)."""
    try:
        return deps.store.set_dispatch(session_id, prompt.message_id, expect=Dispatch.ATTEMPTED, to=to,
                                       at=deps.now(), deadline=None, close_turn_id=prompt.turn_id)
    except ConditionFailed:  # the turn moved on (agent frames, cancellation): record the outcome alone
        return deps.store.set_dispatch(session_id, prompt.message_id, expect=Dispatch.ATTEMPTED, to=to,
                                       at=deps.now(), deadline=None)


def retire_ambiguous(deps: Deps, session: Session) -> Session:
    """An attempted prompt past its owner deadline: never resend it, and do not strand its turn."""
    assert session.prompt is not None
    return settle(deps, session.id, session.prompt, Dispatch.ATTEMPTED)
