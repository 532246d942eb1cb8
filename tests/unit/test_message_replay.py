"""Every reply to one client_message_id tells the one outcome its original request told (API.md)."""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.agentctl.client import PromptOutcome, PromptRequest
from chalicelib.domain.errors import Contended, SessionUnavailable
from tests.support.world import World


@pytest.fixture
def w() -> World:
    return World()


def test_retry_while_the_original_dispatches__not_told_sent__then_told_what_the_original_was(w: World) -> None:
    """The issue's probe: a retry ran between the admission and a cancel that fenced the prompt; it was told
    200 `sent` for a message the agent never took. Now it waits for the outcome, and says conflict meanwhile."""
    sid = w.session().id
    original_prompt = w.agent.prompt
    during: dict[str, Any] = {}

    def prompt_after_a_retry_and_a_cancel(request: PromptRequest) -> PromptOutcome:
        try:
            during["retry"] = w.send(sid, "hello", "m1")
        except Contended as exc:
            during["retry"] = exc
        w.cancel(sid)  # another device: the agent's fence now refuses this very prompt
        return original_prompt(request)
    w.agent.prompt = prompt_after_a_retry_and_a_cancel  # type: ignore[method-assign]

    with pytest.raises(SessionUnavailable) as original:
        w.send(sid, "hello", "m1")

    assert isinstance(during["retry"], Contended) and during["retry"].retryable
    with pytest.raises(SessionUnavailable) as later:
        w.send(sid, "hello", "m1")
    assert later.value.message == original.value.message and not later.value.retryable
    assert [c.outcome for c in w.agent.prompt_calls] == ["reject"]


def test_retry_after_the_agent_took_it__told_sent_like_the_original(w: World) -> None:
    sid = w.session().id
    first = w.send(sid, "hello", "m1")

    again = w.send(sid, "hello", "m1")

    assert (again.message_id, again.admission, again.replayed) == (first.message_id, "sent", True)
    assert len(w.agent.prompt_calls) == 1
