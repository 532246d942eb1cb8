"""One workspace of the running stack, driven over HTTP from both sides (user routes and agent routes), plus
reads of what is stored. Every HTTP integration and e2e suite uses this one flow."""
from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import requests

from chalicelib import bootstrap
from chalicelib.agentctl.client import CancelRequest, PromptOutcome, PromptRequest
from chalicelib.domain import clarify
from chalicelib.domain.model import Event
from chalicelib.functions import reconciler
from chalicelib.services.deps import Settings
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack, make_pump
from tests.support.stored import StoredState

QUESTIONS: list[dict[str, Any]] = [
    {"question_id": "q1", "title": "Database", "prompt": "Which database?",
     "options": [{"option_id": "pg", "label": "Postgres"}, {"option_id": "my", "label": "MySQL"}]},
    {"question_id": "q2", "title": "Cache", "prompt": "Which cache?",
     "options": [{"option_id": "redis", "label": "Redis"}, {"option_id": "none", "label": "No cache"}]},
]
ONE_QUESTION = QUESTIONS[:1]
SKIP: dict[str, Any] = {"rejected": True, "reject_reason": "not now"}
_ids = itertools.count(1)


def answer(db: str = "pg", cache: str = "redis", note: str = "[hang] A") -> dict[str, Any]:
    return {"answers": [{"question_id": "q1", "selected_options": [db]},
                        {"question_id": "q2", "selected_options": [cache], "custom_text": note}]}


ANSWER = answer()


def error(resp: requests.Response) -> dict[str, Any]:
    body = resp.json()
    assert "error" in body, body
    return dict(body["error"])


def in_thread(fn: Callable[[], requests.Response]) -> Future[requests.Response]:
    """Run one request in the background (a responder waiting on its answer while the test plays the agent)."""
    future: Future[requests.Response] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # surfaced by future.result()
            future.set_exception(exc)
    threading.Thread(target=run, daemon=True).start()
    return future


def session_of(cid: str) -> str:
    sid = clarify.session_of(cid)
    assert sid is not None
    return sid


