"""The simulated agent against a tiny scripted fake of the backend's agent routes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from scripts.local.ports import free_port
from scripts.local.sim_agent import SimAgent, parse_directives
from tests.support.wait import DEADLINE

TOKEN = "agent-token-1"
PENDING = (200, {"state": "pending"})
ANSWER = {"answers": [{"question_id": "q1", "selected_options": ["a"]}]}
ANSWERED = (200, {"state": "answered", "response": ANSWER, "delivery_id": "d1"})


class FakeBackend:
    """Records every call; clarification wait/confirm/detach answers are scripted per test."""

    def __init__(self, port: int = 0) -> None:
        self.calls: list[dict[str, Any]] = []
        # Scripted failures of the frames route: answer 503 not_ready this many times, or always `frames_status`.
        self.not_ready = 0
        self.frames_status = 200
        self.changed = threading.Condition()
        self.wait_answers: list[tuple[int, dict[str, Any]]] = []
        self.confirm_status = 200
        # When set, a wait call holds until the test releases it (a long-poll in progress).
        self.hold_waits = False
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # queries

    def frames(self) -> list[dict[str, Any]]:
        with self.changed:
            return [f for c in self.calls if c["path"].endswith("/frames") for f in c["body"]["frames"]]

    def paths(self, suffix: str) -> list[dict[str, Any]]:
        with self.changed:
            return [c for c in self.calls if c["path"].endswith(suffix)]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                assert left > 0, f"condition not met; calls so far: {self.calls}"
                self.changed.wait(left)

    def frame_types(self) -> list[str]:
        return [f["type"] for f in self.frames()]

    # serving

    def _record(self, call: dict[str, Any]) -> None:
        with self.changed:
            self.calls.append(call)
            self.changed.notify_all()

    def _answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if path.endswith("/clarifications"):
            return 201, {"clarification_id": "c1", "turn_id": "t1"}
        if path.endswith("/wait"):
            return self._wait_answer(float(query["timeout"][0]))
        if path.endswith("/confirm"):
            return self.confirm_status, {} if self.confirm_status == 200 else {"error": {"code": "conflict"}}
        if path.endswith("/detach"):
            return 200, {"detached_question_ids": ["q1"]}
        if path.endswith("/frames") and self.not_ready > 0:
            self.not_ready -= 1
            return 503, {"error": {"code": "not_ready", "retryable": True}}
        if path.endswith("/frames"):
            return self.frames_status, {}
        return 200, {}

    def _wait_answer(self, timeout: float) -> tuple[int, dict[str, Any]]:
        if self.hold_waits:
            self.release.wait(2.0)
        with self.changed:
            if self.wait_answers:
                return self.wait_answers.pop(0)
        # A real long-poll holds; a short hold keeps the agent from spinning.
        time.sleep(min(timeout, 0.1))
        return PENDING

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake._record(
                    {
                        "method": self.command,
                        "path": parts.path,
                        "auth": self.headers.get("Authorization"),
                        "body": json.loads(raw) if raw else None,
                        "query": parse_qs(parts.query),
                    }
                )
                status, body = fake._answer(parts.path, parse_qs(parts.query))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                fake._record({"method": "SENT", "path": parts.path + "#sent", "body": None})

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    fake = FakeBackend()
    yield fake
    fake.stop()


@pytest.fixture
def agent(backend: FakeBackend) -> Iterator[SimAgent]:
    sim = SimAgent(backend.url, port=0).start()
    yield sim
    sim.stop()


def prompt(sim: SimAgent, text: str, session_id: str = "s1") -> requests.Response:
    body = {
        "session_id": session_id,
        "execution_id": "e1",
        "prompt_generation": 3,
        "turn_id": "t1",
        "text": text,
        "agent_token": TOKEN,
    }
    return requests.post(f"{sim.url}/prompt", json=body, timeout=30)


def settle(sim: SimAgent) -> None:
    assert sim.wait_idle(DEADLINE), "script still running"


def kinds(sim: SimAgent) -> list[str]:
    return [e["kind"] for e in sim.events()]


# ----------------------------------------------------------------------------------------- tests


def test_echo_posts_message_then_turn_completed_with_identity(agent: SimAgent, backend: FakeBackend) -> None:
    resp = prompt(agent, "  hello [unknown] world [think] ")

    assert resp.status_code == 202 and resp.json() == {"accepted": True}
    backend.wait_for(lambda: "turn_completed" in backend.frame_types())
    frames = backend.frames()
    assert [f["type"] for f in frames] == ["thinking", "message", "turn_completed"]
    assert frames[1]["content"] == "Echo: hello [unknown] world"
    for frame in frames:
        assert (frame["execution_id"], frame["prompt_generation"], frame["turn_id"]) == ("e1", 3, "t1")
    assert all(c["auth"] == f"Bearer {TOKEN}" for c in backend.paths("/frames"))
    assert backend.paths("/frames")[0]["path"] == "/api/v1/agent/sessions/s1/frames"


def test_reject_answers_409_and_posts_nothing(agent: SimAgent, backend: FakeBackend) -> None:
    resp = prompt(agent, "[reject] please")

    assert resp.status_code == 409 and resp.json() == {"accepted": False}
    settle(agent)
    assert backend.calls == []
    assert kinds(agent) == ["prompt"]


def test_ask_polls_until_answered_confirms_then_reports(agent: SimAgent, backend: FakeBackend) -> None:
    backend.wait_answers = [PENDING, ANSWERED]

    assert prompt(agent, "[ask] which one?").status_code == 202
    backend.wait_for(lambda: "turn_completed" in backend.frame_types())

    ask = backend.paths("/clarifications")[0]
    assert ask["path"] == "/api/v1/agent/sessions/s1/clarifications"
    assert ask["body"]["turn_id"] == "t1" and [q["question_id"] for q in ask["body"]["questions"]] == ["q1"]
    assert len(backend.paths("/wait")) == 2
    assert backend.paths("/confirm")[0]["body"] == {"delivery_id": "d1"}
    frames = backend.frames()
    assert [f["type"] for f in frames] == ["thinking", "message", "turn_completed"]
    assert frames[1]["content"] == f"Got answer: {json.dumps(ANSWER, sort_keys=True)}"
    settle(agent)
    assert kinds(agent) == [
        "prompt",
        "frame_posted",
        "asked",
        "answer_received",
        "confirmed",
        "frame_posted",
        "frame_posted",
    ]


def test_rejected_answer_reports_skip(agent: SimAgent, backend: FakeBackend) -> None:
    backend.wait_answers = [(200, {"state": "rejected", "response": {"rejected": True}, "delivery_id": "d2"})]

    prompt(agent, "[ask:2]")
    backend.wait_for(lambda: "turn_completed" in backend.frame_types())

    assert len(backend.paths("/clarifications")[0]["body"]["questions"]) == 2
    assert backend.frames()[1]["content"] == "User skipped the question"


def test_confirm_refused_posts_no_message(agent: SimAgent, backend: FakeBackend) -> None:
    backend.wait_answers = [ANSWERED]
    backend.confirm_status = 409

    prompt(agent, "[ask]")
    backend.wait_for(lambda: len(backend.paths("/confirm")) == 1)
    settle(agent)

    assert backend.frame_types() == ["thinking"]
    error = [e for e in agent.events() if e["kind"] == "error"][0]
    assert error["status"] == 409 and error["path"].endswith("/confirm")


def test_inactive_bundle_completes_turn(agent: SimAgent, backend: FakeBackend) -> None:
    backend.wait_answers = [(410, {"state": "inactive", "reason": "superseded"})]

    prompt(agent, "[ask]")
    backend.wait_for(lambda: "turn_completed" in backend.frame_types())

    assert backend.frame_types() == ["thinking", "turn_completed"]
    assert backend.paths("/confirm") == []


def test_wait_budget_runs_out_then_detaches(agent: SimAgent, backend: FakeBackend) -> None:
    prompt(agent, "[ask][wait:1]")
    backend.wait_for(lambda: "turn_completed" in backend.frame_types())

    assert len(backend.paths("/detach")) == 1
    assert all(c["query"]["timeout"] == ["1"] for c in backend.paths("/wait"))
    detach_at = backend.calls.index(backend.paths("/detach")[0])
    completed_at = max(i for i, c in enumerate(backend.calls) if c["path"].endswith("/frames"))
    assert detach_at < completed_at
    assert "detached" in kinds(agent)


def test_disconnect_stops_after_asking(agent: SimAgent, backend: FakeBackend) -> None:
    prompt(agent, "[ask][disconnect]")
    settle(agent)

    assert len(backend.paths("/clarifications")) == 1
    assert backend.paths("/wait") == [] and backend.paths("/detach") == []
    assert backend.frame_types() == ["thinking"]


def test_fail_posts_failed_state_instead_of_message(agent: SimAgent, backend: FakeBackend) -> None:
    prompt(agent, "[fail] boom")
    settle(agent)

    assert backend.frames()[0]["type"] == "state" and backend.frames()[0]["state"] == "FAILED"
    assert backend.frame_types() == ["state"]


def test_cancel_during_poll_acks_and_stops(agent: SimAgent, backend: FakeBackend) -> None:
    backend.hold_waits = True
    backend.wait_answers = [ANSWERED]
    prompt(agent, "[ask]")
    backend.wait_for(lambda: len(backend.paths("/wait")) == 1)

    resp = requests.post(
        f"{agent.url}/cancel",
        timeout=30,
        json={"session_id": "s1", "execution_id": "e1", "prompt_generation": 3, "silent": False},
    )

    assert resp.status_code == 200 and resp.json() == {}
    backend.wait_for(lambda: "cancel_ack" in backend.frame_types())
    settle(agent)
    backend.release.set()
    backend.wait_for(lambda: len(backend.paths("/wait#sent")) == 1)
    # The poll just returned an answer; once its thread is gone, nothing can act on it any more.
    for thread in [t for t in threading.enumerate() if t.name == "poll-s1"]:
        thread.join(DEADLINE)
    assert backend.frame_types() == ["thinking", "cancel_ack"]
    assert backend.paths("/confirm") == []
    ack = backend.frames()[-1]
    assert (ack["execution_id"], ack["prompt_generation"], ack["turn_id"]) == ("e1", 3, "t1")


def test_slow_sleeps_before_first_frame_and_cancel_cuts_it_short(agent: SimAgent, backend: FakeBackend) -> None:
    started = time.monotonic()
    prompt(agent, "[slow:30] zzz")
    requests.post(
        f"{agent.url}/cancel",
        json={"session_id": "s1", "execution_id": "e1", "prompt_generation": 3, "silent": True},
        timeout=30,
    )
    settle(agent)
    backend.wait_for(lambda: "cancel_ack" in backend.frame_types())

    assert backend.frame_types() == ["cancel_ack"]
    assert time.monotonic() - started < 20  # cut short: the script would sleep 30 s


def test_log_health_and_unknown_routes(agent: SimAgent, backend: FakeBackend) -> None:
    prompt(agent, "[hang] anything")

    events = requests.get(f"{agent.url}/log", timeout=30).json()["events"]
    assert events[0]["kind"] == "prompt"
    assert {k: events[0][k] for k in ("session_id", "turn_id", "text", "prompt_generation", "execution_id")} == {
        "session_id": "s1",
        "turn_id": "t1",
        "text": "[hang] anything",
        "prompt_generation": 3,
        "execution_id": "e1",
    }
    assert "at" in events[0]
    assert requests.get(f"{agent.url}/health", timeout=30).json() == {"ok": True, "running": 0}
    missing = requests.get(f"{agent.url}/nope", timeout=30)
    assert missing.status_code == 404 and "error" in missing.json()
    assert requests.post(f"{agent.url}/prompt", data=b"{", timeout=30).status_code == 400
    assert backend.calls == []


def test_backend_error_is_logged_and_server_keeps_serving(backend: FakeBackend) -> None:
    sim = SimAgent("http://127.0.0.1:9", port=0).start()  # nothing listens on the discard port
    try:
        prompt(sim, "hi")
        assert sim.wait_idle(DEADLINE)
        error = [e for e in sim.events() if e["kind"] == "error"][0]
        assert error["status"] is None and error["path"].endswith("/frames")
        assert requests.get(f"{sim.url}/health", timeout=30).status_code == 200
    finally:
        sim.stop()


def test_record_file_holds_each_prompt_before_it_is_acknowledged(backend: FakeBackend, tmp_path: Any) -> None:
    record = tmp_path / "record.jsonl"
    sim = SimAgent(backend.url, port=0, record=str(record)).start()
    try:
        assert prompt(sim, "[hang] keep me").status_code == 202
        lines = [json.loads(line) for line in record.read_text().splitlines()]  # read as soon as acknowledged
        assert lines[0]["kind"] == "prompt" and lines[0]["text"] == "[hang] keep me" and lines[0]["accepted"]
        assert isinstance(lines[0]["instance"], int)
    finally:
        sim.stop()
    again = SimAgent(backend.url, port=0, record=str(record)).start()  # a restarted agent appends
    try:
        prompt(again, "[hang] and me", session_id="s2")
        assert [json.loads(line)["text"] for line in record.read_text().splitlines()] == [
            "[hang] keep me", "[hang] and me"]
    finally:
        again.stop()


def test_steer_is_taken_and_recorded_only_while_a_script_runs(agent: SimAgent, backend: FakeBackend) -> None:
    steer = {"session_id": "s1", "execution_id": "e1", "prompt_generation": 3, "turn_id": "t1",
             "text": "also this", "agent_token": TOKEN}
    assert requests.post(f"{agent.url}/steer", json=steer, timeout=30).status_code == 409  # nothing runs
    prompt(agent, "[slow:60] working")
    assert requests.get(f"{agent.url}/health", timeout=30).json() == {"ok": True, "running": 1}
    assert requests.post(f"{agent.url}/steer", json=steer, timeout=30).status_code == 202
    steers = [(e["text"], e["accepted"]) for e in agent.events() if e["kind"] == "steer"]
    assert steers == [("also this", False), ("also this", True)]


def test_retry_for_waits_out_a_backend_that_is_down_or_not_ready() -> None:
    port = free_port()  # nothing listens there until the backend starts below
    sim = SimAgent(f"http://127.0.0.1:{port}", port=0, retry_for=10.0).start()
    backend = None
    try:
        prompt(sim, "hello")
        time.sleep(0.5)  # refused meanwhile (nothing listens yet); the outcome does not depend on how often
        assert sim.running() == 1 and not [e for e in sim.events() if e["kind"] == "error"]
        backend = FakeBackend(port)
        backend.not_ready = 2  # then restarting: 503 not_ready twice
        assert sim.wait_idle(DEADLINE)
        assert backend.frame_types() == ["message", "message", "message", "turn_completed"]
        assert not [e for e in sim.events() if e["kind"] == "error"]
    finally:
        sim.stop()
        if backend:
            backend.stop()


def test_retry_for_never_repeats_a_call_the_backend_answered(backend: FakeBackend) -> None:
    backend.frames_status = 500
    sim = SimAgent(backend.url, port=0, retry_for=10.0).start()
    try:
        prompt(sim, "hello")
        assert sim.wait_idle(DEADLINE)
        assert len(backend.paths("/frames")) == 1
        assert [e["status"] for e in sim.events() if e["kind"] == "error"] == [500]
    finally:
        sim.stop()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", {"text": "plain", "ask": 0, "wait": 120.0}),
        ("[ask:3][wait:2.5] go", {"text": "go", "ask": 3, "wait": 2.5}),
        ("[SLOW:0.5][think][hang]", {"text": "", "slow": 0.5, "think": True, "hang": True}),
        ("[slow:abc] [ask:0] [x]", {"text": "[slow:abc] [ask:0] [x]", "slow": 0.0, "ask": 0}),
    ],
)
def test_parse_directives(text: str, expected: dict[str, object | None]) -> None:
    directives = parse_directives(text)
    for field, value in expected.items():
        assert getattr(directives, field) == value
