"""The observed hostile-client cases, each as a regression test over real HTTP against the emulator.

Every case answers a 4xx in the API's error envelope, naming the field or the body, and writes nothing (the
workspace's stored data reads back exactly as before).
"""
from __future__ import annotations

import json
import time
from typing import Any

import jwt
import requests

from chalicelib import bootstrap
from chalicelib.auth.tokens import mint
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.routes import (
    QUERIES,
    V1,
    VALID_BODIES,
    Route,
    all_routes,
    build_world,
    fill,
    listing,
    owner_token,
    snapshot,
)

LONE = '"\\ud800"'  # a JSON string holding one unpaired surrogate, as a client sends it (escaped)


def send(stack: LocalStack, method: str, path: str, token: str | None, data: bytes | None = None,
         params: dict[str, str] | None = None) -> requests.Response:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return requests.request(method, stack.url + path, data=data, headers=headers, params=params, timeout=60)


def refusal(resp: requests.Response, status: int, code: str, field: str | None = None) -> str | None:
    """None when `resp` is that refusal in the error envelope; else what it was."""
    try:
        error = resp.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"{resp.status_code} {resp.text[:160]!r}"
    named = (error.get("details") or {}).get("field")
    if (resp.status_code, error.get("code")) != (status, code) or (field is not None and named != field):
        return f"{resp.status_code} {error.get('code')} field={named!r} {error.get('message', '')[:120]!r}"
    if error.get("retryable") is not False:
        return f"{resp.status_code} says retryable"
    return None


def body_routes() -> list[Route]:
    return [route for route in all_routes() if route in VALID_BODIES]


# ------------------------------------------------------------------ lone surrogates
def test_lone_surrogate__in_any_json_string_of_every_write_route__400_naming_it_and_nothing_written(
        stack: LocalStack, user: ApiClient, sim: SimAgent) -> None:
    world = build_world(stack, user, sim)
    before = snapshot()
    wrong = []
    for route in body_routes():
        path, token = fill(route[1], world.a), owner_token(stack, world, route)
        extra = json.dumps({**VALID_BODIES[route], "note": "LONE"}).replace('"LONE"', LONE)
        key = json.dumps({**VALID_BODIES[route], "LONE": 1}).replace('"LONE"', LONE)
        cases = {"an extra field": (extra, "note"), "a key": (key, "\ufffd")}
        for what, (data, field) in cases.items():
            found = refusal(send(stack, route[0], path, token, data.encode()), 400, "validation_error", field)
            if found:
                wrong.append((route, what, found))
    assert not wrong, listing(wrong)
    assert snapshot() == before


def test_lone_surrogate__in_custom_text__400_and_the_workspace_still_lists_its_tasks(
        stack: LocalStack, user: ApiClient, sim: SimAgent) -> None:
    world = build_world(stack, user, sim)
    before = snapshot()
    data = ('{"answers": [{"question_id": "q1", "selected_options": ["a"], "custom_text": ' + LONE + "}]}").encode()
    resp = send(stack, "POST", f"{V1}/clarifications/{world.a['clarification_id']}/respond", stack.user_token(),
                data)
    assert refusal(resp, 400, "validation_error", "answers[0].custom_text") is None
    assert snapshot() == before
    assert user.get("/tasks").status_code == 200
    assert user.get(f"/sessions/{world.a['session_id']}/transcript").status_code == 200


# ------------------------------------------------------------------ parser crashes
def test_deeply_nested_json__every_write_route__400_body(stack: LocalStack, user: ApiClient, sim: SimAgent) -> None:
    world = build_world(stack, user, sim)
    before = snapshot()
    nested = b'{"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    wrong = []
    for route in body_routes():
        resp = send(stack, route[0], fill(route[1], world.a), owner_token(stack, world, route), nested)
        found = refusal(resp, 400, "validation_error", "body")
        if found:
            wrong.append((route, found))
    assert not wrong, listing(wrong)
    assert snapshot() == before


def test_query_integers__thousands_of_digits__400_naming_the_parameter(stack: LocalStack, user: ApiClient,
                                                                       sim: SimAgent) -> None:
    world = build_world(stack, user, sim)
    digits = "9" * 5000
    wait = send(stack, "GET", f"{V1}/events", stack.user_token(), params={"wait": digits})
    assert refusal(wait, 400, "validation_error", "wait") is None
    route = ("GET", V1 + "/agent/clarifications/{clarification_id}/wait")
    assert route in QUERIES
    timeout = send(stack, "GET", fill(route[1], world.a), world.agent_a, params={"timeout": digits})
    assert refusal(timeout, 400, "validation_error", "timeout") is None


def test_huge_json_numbers__400_naming_the_field(stack: LocalStack) -> None:
    before = snapshot()
    wrong = []
    for literal in ("9" * 5000, "1e400", "-1e400", "NaN", "Infinity", "123456789012345678901234567890"):
        data = ('{"title": "numbers", "n": ' + literal + "}").encode()
        found = refusal(send(stack, "POST", f"{V1}/tasks", stack.user_token(), data), 400, "validation_error", "n")
        if found:
            wrong.append((literal[:20], found))
    assert not wrong, listing(wrong)
    assert snapshot() == before


