"""A prompt whose dispatch is ambiguous (agentctl's reply was lost): the agent's own output carrying the
prompt's generation proves it has it. Then the turn stays alive, and nothing the agent says is dropped."""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.agentctl.client import PromptOutcome, PromptRequest
from chalicelib.domain.errors import DispatchAmbiguous
from chalicelib.domain.model import Dispatch
from chalicelib.functions.reconciler import reconcile
from tests.support.world import World


@pytest.fixture
def w() -> World:
    return World()


def _ambiguous_send(w: World) -> str:
    sid = w.session().id
    w.agent.script("accept-then-fail")
    with pytest.raises(DispatchAmbiguous):
        w.send(sid, "build it", "m1")
    assert w.get(sid).prompt.dispatch == Dispatch.ATTEMPTED  # type: ignore[union-attr]
    return sid


def _past_the_owner_deadline(w: World) -> Any:
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
    return reconcile(w.deps, before_traffic=False)


def test_ambiguous_dispatch__agent_output_carries_its_generation__turn_kept_alive_past_the_deadline(
        w: World) -> None:
    sid = _ambiguous_send(w)
    assert w.report(sid, "message", content="on it").applied == 1

    assert w.get(sid).prompt.dispatch == Dispatch.ACCEPTED  # type: ignore[union-attr]
    report = _past_the_owner_deadline(w)

    s = w.get(sid)
    assert report.prompts_ambiguous == 0 and s.current_turn is not None and s.current_turn.open
    assert w.report(sid, "message", content="done, here it is").applied == 1
    assert w.report(sid, "turn_completed").applied == 1
    assert ("agent", "done, here it is") in w.contents(sid)
    assert w.transcript(sid)["messages"][0].get("meta", {}) in (None, {})  # not marked "may not have arrived"


def test_ambiguous_dispatch__closed_after_the_deadline__the_agents_later_output_is_kept(w: World) -> None:
    sid = _ambiguous_send(w)
    frame = w.frame(sid, "message", content="sorry, I was slow")  # the prompt's own identity
    assert _past_the_owner_deadline(w).prompts_ambiguous == 1
    assert not w.get(sid).current_turn.open  # type: ignore[union-attr]

    assert w.frames(sid, frame).applied == 1

    assert ("agent", "sorry, I was slow") in w.contents(sid)
    assert w.get(sid).prompt.dispatch == Dispatch.ACCEPTED  # type: ignore[union-attr]


def test_ambiguous_dispatch__output_of_an_older_generation__still_dropped(w: World) -> None:
    sid = _ambiguous_send(w)
    stale = {**w.frame(sid, "message", content="from before"), "prompt_generation": 0}
    _past_the_owner_deadline(w)

    assert w.frames(sid, stale).applied == 0
    assert ("agent", "from before") not in w.contents(sid)


def test_send__the_agent_answers_before_agentctl_replies__sent(w: World) -> None:
    """Evidence can arrive before the 202: the dispatcher's own ACCEPTED write then finds it done."""
    sid = w.session().id
    original = w.agent.prompt

    def output_first(request: PromptRequest) -> PromptOutcome:
        outcome = original(request)
        w.report(sid, "message", content="already working")
        return outcome
    w.agent.prompt = output_first  # type: ignore[method-assign]

    assert w.send(sid, "go", "m1").admission == "sent"
    assert w.get(sid).prompt.dispatch == Dispatch.ACCEPTED  # type: ignore[union-attr]
