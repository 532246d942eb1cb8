"""The app's route table and real objects to point its routes at: what the authorization matrix, the
validation tests, the hostile-input tests and the OpenAPI-driven fuzzer all walk."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import requests

import app as application
from chalicelib import bootstrap
from chalicelib.push import ec
from chalicelib.push.vapid import b64url
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.wait import DEADLINE

V1 = "/api/v1"
AGENT_PREFIX = V1 + "/agent/"
PUBLIC = {("GET", V1 + "/health"), ("GET", V1 + "/openapi.json"), ("GET", V1 + "/auth/config")}
ASK = ("POST", V1 + "/agent/sessions/{session_id}/clarifications")
DETACH = ("POST", V1 + "/agent/clarifications/{clarification_id}/detach")
QUESTIONS = {"questions": [{"question_id": "q1", "prompt": "Which database?",
                            "options": [{"option_id": "a", "label": "Postgres"},
                                        {"option_id": "b", "label": "SQLite"}]}]}

def subscription_json(endpoint: str = "https://push.example.test/send/probe") -> dict[str, Any]:
    """A browser's PushSubscription JSON with a real P-256 public key (Clarify checks the point)."""
    return {"endpoint": endpoint, "keys": {"p256dh": b64url(ec.public_key(ec.new_private_key())),
                                           "auth": b64url(bytes(range(16)))}}


# Bodies that pass validation, so a refusal can only come from authentication or scope (the contract's shapes).
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
    ("POST", V1 + "/devices"): subscription_json(),
}
QUERIES: dict[tuple[str, str], dict[str, str]] = {
    ("GET", V1 + "/agent/clarifications/{clarification_id}/wait"): {"timeout": "0"},
}

Route = tuple[str, str]  # (method, path template)
DELETE_TASK: Route = ("DELETE", V1 + "/tasks/{task_id}")  # reaches everything else: an owner's runs last


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
    agent_a: str  # development tokens (the local stage's)
    agent_b: str
    keyring_a: str  # signed with the agent keyring, as dispatch mints them
    keyring_b: str


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
    assert sim.wait_idle(DEADLINE)
    for n, entry in enumerate(ids):
        device = user.post("/devices", subscription_json(f"https://push.example.test/send/world-{n}"))
        assert device.status_code == 201, device.text
        entry["device_id"] = device.json()["device_id"]
        messages = user.get(f"/sessions/{entry['session_id']}/transcript").json()["messages"]
        entry["message_id"] = next(m["id"] for m in messages if m["author_type"] == "agent")
        token = stack.agent_token(entry["session_id"])
        if ASK in all_routes():
            asked = call(stack, ASK, entry, token=token)
            assert asked.status_code == 201, asked.text
            entry["clarification_id"] = asked.json()["clarification_id"]
        if DETACH in all_routes():
            assert call(stack, DETACH, entry, token=token).status_code == 200
    return World(ids[0], ids[1], stack.agent_token(ids[0]["session_id"]), stack.agent_token(ids[1]["session_id"]),
                 stack.keyring_agent_token(ids[0]["session_id"]), stack.keyring_agent_token(ids[1]["session_id"]))


def snapshot(workspace: str = "ws-1") -> dict[str, Any]:
    """Everything stored for a workspace: tasks, session aggregates, history, events and push devices."""
    deps = bootstrap.deps()
    store = deps.store
    tasks = store.list_tasks(workspace)
    sessions = {t.id: store.list_sessions(t.id) for t in tasks}
    return {"tasks": tasks, "sessions": sessions,
            "history": {s.id: store.list_history(s.id) for group in sessions.values() for s in group},
            "events": store.list_events(workspace, low_sk="", after_sk="", written_after="", limit=10_000),
            "devices": deps.devices.list_devices(workspace) if deps.devices else []}


def owner_token(stack: LocalStack, world: World, route: Route) -> str:
    """The token entitled to session A's objects on this route."""
    return world.agent_a if route[1].startswith(AGENT_PREFIX) else stack.user_token()