class ApiClient:
    """A thin HTTP client bound to one bearer token."""

    def __init__(self, base: str, token: str | None) -> None:
        self.base, self.token = base + "/api/v1", token

    def call(self, method: str, path: str, json: Any = None, **kw: Any) -> requests.Response:
        headers = dict(kw.pop("headers", {}))
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return requests.request(method, self.base + path, json=json, headers=headers, timeout=60, **kw)

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.call("GET", path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> requests.Response:
        return self.call("POST", path, json=json, **kw)


@dataclass
class SteeringAgentctl:
    """The real agentctl client, plus a runtime that can steer a running turn (the simulated one cannot)."""

    inner: Any
    steered: list[PromptRequest] = field(default_factory=list)

    def prompt(self, request: PromptRequest) -> PromptOutcome:
        return self.inner.prompt(request)  # type: ignore[no-any-return]

    def cancel(self, request: CancelRequest) -> None:
        self.inner.cancel(request)

    def steer(self, request: PromptRequest) -> bool:
        self.steered.append(request)
        return True


class Flow(StoredState):
    """One workspace of the running stack. `questions` is what `ask` asks unless told otherwise."""

    def __init__(self, stack: LocalStack, sim: SimAgent | None, workspace: str,
                 questions: list[dict[str, Any]] | None = None) -> None:
        self.stack, self.sim, self.workspace = stack, sim, workspace
        self.questions = questions or QUESTIONS
        self.user = ApiClient(stack.url, stack.user_token(workspace=workspace))

    # ------------------------------------------------------------------ plumbing
    def drain(self) -> None:
        """Run the stream functions over everything written so far. A fresh pump per drain, resuming from the
        stored checkpoints: a long-lived pump keeps shard iterators a cancelled transaction orphans."""
        self.stack.pump = make_pump(self.stack.endpoint)
        self.stack.pump.drain()

    def agent(self, session_id: str) -> ApiClient:
        return ApiClient(self.stack.url, self.stack.agent_token(session_id, workspace=self.workspace))

    def other_user(self) -> ApiClient:
        """The same workspace, another user (another person, or the same person's second account)."""
        return ApiClient(self.stack.url, self.stack.user_token(workspace=self.workspace, sub="user-2"))

    # ------------------------------------------------------------------ user side
    def task(self, title: str = "Refactor") -> str:
        resp = self.user.post("/tasks", {"title": title})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def session(self, task_id: str | None = None, prompt: str | None = "[hang] start", **extra: Any) -> str:
        """A session; with a prompt its first turn is open (RUNNING) and the agent stays silent."""
        body: dict[str, Any] = dict(extra)
        if prompt is not None:
            body["prompt"] = prompt
        resp = self.user.post(f"/tasks/{task_id or self.task()}/sessions", body)
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def idle_session(self) -> str:
        sid = self.session(prompt=None)
        assert self.view(sid)["state"] == "IDLE"
        return sid

    def post(self, session_id: str, content: str | None = "[hang] hello", *, cmid: str | None = None,
             **extra: Any) -> requests.Response:
        """POST a message as given (the test reads the answer)."""
        body: dict[str, Any] = {"client_message_id": cmid or f"c-{next(_ids)}", **extra}
        if content is not None:
            body["content"] = content
        return self.user.post(f"/sessions/{session_id}/messages", body)

    def send(self, session_id: str, content: str = "[hang] newer work", client_message_id: str | None = None,
             ) -> dict[str, Any]:
        """A user message that must be admitted."""
        resp = self.post(session_id, content, cmid=client_message_id)
        assert resp.status_code == 201, resp.text
        return dict(resp.json())

    def newer_turn(self, session_id: str, content: str = "[hang] newer work") -> str:
        """The agent's turn ends (its completion pass runs), then a user message starts a newer turn."""
        self.complete_turn(session_id)
        admission = self.send(session_id, content)
        assert admission["admission"] == "sent", admission  # not queued: it started a turn
        return str(admission["turn_id"])

    def superseded(self) -> tuple[str, str]:
        """(session, bundle): the agent asked in turn 1, ended it, the user's message started turn 2."""
        sid, cid = self.waiting()
        self.newer_turn(sid)
        assert self.entry(cid)["state"] == "superseded"  # type: ignore[index]
        return sid, cid

    def respond(self, cid: str, body: Any, key: str | None = None, client: ApiClient | None = None,
                ) -> requests.Response:
        headers = {"Idempotency-Key": key} if key else {}
        return (client or self.user).post(f"/clarifications/{cid}/respond", body, headers=headers)

    def skip(self, cid: str) -> requests.Response:
        """The user's Skip: reject the exact bundle through the response endpoint."""
        return self.respond(cid, {"rejected": True})

    def view(self, session_id: str) -> dict[str, Any]:
        resp = self.user.get(f"/sessions/{session_id}")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def session_list(self, task_id: str) -> list[dict[str, Any]]:
        resp = self.user.get(f"/tasks/{task_id}/sessions")
        assert resp.status_code == 200, resp.text
        return list(resp.json()["sessions"])

    def transcript(self, session_id: str, client: ApiClient | None = None) -> dict[str, Any]:
        resp = (client or self.user).get(f"/sessions/{session_id}/transcript")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def entry(self, cid: str, client: ApiClient | None = None) -> dict[str, Any] | None:
        """The transcript entry of one bundle (None when it is gone)."""
        found = [m for m in self.transcript(session_of(cid), client)["messages"] if m.get("clarification_id") == cid]
        assert len(found) <= 1, found
        return found[0] if found else None

    def user_messages(self, session_id: str) -> list[dict[str, Any]]:
        self.drain()
        return [m for m in self.transcript(session_id)["messages"]
                if m["type"] == "message" and m["author_type"] == "user"]

    def tasks(self) -> dict[str, dict[str, Any]]:
        resp = self.user.get("/tasks")
        assert resp.status_code == 200, resp.text
        return {t["id"]: t for t in resp.json()["tasks"]}

    def summary(self, task_id: str) -> dict[str, Any]:
        return dict(self.tasks()[task_id]["status_summary"])

    def transition(self, task_id: str, to_step: str = "review") -> requests.Response:
        return self.user.post(f"/tasks/{task_id}/workflow/transition", {"to_step": to_step})

    def cancel_session(self, session_id: str) -> dict[str, Any]:
        resp = self.user.post(f"/sessions/{session_id}/cancel")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def delete(self, session_id: str, message_id: str) -> requests.Response:
        return self.user.call("DELETE", f"/sessions/{session_id}/messages/{message_id}")

    # ------------------------------------------------------------------ agent side
    def ask_raw(self, session_id: str, body: Any) -> requests.Response:
        return self.agent(session_id).post(f"/agent/sessions/{session_id}/clarifications", body)

    def ask(self, session_id: str, questions: list[dict[str, Any]] | None = None, **extra: Any) -> str:
        resp = self.ask_raw(session_id, {"questions": questions or self.questions, **extra})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["clarification_id"])

    def waiting(self, task_id: str | None = None) -> tuple[str, str]:
        """(session, bundle): the questions pending and live in the session's open first turn."""
        sid = self.session(task_id)
        return sid, self.ask(sid)

    def detached(self, task_id: str | None = None) -> tuple[str, str]:
        sid, cid = self.waiting(task_id)
        assert self.detach(cid)
        return sid, cid

    def detach(self, cid: str) -> list[str]:
        resp = self.agent(session_of(cid)).post(f"/agent/clarifications/{cid}/detach")
        assert resp.status_code == 200, resp.text
        return list(resp.json()["detached_question_ids"])

    def withdraw(self, cid: str) -> requests.Response:
        """The agent cancels its own question."""
        return self.agent(session_of(cid)).post(f"/agent/clarifications/{cid}/cancel")

    def wait(self, cid: str, timeout: int = 5) -> requests.Response:
        return self.agent(session_of(cid)).get(f"/agent/clarifications/{cid}/wait?timeout={timeout}")

    def confirm(self, cid: str, delivery_id: str) -> requests.Response:
        return self.agent(session_of(cid)).post(f"/agent/clarifications/{cid}/confirm", {"delivery_id": delivery_id})

    def take_claim(self, cid: str) -> dict[str, Any]:
        """The live waiter's long-poll: returns once a response was claimed for it."""
        for _ in range(10):
            resp = self.wait(cid)
            assert resp.status_code == 200, resp.text
            if resp.json()["state"] != "pending":
                return dict(resp.json())
        raise AssertionError("no claim reached the waiter")

    def frames(self, session_id: str, *frames: dict[str, Any]) -> dict[str, Any]:
        resp = self.agent(session_id).post(f"/agent/sessions/{session_id}/frames", {"frames": list(frames)})
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def frame(self, session_id: str, kind: str, **extra: Any) -> dict[str, Any]:
        """One frame carrying the session's current identity (execution, generation, turn)."""
        s = self.stored(session_id)
        return self.frames(session_id, {"type": kind, "execution_id": s.execution_id,
                                        "prompt_generation": s.generation,
                                        "turn_id": s.current_turn.id if s.current_turn else None, **extra})

    def complete_turn(self, session_id: str) -> dict[str, Any]:
        """The agent reports its current turn complete (a no-op when the turn is already over)."""
        turn = self.stored(session_id).current_turn
        return self.frames(session_id, {"type": "turn_completed", "execution_id": "x",
                                        "turn_id": turn.id if turn else None})

    end_turn = complete_turn

    # ------------------------------------------------------------------ storage, events and the agent's log
    def raw_update(self, session_id: str, expression: str, path: list[str], value: dict[str, Any] | None = None,
                   ) -> None:
        """Write the session item as an old writer or another store would (bypassing the store's code)."""
        names = {f"#p{i}": part for i, part in enumerate(path)}
        target = ".".join(names)
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": names}
        if value is not None:
            kwargs["ExpressionAttributeValues"] = {":v": value}
            update = f"{expression} {target} = :v"
        else:
            update = f"{expression} {target}"
        self.store.client.update_item(TableName=self.store.sessions_table, Key={"session_id": {"S": session_id}},
                                      UpdateExpression=update, **kwargs)

    def events(self, kind: str | None = None, *, session: str | None = None, task: str | None = None,
               ) -> list[Event]:
        rows = self.store.list_events(self.workspace, low_sk="", after_sk="", written_after="", limit=100_000)
        return [e for _, _, e in rows if (kind is None or e.type == kind)
                and (session is None or e.session_id == session) and (task is None or e.task_id == task)]

    def updates(self, cid: str) -> list[Event]:
        """message.updated events published for one bundle."""
        return [e for e in self.events("message.updated") if e.payload.get("clarification_id") == cid]

    def prompts(self, session_id: str) -> list[dict[str, Any]]:
        assert self.sim is not None
        return [e for e in self.sim.events() if e["kind"] == "prompt" and e["session_id"] == session_id]

    def cancels(self, session_id: str) -> list[dict[str, Any]]:
        assert self.sim is not None
        return [e for e in self.sim.events() if e["kind"] == "cancel" and e["session_id"] == session_id]

    # ------------------------------------------------------------------ dependencies and the scheduled reconciler
    @contextmanager
    def settings(self, **changes: Any) -> Iterator[Settings]:
        real = bootstrap.deps()
        settings = dataclasses.replace(real.settings, **changes)
        bootstrap.override(dataclasses.replace(real, settings=settings))
        try:
            yield settings
        finally:
            bootstrap.override(real)

    @contextmanager
    def steering(self) -> Iterator[SteeringAgentctl]:
        real = bootstrap.deps()
        runtime = SteeringAgentctl(real.agentctl)
        bootstrap.override(dataclasses.replace(real, agentctl=runtime))
        try:
            yield runtime
        finally:
            bootstrap.override(real)

    def reconcile_later(self, seconds: float, *session_ids: str) -> reconciler.Report:
        """The scheduled reconciler, `seconds` from now, over these sessions only (others belong to other tests)."""
        real = bootstrap.deps()
        shifted = dataclasses.replace(real, clock=lambda: real.clock() + timedelta(seconds=seconds),
                                      store=_Only(real.store, set(session_ids)))
        return reconciler.reconcile(shifted, before_traffic=False)


class _Only:
    """The real store, with the reconciler's work list narrowed to some sessions."""

    def __init__(self, inner: Any, session_ids: set[str]) -> None:
        self._inner, self._ids = inner, session_ids

    def due_sessions(self, before: str | None) -> list[str]:
        return [s for s in self._inner.due_sessions(before) if s in self._ids]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
