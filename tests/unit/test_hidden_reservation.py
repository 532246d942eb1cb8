"""A reserved successor turn stays hidden until the agent acknowledged it (spec: "marked unpublished so
provider frames can reference it without making it current"): while agentctl is being called, the session,
the transcript and every session.updated event name the predecessor; when the agent refuses and the
reservation rolls back, no client ever held the successor's id."""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.agentctl.client import PromptOutcome, PromptRequest
from chalicelib.domain.errors import DispatchFailed
from chalicelib.domain.public import session_view
from chalicelib.services import history
from tests.support.harness import World
from tests.support.world import USER


@pytest.mark.parametrize("outcome", ["reject", "accept"])
def test_resume__while_agentctl_is_called__only_the_predecessor_is_published(outcome: str) -> None:
    w = World()
    sid = w.new_session()
    cid = w.detached_bundle(sid)
    w.pump()
    predecessor = w.get(sid).current_turn.id  # type: ignore[union-attr]
    seen: dict[str, Any] = {}
    original = w.agent.prompt

    def while_the_agent_is_called(request: PromptRequest) -> PromptOutcome:
        s = w.get(sid)
        seen["stored"] = s.current_turn.id  # type: ignore[union-attr]  # attempted: current in storage
        seen["session"] = session_view(s)["current_turn_id"]
        seen["transcript"] = w.transcript(sid)["current_turn_id"]
        seen["turns"] = [t.id for t in history.turns(w.deps, USER, sid)[0]]
        w.pump()  # the stream runs meanwhile
        return original(request)
    w.agent.prompt = while_the_agent_is_called  # type: ignore[method-assign]
    w.agent.script(outcome)

    if outcome == "reject":
        with pytest.raises(DispatchFailed):
            w.respond_answer(w.answer(cid))
    else:
        assert w.respond_answer(w.answer(cid)).delivery == "resumed"
    w.pump()

    successor = seen["stored"]
    assert successor != predecessor
    assert seen["session"] == seen["transcript"] == predecessor and successor not in seen["turns"]
    named = [e.payload.get("current_turn_id") for e in w.events() if e.type == "session.updated"]
    if outcome == "reject":
        assert successor not in named  # a turn that never existed was never announced
        assert session_view(w.get(sid))["current_turn_id"] == predecessor
    else:
        assert named[-1] == successor  # announced once acknowledged
