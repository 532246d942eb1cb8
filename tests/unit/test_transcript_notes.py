"""What the transcript and a retry say of a user's message whose dispatch did not end well: never sent (the
session ended while it was queued, or the agent refused it) or unknown (the connection broke while sending, so
it is never resent). The session keeps the dispatch state of its latest message only: the note is shown while
that message is the latest one (an older message's outcome is not kept)."""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.domain.errors import DispatchAmbiguous, DispatchFailed
from chalicelib.functions.reconciler import reconcile
from chalicelib.services import sessions
from tests.support.harness import USER, World


def _mine(w: World, sid: str, content: str) -> dict[str, Any]:
    found = [m for m in w.transcript(sid)["messages"] if m["author_type"] == "user" and m["content"] == content]
    assert len(found) == 1, w.transcript(sid)["messages"]
    return found[0]


def test_transcript__agent_refused_the_message__not_sent_before_and_after_the_stream_copied_it() -> None:
    w = World()
    sid = w.new_session()
    w.agent.script("reject")
    with pytest.raises(DispatchFailed):
        w.send(sid, "first try", "m-1")
    assert _mine(w, sid, "first try")["not_sent"] == "agent_refused"  # read-your-writes
    w.pump()
    assert _mine(w, sid, "first try")["not_sent"] == "agent_refused"
    with pytest.raises(DispatchFailed):
        w.send(sid, "first try", "m-1")  # a retry of the same message is told the same

    w.send(sid, "second try", "m-2")
    w.pump()
    assert "not_sent" not in _mine(w, sid, "second try")


def test_transcript__connection_broke_while_sending__delivery_unknown_and_a_retry_says_so() -> None:
    w = World()
    sid = w.new_session()
    w.crash_during("set_dispatch", "after", lambda d: w.message(sid, {"client_message_id": "m-1",
                                                                      "content": "maybe sent"}, deps=d))
    w.pump()
    assert "delivery_unknown" not in _mine(w, sid, "maybe sent")  # still in flight, as far as anyone knows
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
    assert reconcile(w.deps, before_traffic=True).prompts_ambiguous == 1
    w.pump()

    assert _mine(w, sid, "maybe sent").get("delivery_unknown") is True
    with pytest.raises(DispatchAmbiguous) as told:  # the client's retry learns the truth, never "sent"
        w.send(sid, "maybe sent", "m-1")
    assert told.value.retryable is False
    assert w.agent.prompt_calls == []  # and nothing was sent again


def test_transcript__queued_when_the_session_ended__not_sent_session_ended() -> None:
    w = World()
    sid = w.new_session()
    w.running(sid)
    assert w.send(sid, "behind the turn", "m-q").admission == "queued"
    assert _mine(w, sid, "behind the turn")["queued"] is True

    sessions.cancel_session(w.deps, USER, sid)
    w.pump()
    entry = _mine(w, sid, "behind the turn")
    assert entry["not_sent"] == "session_ended" and "queued" not in entry
