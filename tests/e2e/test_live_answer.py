"""End to end over HTTP with the simulated agent playing its scripts.

`[ask:N]` makes the agent ask N questions and long-poll for the answer, confirm it and report it;
`[wait:S]` gives up after S seconds and detaches. The tests only talk to the API like a client would, and
wait on conditions (the agent going idle, a transcript state), never on a clock.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import requests

from chalicelib import bootstrap
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.wait import DEADLINE, eventually

T = TypeVar("T")


class Client:
    def __init__(self, stack: LocalStack, sim: SimAgent, user: ApiClient) -> None:
        self.stack, self.sim, self.user = stack, sim, user

    def start(self, prompt: str) -> str:
        task = self.user.post("/tasks", {"title": "Plan"}).json()["id"]
        resp = self.user.post(f"/tasks/{task}/sessions", {"prompt": prompt})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def transcript(self, sid: str) -> dict[str, Any]:
        resp = self.user.get(f"/sessions/{sid}/transcript")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def question(self, sid: str, state: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            found = [m for m in self.transcript(sid)["messages"] if m["type"] == "clarification"]
            return found[0] if found and found[0]["state"] == state else None
        return eventually(probe, what=f"a clarification in state {state}")

    def respond(self, cid: str, body: dict[str, Any]) -> requests.Response:
        return self.user.post(f"/clarifications/{cid}/respond", body)

    def session(self, sid: str) -> dict[str, Any]:
        return dict(self.user.get(f"/sessions/{sid}").json())

    def log(self, sid: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.sim.events() if e.get("session_id") == sid and (kind is None or e["kind"] == kind)]

    def posted(self, sid: str) -> list[tuple[str, str]]:
        """(frame type, content) of every frame the agent posted, in order."""
        return [(e["frame"]["type"], e["frame"].get("content", "")) for e in self.log(sid, "frame_posted")]


def both_questions(first: str = "a", second: str = "b", note: str = "") -> dict[str, Any]:
    return {"answers": [{"question_id": "q1", "selected_options": [first]},
                        {"question_id": "q2", "selected_options": [second], "custom_text": note}]}


def test_ask__answered_while_the_agent_waits__delivered_live_confirmed_and_the_agent_continues(
        stack: LocalStack, sim: SimAgent, user: ApiClient) -> None:
    c = Client(stack, sim, user)
    sid = c.start("[ask:2] plan the migration")
    entry = c.question(sid, "active_live")
    cid = entry["clarification_id"]

    resp = c.respond(cid, both_questions("a", "b", "keep it small"))

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"clarification_id": cid, "status": "answered", "delivery": "live"}
    assert sim.wait_idle(DEADLINE)
    kinds = [e["kind"] for e in c.log(sid) if e["kind"] in ("asked", "answer_received", "confirmed")]
    assert kinds == ["asked", "answer_received", "confirmed"]
    received = c.log(sid, "answer_received")[0]
    assert received["state"] == "answered" and received["response"]["answers"] == [
        {"question_id": "q1", "selected_options": ["a"], "custom_text": ""},
        {"question_id": "q2", "selected_options": ["b"], "custom_text": "keep it small"}]
    posted = c.posted(sid)
    assert [t for t, _ in posted] == ["thinking", "message", "turn_completed"]
    assert posted[1][1].startswith("Got answer:") and "keep it small" in posted[1][1]
    assert len(c.log(sid, "prompt")) == 1  # live: the agent was never prompted again

    assert stack.pump is not None
    stack.pump.drain()
    messages = c.transcript(sid)["messages"]
    assert [(m["type"], m.get("author_type")) for m in messages] == [
        ("message", "user"), ("thinking", "agent"), ("clarification", None), ("message", "agent")]
    final = messages[2]
    assert final["state"] == "answered" and final["answerable"] is False
    assert [q["status"] for q in final["questions"]] == ["answered", "answered"]
    assert messages[3]["turn_id"] == final["turn_id"]  # the agent continued in the same turn
    view = c.session(sid)
    assert view["state"] == "IDLE" and view["pending_action"] is None
    session = bootstrap.deps().store.get_session(sid)
    assert session is not None and session.watchdog is None  # its output counted as activity


def test_ask__skipped_while_the_agent_waits__rejection_delivered_live_and_the_agent_continues(
        stack: LocalStack, sim: SimAgent, user: ApiClient) -> None:
    c = Client(stack, sim, user)
    sid = c.start("[ask] plan the migration")
    cid = c.question(sid, "active_live")["clarification_id"]

    resp = c.respond(cid, {"rejected": True})

    assert resp.status_code == 200 and resp.json()["delivery"] == "live", resp.text
    assert sim.wait_idle(DEADLINE)
    assert c.log(sid, "answer_received")[0]["state"] == "rejected"
    assert ("message", "User skipped the question") in c.posted(sid)
    assert len(c.log(sid, "prompt")) == 1


def test_ask__agent_gives_up_waiting_then_the_user_answers__agent_resumed_exactly_once(
        stack: LocalStack, sim: SimAgent, user: ApiClient) -> None:
    c = Client(stack, sim, user)
    sid = c.start("[ask][wait:1] plan the migration")
    assert sim.wait_idle(DEADLINE)  # the agent asked, waited a second, detached and ended its turn
    entry = c.question(sid, "active_detached")
    cid, asked_in = entry["clarification_id"], entry["turn_id"]
    assert entry["agent_disconnected"] is True and entry["answerable"] is True
    assert [e["kind"] for e in c.log(sid) if e["kind"] in ("asked", "detached")] == ["asked", "detached"]

    resp = c.respond(cid, {"answers": [{"question_id": "q1", "selected_options": ["b"]}]})

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"clarification_id": cid, "status": "answered", "delivery": "resumed"}
    assert sim.wait_idle(DEADLINE)
    prompts = c.log(sid, "prompt")
    assert len(prompts) == 2
    assert "Pick an option for question 1" in prompts[1]["text"] and "Option B" in prompts[1]["text"]
    resumed_turn = prompts[1]["turn_id"]
    assert resumed_turn not in (None, asked_in)
    assert c.posted(sid)[-2:] == [("message", f"Echo: {prompts[1]['text']}"), ("turn_completed", "")]

    again = c.respond(cid, {"answers": [{"question_id": "q1", "selected_options": ["b"]}]})

    assert again.status_code == 409 and again.json()["error"]["details"]["reason"] == "answered", again.text
    assert len(c.log(sid, "prompt")) == 2  # exactly one resume
    assert stack.pump is not None
    stack.pump.drain()
    transcript = c.transcript(sid)
    assert transcript["current_turn_id"] == resumed_turn
    final = next(m for m in transcript["messages"] if m.get("clarification_id") == cid)
    assert final["state"] == "answered" and final["questions"][0]["response"]["selected_options"] == ["b"]
    echo = [m for m in transcript["messages"] if m.get("author_type") == "agent" and m["type"] == "message"]
    assert [m["turn_id"] for m in echo] == [resumed_turn]
    turns = user.get(f"/sessions/{sid}/turns").json()["turns"]
    assert [t["id"] for t in turns] == [asked_in, resumed_turn] and all(t["completed_at"] for t in turns)


@contextmanager
def confirm_wait(seconds: float) -> Iterator[None]:
    real = bootstrap.deps()
    bootstrap.override(dataclasses.replace(real, settings=dataclasses.replace(real.settings, confirm_wait=seconds)))
    try:
        yield
    finally:
        bootstrap.override(real)


def test_ask_and_never_wait__answered__one_resume_turn_and_200(stack: LocalStack, sim: SimAgent,
                                                               user: ApiClient) -> None:
    """The agent asks and dies before its first wait: the answer is not stranded; the same request resumes
    the agent exactly once."""
    c = Client(stack, sim, user)
    sid = c.start("[nowait] plan the migration")
    cid = c.question(sid, "active_live")["clarification_id"]  # within the ask's lease: it still looks live
    assert sim.wait_idle(DEADLINE)

    with confirm_wait(1.0):
        resp = c.respond(cid, {"answers": [{"question_id": "q1", "selected_options": ["b"]}]})

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"clarification_id": cid, "status": "answered", "delivery": "resumed"}
    prompts = c.log(sid, "prompt")
    assert len(prompts) == 2 and "You previously asked the user" in prompts[1]["text"]  # one resume, once
    assert sim.wait_idle(DEADLINE)
    assert c.posted(sid)[-2][0] == "message" and c.posted(sid)[-1][0] == "turn_completed"  # it carried on
    assert c.session(sid)["state"] == "IDLE"


def test_ask_and_never_wait__skipped__recorded_and_no_resume(stack: LocalStack, sim: SimAgent,
                                                              user: ApiClient) -> None:
    c = Client(stack, sim, user)
    sid = c.start("[nowait] plan the migration")
    cid = c.question(sid, "active_live")["clarification_id"]
    assert sim.wait_idle(DEADLINE)

    with confirm_wait(1.0):
        resp = c.respond(cid, {"rejected": True})

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"clarification_id": cid, "status": "rejected", "delivery": "recorded"}
    assert len(c.log(sid, "prompt")) == 1  # nothing resumed
    assert c.question(sid, "rejected")["answerable"] is False
