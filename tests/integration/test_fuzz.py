"""Generated requests against every operation of the served OpenAPI document, over real HTTP (schemathesis).

For each operation, schemathesis draws requests from the document's schemas: valid ones (positive) and ones
that break them (negative: wrong types, missing fields, out-of-range numbers, odd strings). Each is sent with
the caller's real token, to real objects most of the time (ids of a task, sessions, messages and questions
built first) and to generated ids otherwise. Whatever was sent: never a 5xx, and every 4xx is the API's error
envelope with a bounded message and, for a refusal that the same request would meet again, not retryable.

Bounded to fit the suite: EXAMPLES per operation and mode, no shrinking, a fixed seed (reproducible runs);
the long-poll parameters are capped at 1 s so a drawn `wait=25` costs a second, not 25 (their bounds are
checked in test_validation.py).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

import app as application
from chalicelib.api.openapi import openapi_document
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.routes import AGENT_PREFIX, World, build_world

EXAMPLES = int(os.environ.get("CLARIFY_FUZZ_EXAMPLES", "15"))  # per operation and generation mode
LONG_POLLS = {"wait", "timeout"}
DETERMINISTIC_4XX = {400, 401, 404, 405, 413, 422}
DOC = openapi_document(application.app)
OPERATIONS = sorted((method.upper(), path) for path, item in DOC["paths"].items() for method in item)
SENT: list[tuple[str, str, int]] = []  # (operation, mode, status) of every generated request


@pytest.fixture(scope="module")
def fuzz_world(shared: tuple[LocalStack, SimAgent]) -> Iterator[tuple[LocalStack, World, dict[str, Any]]]:
    stack, sim = shared
    world = build_world(stack, ApiClient(stack.url, stack.user_token()), sim)
    served = requests.get(stack.url + "/api/v1/openapi.json", timeout=30)
    assert served.status_code == 200
    yield stack, world, served.json()
    statuses = [s for _, _, s in SENT]
    print(f"\nfuzz: {len(SENT)} generated requests over {len(OPERATIONS)} operations; "
          f"5xx: {sum(s >= 500 for s in statuses)}")


def problems(resp: requests.Response) -> list[str]:
    """What is wrong with one answer, whatever the request was."""
    found = []
    if resp.status_code >= 500:
        found.append(f"{resp.status_code} server error")
    if 400 <= resp.status_code < 500 and resp.status_code != 410:  # 410 is wait's documented {state, reason}
        try:
            body = resp.json()
        except ValueError:
            return [*found, f"{resp.status_code} body is not JSON: {resp.text[:120]!r}"]
        error = body.get("error") if isinstance(body, dict) and set(body) == {"error"} else None
        if not (isinstance(error, dict) and isinstance(error.get("code"), str)
                and isinstance(error.get("message"), str) and isinstance(error.get("retryable"), bool)):
            return [*found, f"{resp.status_code} not the error envelope: {resp.text[:200]!r}"]
        if len(error["message"]) > 500:
            found.append(f"{resp.status_code} message of {len(error['message'])} characters")
        if resp.status_code in DETERMINISTIC_4XX and error["retryable"]:
            found.append(f"{resp.status_code} {error['code']} says retryable")
    return found


def _token(stack: LocalStack, world: World, path: str) -> str:
    return world.agent_a if path.startswith(AGENT_PREFIX) else stack.user_token()


def _modes(operation: Any) -> list[GenerationMode]:
    """Negative generation needs something to break: a parameter or a body."""
    definition = operation.definition.raw
    negatable = definition.get("parameters") or definition.get("requestBody")
    return [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if negatable else [GenerationMode.POSITIVE]


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_generated_requests__no_5xx__4xx_in_the_error_envelope(
        fuzz_world: tuple[LocalStack, World, dict[str, Any]], method: str, path: str) -> None:
    stack, world, served = fuzz_world
    schema = schemathesis.openapi.from_dict(served)
    operation = schema[path][method]
    token = _token(stack, world, path)
    wrong: list[tuple[str, Any, list[str]]] = []

    for mode in _modes(operation):
        @seed(20261201)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def run(data: Any) -> None:
            case = data.draw(operation.as_strategy(generation_mode=mode))  # noqa: B023
            if case.path_parameters and data.draw(st.integers(0, 3)) > 0:  # mostly real objects
                case.path_parameters = {k: world.a.get(k, v) for k, v in case.path_parameters.items()}
            (case.headers or {}).pop("Authorization", None)  # the caller's real token, below
            for name in LONG_POLLS & set(case.query or {}):
                if str(case.query[name]).isdigit() and int(case.query[name]) > 1:
                    case.query[name] = 1
            resp = case.call(base_url=stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            SENT.append((f"{method} {path}", mode.value, resp.status_code))  # noqa: B023
            found = problems(resp)  # type: ignore[arg-type]
            if found:
                wrong.append((mode.value, _request(case), found))  # noqa: B023

        run()
        sent = sum(1 for op, m, _ in SENT if op == f"{method} {path}" and m == mode.value)
        assert sent >= 1, f"no {mode.value} request generated"  # one, for an operation with nothing to vary
    assert not wrong, f"{len(wrong)} bad answers:\n" + "\n".join(map(str, wrong[:20]))


def _request(case: Any) -> str:
    body = case.body if not isinstance(case.body, (bytes, str)) else repr(case.body)[:200]
    return json.dumps({"path": case.formatted_path, "query": case.query, "headers": case.headers,
                       "body": body}, default=repr)[:600]


def test_fuzz__every_served_operation__is_a_generated_case(
        fuzz_world: tuple[LocalStack, World, dict[str, Any]]) -> None:
    """The generated cases above are parametrized by the app's route table; the document the API serves has
    exactly those operations, so every served route is fuzzed (each case checks its own requests)."""
    _, _, served = fuzz_world
    assert sorted((m.upper(), p) for p, item in served["paths"].items() for m in item) == OPERATIONS
