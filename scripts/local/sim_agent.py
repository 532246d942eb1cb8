"""Simulated agent runtime ("agentctl") for local development and tests.

The backend dispatches prompts and cancels to this service; it answers like agentctl and then plays a
script, chosen by bracket tags in the prompt text, against the backend's agent routes:

    [reject]     answer 409 and do nothing else
    [hang]       answer 202 and never post anything
    [slow:N]     sleep N seconds before the first frame
    [think]      post a thinking frame before the message
    [ask] [ask:N]  ask a bundle of N questions (default 1), wait for the answer, confirm it, report it
    [wait:S]     wait budget for [ask] (default 120 s); when it runs out the agent detaches
    [disconnect] after asking, vanish without detaching
    [nowait]     ask and never wait, as an agent that dies before its first wait (the ask's lease lapses)
    [fail]       post a FAILED state frame instead of the final message

A steer (POST /steer) is accepted while a script runs for the session and only recorded. With --record
every event (each prompt and steer before it is acknowledged) is appended to a file as a JSON line, so the
record of what the agent received outlives a kill -9 of this process.

Run:  python -m scripts.local.sim_agent --api http://127.0.0.1:8000 --port 8001
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests

from scripts.local.fence import CancelFence

Event = dict[str, Any]
JsonBody = dict[str, Any]
T = TypeVar("T")

DEFAULT_WAIT_BUDGET = 120.0
MAX_POLL_SECONDS = 25
REQUEST_TIMEOUT = 30.0  # generous: a loaded machine (a load run, the suite's workers) answers slowly, not never
POLL_TIMEOUT_MARGIN = 10.0
# How often a script blocked in a long-poll notices that it was cancelled.
ABORT_CHECK_INTERVAL = 0.05
RETRY_INTERVAL = 0.2


# --------------------------------------------------------------------------------------------- log


class EventLog:
    """Append-only, thread-safe record of everything the simulated agent received and did."""

    def __init__(self, sink: Callable[[Event], None] | None = None, record: str | None = None) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._sink = sink
        self._record = open(record, "a", encoding="utf-8") if record else None
        self._instance = os.getpid()

    def add(self, kind: str, **details: Any) -> Event:
        event: Event = {"kind": kind, **details, "at": datetime.now(UTC).isoformat()}
        with self._lock:
            self._events.append(event)
            if self._record is not None:
                # Written through to the OS before the caller answers: a kill -9 cannot lose it.
                self._record.write(json.dumps({**event, "instance": self._instance}, default=str) + "\n")
                self._record.flush()
        if self._sink is not None:
            self._sink(event)
        return event

    def events(self) -> list[Event]:
        with self._lock:
            return [dict(event) for event in self._events]

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


# ------------------------------------------------------------------------------------- directives


@dataclass(frozen=True)
class Directives:
    text: str
    reject: bool = False
    hang: bool = False
    slow: float = 0.0
    think: bool = False
    ask: int = 0
    wait: float = DEFAULT_WAIT_BUDGET
    disconnect: bool = False
    fail: bool = False


_TAG = re.compile(r"\[([A-Za-z_]+)(?::([^\[\]]*))?\]")
_FLAG_TAGS = frozenset({"reject", "hang", "think", "disconnect", "nowait", "fail"})


def parse_directives(text: str) -> Directives:
    """Extract the script tags; tags that are unknown or malformed stay in the text as the user wrote them."""
    found: dict[str, Any] = {}

    def take(match: re.Match[str]) -> str:
        name, arg = match.group(1).lower(), match.group(2)
        value = _tag_value(name, arg)
        if value is None:
            return match.group(0)
        found[name] = value
        return ""

    clean = _TAG.sub(take, text).strip()
    if found.pop("nowait", False):  # another name for the same script: ask, then never wait
        found["disconnect"] = True
        found.setdefault("ask", 1)
    return Directives(text=clean, **found)


def _tag_value(name: str, arg: str | None) -> Any:
    if name in _FLAG_TAGS:
        return True if arg is None else None
    if name == "ask":
        # Counts outside 1..4 pass through on purpose so the backend's validation can be exercised.
        return 1 if arg is None else _positive_int(arg)
    if name in ("slow", "wait"):
        return _seconds(arg)
    return None


def _positive_int(arg: str) -> int | None:
    try:
        value = int(arg.strip())
    except ValueError:
        return None
    return value if value >= 1 else None


def _seconds(arg: str | None) -> float | None:
    if arg is None:
        return None
    try:
        value = float(arg.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


# ---------------------------------------------------------------------------------------- prompts


@dataclass(frozen=True)
class Prompt:
    session_id: str
    execution_id: Any
    prompt_generation: Any
    turn_id: str | None
    text: str
    agent_token: str | None

    @classmethod
    def from_body(cls, body: JsonBody) -> Prompt:
        for field in ("session_id", "execution_id", "prompt_generation", "text"):
            if body.get(field) is None:
                raise ValueError(field)
        if not isinstance(body["session_id"], str):
            raise ValueError("session_id")
        if not isinstance(body["text"], str):
            raise ValueError("text")
        if not isinstance(body["prompt_generation"], int) or isinstance(body["prompt_generation"], bool):
            raise ValueError("prompt_generation")
        return cls(
            session_id=body["session_id"],
            execution_id=body["execution_id"],
            prompt_generation=body["prompt_generation"],
            turn_id=body.get("turn_id"),
            text=body["text"],
            agent_token=body.get("agent_token"),
        )


def sample_questions(count: int) -> list[JsonBody]:
    return [
        {
            "question_id": f"q{n}",
            "title": f"Question {n}",
            "prompt": f"Pick an option for question {n}",
            "options": [
                {"option_id": "a", "label": "Option A"},
                {"option_id": "b", "label": "Option B"},
            ],
        }
        for n in range(1, count + 1)
    ]


# ---------------------------------------------------------------------------------------- backend


class BackendError(Exception):
    def __init__(self, path: str, status: int | None, body: Any) -> None:
        super().__init__(f"{path}: {status} {body}")
        self.path = path
        self.status = status
        self.body = body


class ScriptStopped(Exception):
    """Raised inside a script to end it: it was cancelled, or the backend refused a step."""


class Backend:
    """Calls the backend's agent routes with one session's agent token.

    With `retry_for` > 0 a call is repeated for that long while the backend certainly did not take it
    (connection refused, or 503 not_ready while it restarts); anything else is never repeated.
    """

    def __init__(self, api_url: str, token: str | None, retry_for: float = 0.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.retry_for = retry_for

    def call(
        self,
        method: str,
        path: str,
        *,
        expect: tuple[int, ...] = (200,),
        body: JsonBody | None = None,
        params: dict[str, Any] | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        deadline = time.monotonic() + self.retry_for
        while True:
            try:
                resp = requests.request(
                    method, self.api_url + path, json=body, params=params, headers=headers, timeout=timeout
                )
            except requests.ConnectionError as exc:
                if _refused(exc) and time.monotonic() < deadline:
                    time.sleep(RETRY_INTERVAL)
                    continue
                raise BackendError(path, None, str(exc)) from exc
            except requests.RequestException as exc:
                raise BackendError(path, None, str(exc)) from exc
            if resp.status_code == 503 and _code(resp) == "not_ready" and time.monotonic() < deadline:
                time.sleep(RETRY_INTERVAL)
                continue
            break
        if resp.status_code not in expect:
            raise BackendError(path, resp.status_code, response_body(resp))
        return resp

    def post_frames(self, session_id: str, frames: list[JsonBody]) -> None:
        self.call("POST", f"/api/v1/agent/sessions/{session_id}/frames", body={"frames": frames})


def response_body(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return resp.text


def _refused(exc: requests.ConnectionError) -> bool:
    """Nothing was sent: the connection itself was refused (the backend is not listening)."""
    return "Connection refused" in str(exc)  # urllib3 wraps the ConnectionRefusedError in its message


def _code(resp: requests.Response) -> str | None:
    body = response_body(resp)
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code")) if isinstance(error, dict) else None


# ---------------------------------------------------------------------------------------- scripts


class ScriptRun:
    """One prompt's script, played in its own daemon thread until it ends or is stopped."""

    def __init__(
        self,
        prompt: Prompt,
        directives: Directives,
        backend: Backend,
        log: EventLog,
        on_done: Callable[[ScriptRun], None],
    ) -> None:
        self.prompt = prompt
        self.directives = directives
        self.turn_id = prompt.turn_id
        self._backend = backend
        self._log = log
        self._on_done = on_done
        self._stopped = threading.Event()
        # Held while a frame is in flight, so a cancel_ack is never overtaken by a script frame.
        self.post_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"script-{prompt.session_id}")

    @property
    def session_id(self) -> str:
        return self.prompt.session_id

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._sleep(self.directives.slow)
            if self.directives.ask:
                self._ask_flow()
            else:
                self._echo_flow()
        except ScriptStopped:
            pass
        except BackendError as exc:
            self._log_error(exc)
        except Exception as exc:  # a script bug must never take the service down
            self._log.add("error", session_id=self.session_id, status=None, body=repr(exc))
        finally:
            self._on_done(self)

    # flows

    def _echo_flow(self) -> None:
        if self.directives.think:
            self._frame("thinking", content="Thinking...")
        self._finish(f"Echo: {self.directives.text}")

    def _ask_flow(self) -> None:
        self._frame("thinking", content="I need to ask something first.")
        cid = self._ask()
        if self.directives.disconnect:
            return
        outcome = self._await_answer(cid)
        if outcome is None or outcome["state"] == "inactive":
            self._frame("turn_completed")
            return
        self._confirm(cid, outcome["delivery_id"])
        self._finish(_answer_text(outcome))

    def _finish(self, content: str) -> None:
        if self.directives.fail:
            self._frame("state", state="FAILED")
            return
        self._frame("message", content=content)
        self._frame("turn_completed")

    # steps

    def _ask(self) -> str:
        body: JsonBody = {"questions": sample_questions(self.directives.ask)}
        if self.turn_id is not None:
            body["turn_id"] = self.turn_id
        resp = self._call("POST", f"/api/v1/agent/sessions/{self.session_id}/clarifications", body=body, expect=(201,))
        answer = response_body(resp)
        cid = str(answer["clarification_id"])
        # Asking with no open turn starts one; later frames belong to that turn.
        self.turn_id = answer.get("turn_id") or self.turn_id
        self._log.add(
            "asked",
            session_id=self.session_id,
            clarification_id=cid,
            turn_id=self.turn_id,
            questions=self.directives.ask,
            disconnect=self.directives.disconnect,
        )
        return cid

    def _await_answer(self, cid: str) -> JsonBody | None:
        """Long-poll until an outcome arrives; None when the budget ran out and the agent detached."""
        deadline = time.monotonic() + self.directives.wait
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._detach(cid)
                return None
            outcome = self._poll(cid, remaining)
            if outcome["state"] != "pending":
                return outcome

    def _poll(self, cid: str, remaining: float) -> JsonBody:
        seconds = max(1, math.ceil(min(remaining, MAX_POLL_SECONDS)))
        resp = self._call(
            "GET",
            f"/api/v1/agent/clarifications/{cid}/wait",
            params={"timeout": seconds},
            expect=(200, 410),
            timeout=seconds + POLL_TIMEOUT_MARGIN,
            abortable=True,
        )
        body = response_body(resp)
        outcome = _outcome(resp.status_code, body)
        if outcome is None:
            raise BackendError(f"/api/v1/agent/clarifications/{cid}/wait", resp.status_code, body)
        if outcome["state"] != "pending":
            self._log.add("answer_received", session_id=self.session_id, clarification_id=cid, **outcome)
        return outcome

    def _confirm(self, cid: str, delivery_id: str) -> None:
        self._call("POST", f"/api/v1/agent/clarifications/{cid}/confirm", body={"delivery_id": delivery_id})
        self._log.add("confirmed", session_id=self.session_id, clarification_id=cid, delivery_id=delivery_id)

    def _detach(self, cid: str) -> None:
        resp = self._call("POST", f"/api/v1/agent/clarifications/{cid}/detach", body={})
        self._log.add("detached", session_id=self.session_id, clarification_id=cid, response=response_body(resp))

    def _frame(self, frame_type: str, **extra: Any) -> None:
        frame: JsonBody = {
            "type": frame_type,
            "execution_id": self.prompt.execution_id,
            "prompt_generation": self.prompt.prompt_generation,
            "turn_id": self.turn_id,
            **extra,
        }
        with self.post_lock:
            self._check()
            self._backend.post_frames(self.session_id, [frame])
            self._log.add("frame_posted", session_id=self.session_id, frame=frame)

    # plumbing

    def _call(self, method: str, path: str, *, abortable: bool = False, **kwargs: Any) -> requests.Response:
        self._check()

        def call() -> requests.Response:
            return self._backend.call(method, path, **kwargs)

        resp = self._abortable(call) if abortable else call()
        self._check()
        return resp

    def _abortable(self, fn: Callable[[], T]) -> T:
        """Run a blocking call elsewhere so a cancel ends the script now, not when a long-poll returns."""
        future: Future[T] = Future()

        def target() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=target, daemon=True, name=f"poll-{self.session_id}").start()
        while not future.done():
            if self._stopped.wait(ABORT_CHECK_INTERVAL):
                raise ScriptStopped()
        return future.result()

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 and self._stopped.wait(seconds):
            raise ScriptStopped()

    def _check(self) -> None:
        if self._stopped.is_set():
            raise ScriptStopped()

    def _log_error(self, exc: BackendError) -> None:
        self._log.add("error", session_id=self.session_id, path=exc.path, status=exc.status, body=exc.body)


