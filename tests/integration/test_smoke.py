"""The foundation over real HTTP against the emulator: message → agent reply → turn events."""
from __future__ import annotations

from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.wait import DEADLINE


def test_message__idle_session__agent_reply_and_turn_events(stack: LocalStack, user: ApiClient,
                                                            sim: SimAgent) -> None:
    task = user.post("/tasks", {"title": "Refactor"}).json()
    session = user.post(f"/tasks/{task['id']}/sessions", {}).json()
    sent = user.post(f"/sessions/{session['id']}/messages", {"client_message_id": "m1", "content": "hello"})
    assert sent.status_code == 201 and sent.json()["admission"] == "sent"
    assert sim.wait_idle(DEADLINE)
    assert stack.pump is not None
    stack.pump.drain()
    messages = user.get(f"/sessions/{session['id']}/transcript").json()["messages"]
    assert [(m["author_type"], m["content"]) for m in messages] == [("user", "hello"), ("agent", "Echo: hello")]
    types = [e["type"] for e in user.get("/events").json()["events"]]
    assert "turn.started" in types and "turn.completed" in types
    assert types.index("turn.started") < types.index("turn.completed")