def test_web_file__name_of_5000_characters__404(stack: LocalStack) -> None:
    resp = requests.get(f"{stack.url}/web/{'a' * 5000}.js", timeout=30)
    assert refusal(resp, 404, "not_found") is None


# ------------------------------------------------------------------ size
def test_body__12_mb_of_padding_in_an_unknown_field__413_and_no_task(stack: LocalStack, user: ApiClient) -> None:
    before = snapshot()
    data = json.dumps({"title": "padded", "padding": "x" * 12_000_000}).encode()
    resp = send(stack, "POST", f"{V1}/tasks", stack.user_token(), data)
    assert refusal(resp, 413, "payload_too_large") is None
    assert snapshot() == before and user.get("/tasks").json()["tasks"] == []


def test_body__over_the_cap_on_a_route_that_reads_no_body__413_and_not_applied(stack: LocalStack,
                                                                               user: ApiClient) -> None:
    task = user.post("/tasks", {"title": "t"}).json()
    session = user.post(f"/tasks/{task['id']}/sessions", {}).json()
    before = snapshot()
    resp = send(stack, "POST", f"{V1}/sessions/{session['id']}/cancel", stack.user_token(), b" " * 2_000_000)
    assert refusal(resp, 413, "payload_too_large") is None
    assert snapshot() == before and user.get(f"/sessions/{session['id']}").json()["state"] != "CANCELLED"


def test_respond__200k_unknown_option_ids__400_without_echoing_them(stack: LocalStack, user: ApiClient,
                                                                    sim: SimAgent) -> None:
    world = build_world(stack, user, sim)
    before = snapshot()
    options = [f"z{i % 16:x}" for i in range(200_000)]  # short ids: 200k of them fit under the body cap
    data = json.dumps({"answers": [{"question_id": "q1", "selected_options": options}]},
                      separators=(",", ":")).encode()
    resp = send(stack, "POST", f"{V1}/clarifications/{world.a['clarification_id']}/respond", stack.user_token(),
                data)
    assert refusal(resp, 400, "validation_error", "answers[0].selected_options") is None
    assert len(resp.content) < 2_000, f"the error echoed {len(resp.content)} bytes"
    assert snapshot() == before


# ------------------------------------------------------------------ wrong method
def test_wrong_method__every_route__405_method_not_allowed_in_the_envelope(stack: LocalStack) -> None:
    wrong = []
    methods = ("GET", "POST", "PUT", "PATCH", "DELETE")
    routes: dict[str, set[str]] = {}
    for method, path in all_routes():
        routes.setdefault(path, set()).add(method)
    for path, allowed in sorted(routes.items()):
        concrete = path.replace("{", "x").replace("}", "")  # a well-formed id; the route matches it
        for method in methods:
            if method in allowed:
                continue
            resp = send(stack, method, concrete, stack.user_token())
            found = refusal(resp, 405, "method_not_allowed")
            if found or set(resp.headers.get("Allow", "").replace(" ", "").split(",")) != allowed:
                wrong.append((method, path, found, resp.headers.get("Allow")))
    assert not wrong, listing(wrong)


# ------------------------------------------------------------------ tokens
def _signed(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, bootstrap.auth_secret(), algorithm="HS256")


def test_token__empty_sub_on_dismiss__401_and_the_session_stays_readable(stack: LocalStack, user: ApiClient,
                                                                         sim: SimAgent) -> None:
    world = build_world(stack, user, sim)
    now = int(time.time())
    empty = _signed({"sub": "", "role": "user", "workspace_id": "ws-1", "iat": now, "exp": now + 600})
    before = snapshot()
    resp = send(stack, "POST", f"{V1}/clarifications/{world.a['clarification_id']}/dismiss", empty)
    assert refusal(resp, 401, "unauthorized") is None
    assert snapshot() == before
    for path in (f"/sessions/{world.a['session_id']}", f"/sessions/{world.a['session_id']}/transcript",
                 f"/tasks/{world.a['task_id']}/sessions"):
        assert user.get(path).status_code == 200, path


def test_token__no_bearer_prefix__numeric_string_exp__no_maximum_lifetime__401(stack: LocalStack) -> None:
    now = int(time.time())
    good = mint(bootstrap.auth_secret(), sub="user-1", role="user", workspace_id="ws-1")
    claims = {"sub": "user-1", "role": "user", "workspace_id": "ws-1", "iat": now}
    headers = {
        "no Bearer prefix": good,
        "exp a numeric string": "Bearer " + _signed({**claims, "exp": str(now + 600)}),
        "a ten-year token": "Bearer " + _signed({**claims, "exp": now + 10 * 365 * 86_400}),
    }
    wrong = []
    for what, header in headers.items():
        resp = requests.get(f"{stack.url}{V1}/tasks", headers={"Authorization": header}, timeout=30)
        found = refusal(resp, 401, "unauthorized")
        if found:
            wrong.append((what, found))
    assert not wrong, listing(wrong)
