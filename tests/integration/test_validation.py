"""Bad input over real HTTP: 400 `validation_error` naming the first bad field, and nothing written.

Each test sends a table of bad requests to one route, collects every mismatch, then checks the store is
exactly as before; a valid request at the end shows the same check notices a write.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import requests

from chalicelib.domain import validation as v
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.routes import (
    AGENT_PREFIX,
    QUESTIONS,
    V1,
    all_routes,
    build_world,
    fill,
    listing,
    owner_token,
    snapshot,
)
from tests.support.wait import DEADLINE

# POST routes that read no body (per the contract): everything else that is POSTed must be a JSON object.
BODYLESS = {V1 + "/sessions/{session_id}/cancel", V1 + "/clarifications/{clarification_id}/dismiss",
            V1 + "/agent/clarifications/{clarification_id}/detach",
            V1 + "/agent/clarifications/{clarification_id}/cancel"}


@dataclass(frozen=True)
class Raw:
    """A body sent as bytes, with its content type (None: no Content-Type header at all)."""

    data: bytes
    content_type: str | None = "application/json"


Case = tuple[str, Any, str]  # (what, body: JSON value or Raw, the field the error must name)

NOT_AN_OBJECT: list[Case] = [
    ("malformed JSON", Raw(b'{"title": "x",'), "body"),
    ("malformed JSON, no Content-Type", Raw(b'{"prompt": "x",', None), "body"),
    ("JSON array", [], "body"),
    ("JSON string", "hello", "body"),
    ("JSON number", 7, "body"),
    ("JSON null", Raw(b"null"), "body"),
]


def post(stack: LocalStack, path: str, token: str, body: Any, method: str = "POST") -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"}
    if isinstance(body, Raw):
        if body.content_type:
            headers["Content-Type"] = body.content_type
        return requests.request(method, stack.url + path, data=body.data, headers=headers, timeout=30)
    return requests.request(method, stack.url + path, json=body, headers=headers, timeout=30)


def problem(resp: requests.Response, field: str) -> str | None:
    """None when the response is a 400 validation_error naming `field`; else what is wrong."""
    try:
        error = resp.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"{resp.status_code} {resp.text[:160]}"
    named = (error.get("details") or {}).get("field")
    if resp.status_code != 400 or error.get("code") != "validation_error" or named != field:
        return f"{resp.status_code} {error.get('code')} field={named!r}"
    return None


def check(stack: LocalStack, path: str, token: str, cases: list[Case],
          method: str = "POST") -> list[tuple[str, str, str]]:
    wrong = []
    for what, body, field in cases:
        found = problem(post(stack, path, token, body, method), field)
        if found:
            wrong.append((what, f"expected 400 field={field!r}", found))
    return wrong


@dataclass
class IdleSession:
    task_id: str
    session_id: str
    agent: str


def idle_session(stack: LocalStack, user: ApiClient) -> IdleSession:
    task = user.post("/tasks", {"title": "Validation"}).json()
    session = user.post(f"/tasks/{task['id']}/sessions", {}).json()
    assert session["state"] == "IDLE"
    return IdleSession(task["id"], session["id"], stack.agent_token(session["id"]))


# ------------------------------------------------------------------ every route that takes a body
def test_every_body_route__body_not_a_json_object__400_body_and_nothing_written(
        stack: LocalStack, user: ApiClient, sim: SimAgent) -> None:
    world = build_world(stack, user, sim)
    routes = [(m, p) for m, p in all_routes() if m in ("POST", "PATCH") and p not in BODYLESS]
    assert routes
    before = snapshot()
    wrong = []
    for route in routes:
        path, token = fill(route[1], world.a), owner_token(stack, world, route)
        wrong += [(route[1], *w) for w in check(stack, path, token, NOT_AN_OBJECT, route[0])]
        # A body that is not JSON at all is refused in the API's error envelope like any other error.
        resp = post(stack, path, token, Raw(b"title=x&content=y", "text/plain"), route[0])
        if resp.status_code not in (400, 415) or not _is_envelope(resp):
            wrong.append((route[1], "not JSON, text/plain", "expected 400/415 in the error envelope",
                          f"{resp.status_code} {resp.text[:120]}"))
    assert not wrong, listing(wrong)
    assert snapshot() == before
    assert any(p.startswith(AGENT_PREFIX) for _, p in routes) and any(not p.startswith(AGENT_PREFIX)
                                                                       for _, p in routes)


def _is_envelope(resp: requests.Response) -> bool:
    try:
        body = resp.json()
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str)


# ------------------------------------------------------------------ POST /tasks
def test_create_task__bad_fields__400_naming_the_field_and_nothing_written(stack: LocalStack,
                                                                          user: ApiClient) -> None:
    cases: list[Case] = [
        ("empty body", Raw(b""), "body"),
        ("title missing", {}, "title"),
        ("title null", {"title": None}, "title"),
        ("title empty", {"title": ""}, "title"),
        ("title blank", {"title": "   "}, "title"),
        ("title too long", {"title": "x" * (v.MAX_TITLE + 1)}, "title"),
        ("title a number", {"title": 5}, "title"),
        ("title a list", {"title": ["Refactor"]}, "title"),
        ("title an object", {"title": {"text": "Refactor"}}, "title"),
        ("workflow_step not an identifier", {"title": "ok", "workflow_step": "in review!"}, "workflow_step"),
        ("workflow_step a number", {"title": "ok", "workflow_step": 3}, "workflow_step"),
    ]
    before = snapshot()
    wrong = check(stack, V1 + "/tasks", stack.user_token(), NOT_AN_OBJECT + cases)
    assert not wrong, listing(wrong)
    assert snapshot() == before
    assert user.get("/tasks").json()["tasks"] == []

    longest = user.post("/tasks", {"title": "x" * v.MAX_TITLE})
    assert longest.status_code == 201 and snapshot() != before


# ------------------------------------------------------------------ POST /tasks/{task_id}/sessions
def test_create_session__bad_fields__400_naming_the_field_and_nothing_written(stack: LocalStack,
                                                                             user: ApiClient) -> None:
    task = user.post("/tasks", {"title": "Validation"}).json()
    cases: list[Case] = [
        ("prompt empty", {"prompt": ""}, "prompt"),
        ("prompt blank", {"prompt": "  \n "}, "prompt"),
        ("prompt too long", {"prompt": "x" * (v.MAX_CONTENT + 1)}, "prompt"),
        ("prompt a number", {"prompt": 42}, "prompt"),
        ("prompt a list", {"prompt": ["start"]}, "prompt"),
        ("primary a string", {"primary": "true"}, "primary"),
        ("primary a number", {"primary": 1}, "primary"),
        ("primary null", {"primary": None}, "primary"),
        ("prompt checked before primary", {"prompt": 1, "primary": "yes"}, "prompt"),
    ]
    path = f"{V1}/tasks/{task['id']}/sessions"
    before = snapshot()
    wrong = check(stack, path, stack.user_token(), NOT_AN_OBJECT + cases)
    assert not wrong, listing(wrong)
    assert snapshot() == before
    assert user.get(f"/tasks/{task['id']}/sessions").json()["sessions"] == []

    assert user.post(f"/tasks/{task['id']}/sessions", {"primary": True}).status_code == 201
    assert snapshot() != before


# ------------------------------------------------------------------ POST /sessions/{session_id}/messages
def test_send_message__bad_fields__400_naming_the_field_and_nothing_written(stack: LocalStack, user: ApiClient,
                                                                           sim: SimAgent) -> None:
    s = idle_session(stack, user)
    ok = {"client_message_id": "m-1", "content": "hello"}
    cases: list[Case] = [
        ("empty body", Raw(b""), "body"),
        ("everything missing: the first field is named", {}, "client_message_id"),
        ("client_message_id missing", {"content": "hello"}, "client_message_id"),
        ("client_message_id null", {**ok, "client_message_id": None}, "client_message_id"),
        ("client_message_id empty", {**ok, "client_message_id": ""}, "client_message_id"),
        ("client_message_id blank", {**ok, "client_message_id": "   "}, "client_message_id"),
        ("client_message_id too long", {**ok, "client_message_id": "m" * (v.MAX_ID + 1)}, "client_message_id"),
        ("client_message_id a number", {**ok, "client_message_id": 17}, "client_message_id"),
        ("client_message_id with a space", {**ok, "client_message_id": "m 1"}, "client_message_id"),
        ("client_message_id with a slash", {**ok, "client_message_id": "m/1"}, "client_message_id"),
        ("content missing", {"client_message_id": "m-1"}, "content"),
        ("content null", {**ok, "content": None}, "content"),
        ("content empty", {**ok, "content": ""}, "content"),
        ("content blank", {**ok, "content": " \t\n"}, "content"),
        ("content too long", {**ok, "content": "x" * (v.MAX_CONTENT + 1)}, "content"),
        ("content a number", {**ok, "content": 3}, "content"),
        ("content a list", {**ok, "content": ["hello"]}, "content"),
        ("delivery unknown", {**ok, "delivery": "later"}, "delivery"),
        ("delivery empty", {**ok, "delivery": ""}, "delivery"),
        ("delivery a number", {**ok, "delivery": 1}, "delivery"),
    ]
    path = f"{V1}/sessions/{s.session_id}/messages"
    before = snapshot()
    wrong = check(stack, path, stack.user_token(), NOT_AN_OBJECT + cases)
    assert not wrong, listing(wrong)
    assert snapshot() == before
    session = user.get(f"/sessions/{s.session_id}").json()
    assert (session["state"], session["current_turn_id"]) == ("IDLE", None)
    assert user.get(f"/sessions/{s.session_id}/turns").json()["turns"] == []
    assert [e for e in sim.events() if e["kind"] == "prompt"] == []

    longest = {"client_message_id": "m" * v.MAX_ID, "content": "x" * v.MAX_CONTENT}
    assert user.post(f"/sessions/{s.session_id}/messages", longest).status_code == 201
    assert sim.wait_idle(DEADLINE)
    assert snapshot() != before


# ------------------------------------------------------------------ POST /agent/sessions/{session_id}/frames
def test_post_frames__bad_frames__400_naming_the_frame_field_and_nothing_applied(stack: LocalStack,
                                                                                user: ApiClient) -> None:
    s = idle_session(stack, user)
    message = {"type": "message", "execution_id": "e1", "prompt_generation": 0, "content": "hi"}
    cases: list[Case] = [
        ("frames missing", {}, "frames"),
        ("frames null", {"frames": None}, "frames"),
        ("frames an object", {"frames": {"type": "message"}}, "frames"),
        ("frames a string", {"frames": "message"}, "frames"),
        ("frames empty", {"frames": []}, "frames"),
        ("too many frames", {"frames": [message] * (v.MAX_FRAMES + 1)}, "frames"),
        ("frame a number", {"frames": [5]}, "frames[0]"),
        ("frame a string", {"frames": ["message"]}, "frames[0]"),
        ("type missing", {"frames": [{"content": "hi"}]}, "frames[0].type"),
        ("type unknown", {"frames": [{**message, "type": "shout"}]}, "frames[0].type"),
        ("type a number", {"frames": [{**message, "type": 1}]}, "frames[0].type"),
        ("prompt_generation a string", {"frames": [{**message, "prompt_generation": "0"}]},
         "frames[0].prompt_generation"),
        ("prompt_generation a boolean", {"frames": [{**message, "prompt_generation": True}]},
         "frames[0].prompt_generation"),
        ("prompt_generation a float", {"frames": [{**message, "prompt_generation": 1.5}]},
         "frames[0].prompt_generation"),
        ("execution_id a number", {"frames": [{**message, "execution_id": 7}]}, "frames[0].execution_id"),
        ("turn_id a number", {"frames": [{**message, "turn_id": 7}]}, "frames[0].turn_id"),
        ("content a number", {"frames": [{**message, "content": 7}]}, "frames[0].content"),
        ("content too long", {"frames": [{**message, "content": "x" * (v.MAX_CONTENT + 1)}]}, "frames[0].content"),
        ("state frame without a state", {"frames": [{"type": "state"}]}, "frames[0].state"),
        ("state frame, unknown state", {"frames": [{"type": "state", "state": "ASLEEP"}]}, "frames[0].state"),
        ("state frame, lower-case state", {"frames": [{"type": "state", "state": "failed"}]}, "frames[0].state"),
        ("a bad second frame names it; the good first one is not applied",
         {"frames": [message, {**message, "type": "shout"}]}, "frames[1].type"),
    ]
    path = f"{V1}/agent/sessions/{s.session_id}/frames"
    before = snapshot()
    wrong = check(stack, path, s.agent, NOT_AN_OBJECT + cases)
    assert not wrong, listing(wrong)
    assert snapshot() == before
    assert user.get(f"/sessions/{s.session_id}/transcript").json()["messages"] == []

    applied = post(stack, path, s.agent, {"frames": [message]})
    assert applied.status_code == 200 and applied.json()["applied"] == 1
    assert snapshot() != before


# ------------------------------------------------------------------ POST /tasks/{task_id}/workflow/transition
def test_workflow_transition__bad_step__400_naming_to_step_and_nothing_written(stack: LocalStack,
                                                                               user: ApiClient) -> None:
    s = idle_session(stack, user)
    cases: list[Case] = [
        ("to_step missing", {}, "to_step"),
        ("to_step empty", {"to_step": ""}, "to_step"),
        ("to_step not an identifier", {"to_step": "in review!"}, "to_step"),
        ("to_step too long", {"to_step": "s" * (v.MAX_ID + 1)}, "to_step"),
        ("to_step a number", {"to_step": 2}, "to_step"),
    ]
    path = f"{V1}/tasks/{s.task_id}/workflow/transition"
    before = snapshot()
    wrong = check(stack, path, stack.user_token(), cases)
    assert not wrong, listing(wrong)
    assert snapshot() == before
    assert user.get(f"/tasks/{s.task_id}").json()["workflow_step"] == "todo"

    assert user.post(f"/tasks/{s.task_id}/workflow/transition", {"to_step": "review"}).status_code == 200
    assert snapshot() != before


# ------------------------------------------------------------------ POST /agent/sessions/{session_id}/clarifications
def test_ask__bad_questions__400_naming_the_field_and_no_bundle(stack: LocalStack, user: ApiClient) -> None:
    s = idle_session(stack, user)
    q = QUESTIONS["questions"][0]
    two = q["options"]
    cases: list[Case] = [
        ("questions missing", {}, "questions"),
        ("questions empty", {"questions": []}, "questions"),
        ("questions a string", {"questions": "which?"}, "questions"),
        ("five questions", {"questions": [{**q, "question_id": f"q{i}"} for i in range(5)]}, "questions"),
        ("duplicate question ids", {"questions": [q, q]}, "questions"),
        ("question a number", {"questions": [5]}, "questions[0]"),
        ("prompt missing", {"questions": [{"options": two}]}, "questions[0].prompt"),
        ("prompt a number", {"questions": [{**q, "prompt": 1}]}, "questions[0].prompt"),
        ("one option", {"questions": [{**q, "options": two[:1]}]}, "questions[0].options"),
        ("seven options", {"questions": [{**q, "options": [{"label": f"o{i}"} for i in range(7)]}]},
         "questions[0].options"),
        ("option label missing", {"questions": [{**q, "options": [{"option_id": "a"}, two[1]]}]},
         "questions[0].options[0].label"),
        ("turn_id not an identifier", {**QUESTIONS, "turn_id": "turn 1"}, "turn_id"),
    ]
    path = f"{V1}/agent/sessions/{s.session_id}/clarifications"
    before = snapshot()
    wrong = check(stack, path, s.agent, cases)
    assert not wrong, listing(wrong)
    assert snapshot() == before
    assert user.get(f"/sessions/{s.session_id}").json()["pending_action"] is None

    assert post(stack, path, s.agent, QUESTIONS).status_code == 201
    assert snapshot() != before


# ------------------------------------------------------------------ GET /events
def _cursor(data: Any) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).decode()


def test_query_params__bad_values__400_naming_the_parameter(stack: LocalStack, user: ApiClient) -> None:
    s = idle_session(stack, user)
    asked = post(stack, f"{V1}/agent/sessions/{s.session_id}/clarifications", s.agent, QUESTIONS)
    assert asked.status_code == 201
    waiting = f"/agent/clarifications/{asked.json()['clarification_id']}/wait"
    agent = ApiClient(stack.url, s.agent)
    bad: list[tuple[ApiClient, str, dict[str, str], str]] = [
        *[(user, "/events", {"wait": w}, "wait") for w in ("soon", "1.5", "1e1", "-1", "26", "9" * 20)],
        *[(user, "/events", {"after": a}, "after") for a in (
            "garbage", "%%%", _cursor(b"not json"), _cursor(b"\xff\xfe"), _cursor(None), _cursor([1, 2]),
            _cursor({"sk": "x"}), _cursor({"t": "2025-01-01T00:00:00.000000Z"}),
            _cursor({"sk": "x", "t": "yesterday"}))],
        *[(agent, waiting, {"timeout": t}, "timeout") for t in ("soon", "1.5", "-1", "26")],
    ]
    wrong = []
    for client, path, params, field in bad:
        found = problem(client.get(path, params=params), field)
        if found:
            wrong.append((path, params, found))
    assert not wrong, listing(wrong)

    first = user.get("/events", params={"wait": "0"})
    assert first.status_code == 200
    assert user.get("/events", params={"after": first.json()["cursor"], "wait": ""}).status_code == 200
    assert agent.get(waiting, params={"timeout": "0"}).json() == {"state": "pending"}
