"""The served OpenAPI document publishes exactly the app's route table (chalice.test.Client, no tables)."""
from __future__ import annotations

import json
import re
from typing import Any

import pytest
from chalice.test import Client

import app as application

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def _routes() -> set[tuple[str, str]]:
    return {(path, method.lower()) for path, methods in application.app.routes.items() for method in methods}


def _authorized() -> set[tuple[str, str]]:
    return {(path, method.lower()) for path, methods in application.app.routes.items()
            for method, entry in methods.items() if entry.authorizer is not None}


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(path, method): op for path, item in doc["paths"].items()
            for method, op in item.items() if method in HTTP_METHODS}


@pytest.fixture(scope="module")
def served() -> tuple[int, dict[str, str], dict[str, Any]]:
    with Client(application.app, stage_name="local") as client:
        resp = client.http.get("/api/v1/openapi.json")  # no Authorization header on purpose
    return resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, json.loads(resp.body)


@pytest.fixture(scope="module")
def doc(served: tuple[int, dict[str, str], dict[str, Any]]) -> dict[str, Any]:
    return served[2]


def test_openapi__no_token__200_json(served: tuple[int, dict[str, str], dict[str, Any]]) -> None:
    status, headers, body = served
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    assert body["openapi"].startswith("3.")


def test_openapi__paths__exactly_the_app_routes_and_methods(doc: dict[str, Any]) -> None:
    published = set(_operations(doc))
    assert published == _routes(), (
        f"missing from the document: {sorted(_routes() - published)}; not in the app: {sorted(published - _routes())}")


def test_openapi__every_operation__documented_summary(doc: dict[str, Any]) -> None:
    undocumented = sorted(key for key, op in _operations(doc).items()
                          if not str(op.get("summary", "")).strip() or op["summary"] == "(undocumented)")
    assert undocumented == [], f"add a summary for {undocumented} in chalicelib/api/openapi.py"


def test_openapi__operation_ids__unique(doc: dict[str, Any]) -> None:
    ids = [op["operationId"] for op in _operations(doc).values()]
    assert len(ids) == len(set(ids))


def test_openapi__authorized_routes__declare_bearer_security(doc: dict[str, Any]) -> None:
    ops = _operations(doc)
    scheme = doc["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    missing = sorted(key for key in _authorized() if {"bearer": []} not in ops[key].get("security", []))
    assert missing == []


def test_openapi__public_api_routes__only_health_openapi_and_sign_in_config_without_security(
        doc: dict[str, Any]) -> None:
    public = {key for key, op in _operations(doc).items() if not op.get("security")}
    assert {(p, m) for p, m in public if p.startswith("/api/v1/")} == {
        ("/api/v1/health", "get"), ("/api/v1/openapi.json", "get"), ("/api/v1/auth/config", "get")}
    assert public == set(_routes()) - _authorized()  # and the document says so for every public route


def test_openapi__path_parameters__match_the_template(doc: dict[str, Any]) -> None:
    for (path, method), op in _operations(doc).items():
        declared = sorted(p["name"] for p in op.get("parameters", []) if p["in"] == "path")
        assert declared == sorted(re.findall(r"{(\w+)}", path)), (path, method)
        assert all(p["required"] is True for p in op.get("parameters", []) if p["in"] == "path")


def test_openapi__error_responses__reference_the_error_envelope(doc: dict[str, Any]) -> None:
    error = doc["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    assert set(error["properties"]["error"]["required"]) >= {"code", "message", "retryable"}
    for key, op in _operations(doc).items():
        successes = [code for code in op["responses"] if code.startswith("2")]
        assert successes, key
        refs = [r["content"]["application/json"]["schema"].get("$ref") for code, r in op["responses"].items()
                if code.startswith("4") and "content" in r]
        assert "#/components/schemas/Error" in refs, key
