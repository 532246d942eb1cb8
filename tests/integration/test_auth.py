"""Authentication and scope over real HTTP, for every route of the app (enumerated, so new routes are covered).

No token or a bad one is 401; anything outside the caller's scope is 404 exactly like a missing id, and a
refused request writes nothing. Path parameters are filled with ids of real objects.
"""
from __future__ import annotations

import re
import time
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
import requests

import app as application
from chalicelib import bootstrap
from chalicelib.auth.tokens import mint
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.conftest import ApiClient

V1 = "/api/v1"
AGENT_PREFIX = V1 + "/agent/"
PUBLIC = {("GET", V1 + "/health"), ("GET", V1 + "/openapi.json")}
ASK = ("POST", V1 + "/agent/sessions/{session_id}/clarifications")
DETACH = ("POST", V1 + "/agent/clarifications/{clarification_id}/detach")
QUESTIONS = {"questions": [{"question_id": "q1", "prompt": "Which database?",
                            "options": [{"option_id": "a", "label": "Postgres"},
                                        {"option_id": "b", "label": "SQLite"}]}]}

# Bodies that pass validation, so a refusal can only come from authentication or scope (API.md shapes).
VALID_BODIES: dict[tuple[str, str], Any] = {
    ("POST", V1 + "/tasks"): {"title": "probe"},
    ("PATCH", V1 + "/tasks/{task_id}"): {"title": "probe"},
    ("POST", V1 + "/tasks/{task_id}/sessions"): {},
    ("POST", V1 + "/sessions/{session_id}/messages"): {"client_message_id": "probe-1", "content": "probe"},
    ("POST", V1 + "/tasks/{task_id}/workflow/transition"): {"to_step": "review"},
    ("POST", V1 + "/clarifications/{clarification_id}/respond"): {"rejected": True},
    ASK: QUESTIONS,
    ("POST", V1 + "/agent/clarifications/{clarification_id}/confirm"): {"delivery_id": "probe"},
    ("POST", V1 + "/agent/sessions/{session_id}/frames"): {"frames": [{"type": "message", "content": "probe"}]},
}
QUERIES: dict[tuple[str, str], dict[str, str]] = {
    ("GET", V1 + "/agent/clarifications/{clarification_id}/wait"): {"timeout": "0"},
}

Route = tuple[str, str]  # (method, path template)
DELETE_TASK: Route = ("DELETE", V1 + "/tasks/{task_id}")


# ------------------------------------------------------------------ the route table
def all_routes() -> list[Route]:
    return sorted((method, path) for path, methods in application.app.routes.items() for method in methods)


def authorized_routes() -> list[Route]:
    return [(m, p) for m, p in all_routes() if application.app.routes[p][m].authorizer is not None]


def user_routes() -> list[Route]:
    return [(m, p) for m, p in authorized_routes() if not p.startswith(AGENT_PREFIX)]


def agent_routes() -> list[Route]:
    return [(m, p) for m, p in authorized_routes() if p.startswith(AGENT_PREFIX)]