def _outcome(status: int, body: Any) -> JsonBody | None:
    """Normalise a wait answer; None when it does not fit the contract."""
    if not isinstance(body, dict):
        return None
    if status == 410:
        return {"state": "inactive", "reason": body.get("reason")}
    state = body.get("state")
    if state == "pending":
        return {"state": "pending"}
    if state in ("answered", "rejected") and body.get("delivery_id"):
        return {"state": state, "response": body.get("response"), "delivery_id": body["delivery_id"]}
    return None


def _answer_text(outcome: JsonBody) -> str:
    if outcome["state"] == "rejected":
        return "User skipped the question"
    return f"Got answer: {json.dumps(outcome['response'], sort_keys=True)}"


# ---------------------------------------------------------------------------------------- service


@dataclass
class Reply:
    status: int
    body: JsonBody
    # Work that must start only once the response is on the wire (the backend finalises on our answer).
    after: Callable[[], None] | None = None


class SimAgent:
    """HTTP service that plays agentctl for the Clarify backend at api_url."""

    def __init__(
        self,
        api_url: str,
        host: str = "127.0.0.1",
        port: int = 8001,
        on_event: Callable[[Event], None] | None = None,
        record: str | None = None,
        retry_for: float = 0.0,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.host = host
        self._requested_port = port
        self.log = EventLog(on_event, record)
        self.retry_for = retry_for
        self._cond = threading.Condition()
        self._runs: dict[str, list[ScriptRun]] = {}
        self._launching = 0  # prompts accepted whose script starts once the acceptance is on the wire
        # A prompt or steer whose generation a cancel already covered is refused (the cancel overtook it).
        self._fence = CancelFence()
        self._last_prompt: dict[str, Prompt] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server else self._requested_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def events(self) -> list[Event]:
        return self.log.events()

    # lifecycle

    def start(self) -> SimAgent:
        server = ThreadingHTTPServer((self.host, self._requested_port), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True, name="sim-agent-http"
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._cond:
            runs = [run for session_runs in self._runs.values() for run in session_runs]
        for run in runs:
            run.stop()
        deadline = time.monotonic() + timeout
        for run in runs:
            run.join(max(0.0, deadline - time.monotonic()))

    def wait_idle(self, timeout: float) -> bool:
        """True once no script is running (used by tests to wait on a condition, not a clock)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._runs and not self._launching, timeout)

    # routes

    def route(self, method: str, path: str) -> Callable[[JsonBody], Reply] | None:
        routes: dict[tuple[str, str], Callable[[JsonBody], Reply]] = {
            ("POST", "/prompt"): self._on_prompt,
            ("POST", "/cancel"): self._on_cancel,
            ("POST", "/steer"): self._on_steer,
            ("GET", "/health"): lambda _body: Reply(200, {"ok": True, "running": self.running()}),
            ("GET", "/log"): lambda _body: Reply(200, {"events": self.events()}),
        }
        return routes.get((method, path))

    def _on_prompt(self, body: JsonBody) -> Reply:
        prompt = Prompt.from_body(body)
        directives = parse_directives(prompt.text)
        fenced = not self._fence.admits(prompt.session_id, prompt.prompt_generation)
        self.log.add(
            "prompt",
            session_id=prompt.session_id,
            execution_id=prompt.execution_id,
            prompt_generation=prompt.prompt_generation,
            turn_id=prompt.turn_id,
            text=prompt.text,
            accepted=not (directives.reject or fenced),
        )
        if directives.reject or fenced:
            return Reply(409, {"accepted": False})
        with self._cond:
            self._last_prompt[prompt.session_id] = prompt
            if directives.hang:
                return Reply(202, {"accepted": True})
            self._launching += 1
        return Reply(202, {"accepted": True}, after=lambda: self._launch(prompt, directives))

    def running(self) -> int:
        with self._cond:
            return sum(len(runs) for runs in self._runs.values()) + self._launching

    def _on_steer(self, body: JsonBody) -> Reply:
        """A message injected into the running turn: taken (and recorded) only while a script runs."""
        prompt = Prompt.from_body(body)
        with self._cond:
            accepted = bool(self._runs.get(prompt.session_id))
        accepted = accepted and self._fence.admits(prompt.session_id, prompt.prompt_generation)
        self.log.add("steer", session_id=prompt.session_id, turn_id=prompt.turn_id, text=prompt.text,
                     accepted=accepted)
        return Reply(202 if accepted else 409, {"accepted": accepted})

    def _on_cancel(self, body: JsonBody) -> Reply:
        session_id = body.get("session_id")
        if not isinstance(session_id, str):
            raise ValueError("session_id")
        if not self._fence.cancel(session_id, body.get("prompt_generation")):
            raise ValueError("prompt_generation")
        self.log.add(
            "cancel",
            session_id=session_id,
            execution_id=body.get("execution_id"),
            prompt_generation=body.get("prompt_generation"),
            silent=body.get("silent"),
        )
        return Reply(200, {}, after=lambda: self._cancel(session_id, body))

    # scripts

    def _launch(self, prompt: Prompt, directives: Directives) -> None:
        backend = Backend(self.api_url, prompt.agent_token, self.retry_for)
        run = ScriptRun(prompt, directives, backend, self.log, self._finished)
        with self._cond:
            self._runs.setdefault(prompt.session_id, []).append(run)
            self._launching -= 1
            self._cond.notify_all()
        run.start()

    def _finished(self, run: ScriptRun) -> None:
        with self._cond:
            session_runs = self._runs.get(run.session_id, [])
            if run in session_runs:
                session_runs.remove(run)
            if not session_runs:
                self._runs.pop(run.session_id, None)
            self._cond.notify_all()

    def _cancel(self, session_id: str, body: JsonBody) -> None:
        with self._cond:
            runs = list(self._runs.get(session_id, []))
            last = self._last_prompt.get(session_id)
        for run in runs:
            run.stop()
        turn_id = runs[-1].turn_id if runs else (last.turn_id if last else None)
        frame: JsonBody = {
            "type": "cancel_ack",
            "execution_id": body.get("execution_id"),
            "prompt_generation": body.get("prompt_generation"),
            "turn_id": turn_id,
        }
        self._post_ack(session_id, last.agent_token if last else None, frame, runs)

    def _post_ack(self, session_id: str, token: str | None, frame: JsonBody, runs: list[ScriptRun]) -> None:
        if token is None:
            self.log.add("error", session_id=session_id, status=None, body="no agent token known for session")
            return
        # Taking every stopped run's post lock waits out a frame already in flight, so the ack comes last.
        for run in runs:
            run.post_lock.acquire()
        try:
            Backend(self.api_url, token, self.retry_for).post_frames(session_id, [frame])
            self.log.add("frame_posted", session_id=session_id, frame=frame)
        except BackendError as exc:
            self.log.add("error", session_id=session_id, path=exc.path, status=exc.status, body=exc.body)
        finally:
            for run in runs:
                run.post_lock.release()


# ------------------------------------------------------------------------------------------- http


def _handler_for(agent: SimAgent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "SimAgent/1"

        def _dispatch(self) -> None:
            handler = agent.route(self.command, urlsplit(self.path).path)
            if handler is None:
                agent.log.add("error", status=404, body=f"no route {self.command} {self.path}")
                self._send(Reply(404, {"error": {"code": "not_found", "message": "no such route"}}))
                return
            try:
                reply = handler(self._read_json())
            except ValueError as exc:
                agent.log.add("error", status=400, body=f"refused a malformed {self.path} request: {exc}")
                reply = Reply(
                    400,
                    {"error": {"code": "validation_error", "message": "bad request", "details": {"field": str(exc)}}},
                )
            except Exception as exc:  # keep serving whatever a handler does
                agent.log.add("error", status=500, body=repr(exc))
                reply = Reply(500, {"error": {"code": "internal", "message": repr(exc)}})
            try:
                self._send(reply)
            finally:  # the backend may have it even if the answer did not arrive: play it anyway
                if reply.after is not None:
                    reply.after()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

        def _read_json(self) -> JsonBody:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw.strip():
                return {}
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError("body") from exc
            if not isinstance(body, dict):
                raise ValueError("body")
            return body

        def _send(self, reply: Reply) -> None:
            data = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the event log is the record; per-request access lines are noise

    return Handler


# -------------------------------------------------------------------------------------------- cli


def _print_event(event: Event) -> None:
    print(json.dumps(event, default=str), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Simulated agent runtime (agentctl) for Clarify.")
    parser.add_argument("--api", default="http://127.0.0.1:8000", help="backend base URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--quiet", action="store_true", help="do not echo events to stderr")
    parser.add_argument("--record", help="append every event to this file (JSON lines), kill-safe")
    parser.add_argument("--retry-for", type=float, default=0.0,
                        help="seconds to repeat a call the backend refused or answered 503 not_ready")
    args = parser.parse_args(argv)

    agent = SimAgent(args.api, host=args.host, port=args.port, on_event=None if args.quiet else _print_event,
                     record=args.record, retry_for=args.retry_for).start()
    print(f"sim agent on {agent.url}", flush=True)

    done = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not done.wait(0.5):
        pass
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
