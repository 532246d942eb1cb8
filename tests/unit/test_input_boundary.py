"""The input boundary and error envelope in process (chalice.test.Client over an in-memory store).

The same behaviours are exercised over real HTTP against the emulator in tests/integration/test_hostile_input.py;
here the storage failures can be injected.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client

import app as application
from chalicelib import bootstrap
from chalicelib.api import boundary
from chalicelib.auth.tokens import mint
from chalicelib.domain.errors import ValidationError
from chalicelib.services import readiness
from chalicelib.services.deps import Deps, Settings
from chalicelib.store.errors import translate
from chalicelib.store.memory import MemoryStore
from tests.support.fakes import CounterIds, FakeAgentctl

SECRET = "clarify-local-development-secret-not-for-production"  # the local stage's (.chalice/config.json)
HTML = "<html><body><h1>500 Internal Server Error</h1><p>Traceback in moto/dynamodb/models.py</p></body></html>"


class FailingStore(MemoryStore):
    """Lists of tasks fail the way the DynamoDB store reports a failure (StoreUnavailable from a ClientError)."""

    error_code = "InternalServerError"

    def page_tasks(self, *_: Any) -> Any:
        cause = ClientError({"Error": {"Code": self.error_code, "Message": HTML}}, "Query")
        raise translate(cause) from cause


@pytest.fixture
def store() -> Iterator[FailingStore]:
    memory = FailingStore()
    deps = Deps(store=memory, agentctl=FakeAgentctl(), clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
                new_id=CounterIds(), agent_token=lambda w, s: "x", settings=Settings(deployment_id="unit"))
    memory.set_meta("ready#unit", "true", deps.now())
    readiness.forget()
    bootstrap.override(deps)
    yield memory
    bootstrap.override(None)
    readiness.forget()


def http(method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    token = mint(SECRET, sub="user-1", role="user", workspace_id="ws-1")
    with Client(application.app, stage_name="local") as client:
        resp = client.http.request(method, "/api/v1" + path, body=body or b"",
                                   headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return resp.status_code, json.loads(resp.body or b"null")


# ------------------------------------------------------------------ storage failures
def test_store_failure__transient__503_retryable_and_no_storage_internals(store: FailingStore) -> None:
    status, body = http("GET", "/tasks")
    assert status == 503
    assert body["error"]["code"] == "store_unavailable" and body["error"]["retryable"] is True
    assert "html" not in json.dumps(body).lower() and "moto" not in json.dumps(body)


def test_store_failure__refused_by_the_database__not_retryable_and_no_internals(store: FailingStore) -> None:
    store.error_code = "ValidationException"
    status, body = http("GET", "/tasks")
    assert status == 500
    assert body["error"]["retryable"] is False
    assert "html" not in json.dumps(body).lower() and "ValidationException" not in json.dumps(body)


def test_unexpected_error__500_not_retryable(store: FailingStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(FailingStore, "page_tasks", boom)
    status, body = http("GET", "/tasks")
    assert (status, body["error"]["code"], body["error"]["retryable"]) == (500, "internal_error", False)
    assert "secret" not in body["error"]["message"]


# ------------------------------------------------------------------ the boundary in process
def test_body__over_the_cap__413_payload_too_large(store: FailingStore) -> None:
    padding = "x" * boundary.MAX_BODY_BYTES
    status, body = http("POST", "/tasks", json.dumps({"title": "t", "padding": padding}).encode())
    assert (status, body["error"]["code"], body["error"]["retryable"]) == (413, "payload_too_large", False)
    assert store.tasks == {}


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"title": "\\ud800"}', "title"),
    (b'{"title": "ok", "x": ["a", "\\udfff"]}', "x[1]"),
    (b'{"\\ud83d": "lone high surrogate in a key"}', "\ufffd"),
    (b'{"title": "ok", "n": ' + b"9" * 5000 + b"}", "n"),  # past Python's int() digit limit too
    (b'{"title": "ok", "n": ' + b"9" * 40 + b"}", "n"),
    (b'{"title": "ok", "n": 1e400}', "n"),
    (b'{"title": "ok", "n": NaN}', "n"),
    (b'{"title": "ok", "n": [Infinity]}', "n[0]"),
    (b'{"title": "\xed\xa0\x80"}', "body"),  # an encoded surrogate: not UTF-8
    (b'{"title": "\xff"}', "body"),
    (b"[" * 100_000 + b"]" * 100_000, "body"),
    (b'{"a":' * 17 + b"1" + b"}" * 17, "body"),
])
def test_body__hostile_json__400_naming_the_field_and_nothing_written(store: FailingStore, raw: bytes,
                                                                      field: str) -> None:
    status, body = http("POST", "/tasks", raw)
    assert (status, body["error"]["code"]) == (400, "validation_error"), body
    assert body["error"]["details"]["field"] == field and body["error"]["retryable"] is False
    assert store.tasks == {}


def test_body__brackets_inside_strings__not_nesting() -> None:
    assert boundary.parse_body(json.dumps({"title": "[" * 1000 + "{" * 1000}).encode()) == {
        "title": "[" * 1000 + "{" * 1000}


def test_body__deepest_valid_shape_and_ordinary_numbers__accepted() -> None:
    deep = {"in_reply_to": {"answers": [{"selected_options": ["a"], "n": -(2**53 - 1), "f": 0.5}]}}
    assert boundary.parse_body(json.dumps(deep).encode()) == deep


def test_unterminated_string__linear_time_and_400() -> None:
    with pytest.raises(ValidationError):
        boundary.parse_body(b'{"title": "' + b"a" * 900_000)


def test_error_message__never_echoes_unbounded_input(store: FailingStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> Any:
        raise ValidationError("x" * 10_000, "y" * 100_000)

    monkeypatch.setattr(FailingStore, "page_tasks", refuse)
    status, body = http("GET", "/tasks")
    assert status == 400
    assert len(body["error"]["message"]) <= 500 and len(body["error"]["details"]["field"]) <= 200