def fill(path: str, ids: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        assert ids.get(name), f"no real object for {{{name}}} in {path}: teach build_world to make one"
        return ids[name]
    return re.sub(r"{(\w+)}", value, path)


def missing_like(real: str) -> str:
    """An id of the same shape (separators kept) that names nothing."""
    return re.sub(r"[A-Za-z0-9]+", lambda m: (uuid.uuid4().hex * 4)[:len(m.group(0))], real)


def call(stack: LocalStack, route: Route, ids: dict[str, str], *, token: str | None = None,
         headers: dict[str, str] | None = None) -> requests.Response:
    """The route with a valid body/query (VALID_BODIES, QUERIES; `{}` for a route not listed there)."""
    method, path = route
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    body = VALID_BODIES.get(route, {}) if method in ("POST", "PUT", "PATCH") else None
    return requests.request(method, stack.url + fill(path, ids), headers=sent, json=body,
                            params=QUERIES.get(route), timeout=30)


def listing(wrong: list[Any]) -> str:
    """Every mismatch on its own line (pytest would shorten a list diff)."""
    return f"{len(wrong)} mismatches:\n" + "\n".join(map(str, wrong))


def error_code(resp: requests.Response) -> str | None:
    try:
        body = resp.json()
    except ValueError:
        return None
    return body.get("error", {}).get("code") if isinstance(body, dict) and set(body) == {"error"} else None


# ------------------------------------------------------------------ real objects to point at
@dataclass
class World:
    a: dict[str, str]  # ids of session A's objects (task, session, message, clarification)
    b: dict[str, str]  # session B, same task and workspace
    agent_a: str
    agent_b: str


def build_world(stack: LocalStack, user: ApiClient, sim: SimAgent) -> World:
    """One task with two sessions. Each has a delivered message with the agent's reply (written to history by
    the frames route, so no stream processing is needed) and, when the routes exist, a detached question:
    still active and answerable, but with no live waiter for a responder to wait on."""
    task = user.post("/tasks", {"title": "Scope probe"}).json()
    ids: list[dict[str, str]] = []
    for n in range(2):
        session = user.post(f"/tasks/{task['id']}/sessions", {}).json()
        sent = user.post(f"/sessions/{session['id']}/messages", {"client_message_id": f"m{n}", "content": "hello"})
        assert sent.status_code == 201, sent.text
        ids.append({"task_id": task["id"], "session_id": session["id"]})
    assert sim.wait_idle(5)
    for entry in ids:
        messages = user.get(f"/sessions/{entry['session_id']}/transcript").json()["messages"]
        entry["message_id"] = next(m["id"] for m in messages if m["author_type"] == "agent")
        token = stack.agent_token(entry["session_id"])
        if ASK in all_routes():
            asked = call(stack, ASK, entry, token=token)
            assert asked.status_code == 201, asked.text
            entry["clarification_id"] = asked.json()["clarification_id"]
        if DETACH in all_routes():
            assert call(stack, DETACH, entry, token=token).status_code == 200
    return World(ids[0], ids[1], stack.agent_token(ids[0]["session_id"]), stack.agent_token(ids[1]["session_id"]))


def snapshot(workspace: str = "ws-1") -> dict[str, Any]:
    """Everything stored for a workspace: tasks, session aggregates, history and events."""
    store = bootstrap.deps().store
    tasks = store.list_tasks(workspace)
    sessions = {t.id: store.list_sessions(t.id) for t in tasks}
    return {"tasks": tasks, "sessions": sessions,
            "history": {s.id: store.list_history(s.id) for group in sessions.values() for s in group},
            "events": store.list_events(workspace, low_sk="", after_sk="", written_after="", limit=10_000)}


@pytest.fixture
def world(stack: LocalStack, user: ApiClient, sim: SimAgent) -> World:
    return build_world(stack, user, sim)


def owner_token(stack: LocalStack, world: World, route: Route) -> str:
    """The token entitled to session A's objects on this route."""
    return world.agent_a if route[1].startswith(AGENT_PREFIX) else stack.user_token()


# ------------------------------------------------------------------ 401
def test_route_table__public_api_routes__only_health_and_openapi(stack: LocalStack) -> None:
    public = set(all_routes()) - set(authorized_routes())
    assert {(m, p) for m, p in public if p.startswith(V1 + "/")} == PUBLIC
    # Outside the API only static files (the web client) may be public: they can change nothing.
    assert {m for m, p in public if not p.startswith(V1 + "/")} <= {"GET"}
    for route in sorted(PUBLIC):
        resp = call(stack, route, {})
        assert resp.status_code == 200, (route, resp.status_code, resp.text)


def test_every_route__no_token__401_unauthorized(stack: LocalStack, world: World) -> None:
    wrong = []
    for route in authorized_routes():
        resp = call(stack, route, world.a)
        if resp.status_code != 401 or error_code(resp) != "unauthorized":
            wrong.append((route, resp.status_code, resp.text[:200]))
    assert not wrong, listing(wrong)
    envelope = call(stack, ("GET", V1 + "/tasks"), {}).json()["error"]
    assert isinstance(envelope["message"], str) and envelope["retryable"] is False


def _bad_tokens() -> dict[str, str]:
    secret = bootstrap.auth_secret()
    now = int(time.time())
    user = {"sub": "user-1", "role": "user", "workspace_id": "ws-1", "exp": now + 3600}
    good = mint(secret, sub="user-1", role="user", workspace_id="ws-1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short keys on purpose: these tokens must be refused anyway
        return _signed_bad_tokens(secret, user, good)


def _signed_bad_tokens(secret: str, user: dict[str, Any], good: str) -> dict[str, str]:
    return {
        "not a jwt": "Bearer garbage",
        "empty bearer": "Bearer ",
        "basic scheme": "Basic dXNlcjpwYXNz",
        "other secret": "Bearer " + jwt.encode(user, "another-secret-" + "x" * 32, algorithm="HS256"),
        "alg none": "Bearer " + jwt.encode(user, "", algorithm="none"),
        "hs512": "Bearer " + jwt.encode(user, secret, algorithm="HS512"),
        "tampered signature": "Bearer " + good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"),
        "unknown role": "Bearer " + jwt.encode({**user, "role": "admin"}, secret, algorithm="HS256"),
        "no workspace": "Bearer " + jwt.encode({k: v for k, v in user.items() if k != "workspace_id"}, secret,
                                               algorithm="HS256"),
        "no exp": "Bearer " + jwt.encode({k: v for k, v in user.items() if k != "exp"}, secret, algorithm="HS256"),
        "agent without session": "Bearer " + jwt.encode({**user, "role": "agent"}, secret, algorithm="HS256"),
    }


def test_every_route__garbage_token__401_unauthorized(stack: LocalStack, world: World) -> None:
    wrong = []
    for kind, header in _bad_tokens().items():
        for route in authorized_routes():
            resp = call(stack, route, world.a, headers={"Authorization": header})
            if resp.status_code != 401 or error_code(resp) != "unauthorized":
                wrong.append((kind, route, resp.status_code, resp.text[:200]))
    assert not wrong, listing(wrong)


def test_every_route__expired_token__401_unauthorized(stack: LocalStack, world: World) -> None:
    secret = bootstrap.auth_secret()
    session_id = world.a["session_id"]
    expired = {
        "user, ttl -10 s": mint(secret, sub="user-1", role="user", workspace_id="ws-1", ttl_seconds=-10),
        "agent, ttl -10 s": mint(secret, sub=f"agent:{session_id}", role="agent", workspace_id="ws-1",
                                 session_id=session_id, ttl_seconds=-10),
        "user, minted a day ago": mint(secret, sub="user-1", role="user", workspace_id="ws-1",
                                       now=time.time() - 86_400),
    }
    before = snapshot()
    wrong = []
    for kind, token in expired.items():
        for route in authorized_routes():
            resp = call(stack, route, world.a, token=token)
            if resp.status_code != 401 or error_code(resp) != "unauthorized":
                wrong.append((kind, route, resp.status_code, resp.text[:200]))
    assert not wrong, listing(wrong)
    assert snapshot() == before


# ------------------------------------------------------------------ 404: outside the caller's scope
def test_user_routes__other_workspace_ids__404_identical_to_missing(stack: LocalStack, world: World) -> None:
    outsider = stack.user_token(workspace="ws-2", sub="user-2")
    scoped = [r for r in user_routes() if re.search(r"{\w+}", r[1])]
    assert scoped, "no user route takes an id?"
    before = snapshot()
    wrong: list[tuple[Any, ...]] = []
    for route in scoped:
        theirs = call(stack, route, world.a, token=outsider)
        missing = call(stack, route, {k: missing_like(v) for k, v in world.a.items()}, token=outsider)
        if theirs.status_code != 404 or error_code(theirs) != "not_found":
            wrong.append((route, "other workspace", theirs.status_code, theirs.text[:200]))
        if (theirs.status_code, theirs.content) != (missing.status_code, missing.content):
            wrong.append((route, "differs from missing", theirs.text[:200], missing.text[:200]))
    assert not wrong, listing(wrong)
    assert snapshot() == before, "a refused request changed ws-1's data"
    # The same requests from the owner reach the objects, so the 404s above came from scope (deleting the task
    # goes last: everything else is reached through it).
    owner = [(r, call(stack, r, world.a, token=stack.user_token()).status_code)
             for r in sorted(scoped, key=lambda r: r == DELETE_TASK)]
    assert [(r, s) for r, s in owner if s == 404] == []


def test_list_routes__other_workspace__sees_none_of_its_tasks_or_events(stack: LocalStack, user: ApiClient,
                                                                        world: World) -> None:
    outsider = ApiClient(stack.url, stack.user_token(workspace="ws-2", sub="user-2"))
    assert stack.pump is not None
    stack.pump.drain()  # ws-1's changes become events
    assert [t["id"] for t in user.get("/tasks").json()["tasks"]] == [world.a["task_id"]]
    assert user.get("/events").json()["events"], "ws-1 has events (control)"
    assert outsider.get("/tasks").json()["tasks"] == []
    assert outsider.get("/events").json()["events"] == []


def test_user_routes__agent_token__404_not_found(stack: LocalStack, world: World) -> None:
    before = snapshot()
    wrong = []
    for route in user_routes():
        resp = call(stack, route, world.a, token=world.agent_a)  # the agent of this very session and workspace
        if resp.status_code != 404 or error_code(resp) != "not_found":
            wrong.append((route, resp.status_code, resp.text[:200]))
    assert not wrong, listing(wrong)
    assert snapshot() == before


def test_agent_routes__user_token__404_not_found(stack: LocalStack, world: World) -> None:
    assert agent_routes(), "no agent routes?"
    before = snapshot()
    wrong = []
    for route in agent_routes():
        resp = call(stack, route, world.a, token=stack.user_token())  # the owner of the session
        if resp.status_code != 404 or error_code(resp) != "not_found":
            wrong.append((route, resp.status_code, resp.text[:200]))
    assert not wrong, listing(wrong)
    assert snapshot() == before


def test_agent_routes__other_sessions_agent_token__404_not_found(stack: LocalStack, world: World) -> None:
    before = snapshot()
    wrong = []
    for route in agent_routes():
        resp = call(stack, route, world.b, token=world.agent_a)
        if resp.status_code != 404 or error_code(resp) != "not_found":
            wrong.append((route, resp.status_code, resp.text[:200]))
    assert not wrong, listing(wrong)
    assert snapshot() == before, "session A's agent changed something"
    # Session B's own agent is let through on the same requests.
    owner = [(r, call(stack, r, world.b, token=world.agent_b).status_code) for r in agent_routes()]
    assert [(r, s) for r, s in owner if s in (401, 404)] == []
