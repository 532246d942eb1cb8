"""API Gateway responses in the API's error envelope, matching scripts/local/api_server.py.

Responses API Gateway produces itself (authorizer denial, unknown route, throttling) never reach the app,
so without these a client would see `{"message": ...}` in AWS and the envelope locally.
"""
from __future__ import annotations

import json
from typing import Any

from chalicelib.api.errors import envelope

# The gateway's own text, already a quoted JSON string in the mapping template language.
GATEWAY_MESSAGE = "$context.error.messageString"


def _body(code: str, message: str | None, retryable: bool) -> str:
    if message is not None:
        return json.dumps(envelope(code, message, retryable=retryable), separators=(",", ":"))
    marker = "__message__"
    text = json.dumps(envelope(code, marker, retryable=retryable), separators=(",", ":"))
    return text.replace(json.dumps(marker), GATEWAY_MESSAGE)


def _response(status: int | None, code: str, message: str | None, retryable: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {
        "responseParameters": {"gatewayresponse.header.Cache-Control": "'no-store'"},
        "responseTemplates": {"application/json": _body(code, message, retryable)},
    }
    if status is not None:  # None keeps the gateway's own status (the DEFAULT_* families)
        response["statusCode"] = str(status)  # the extension's statusCode is a string
    return response


def gateway_responses() -> dict[str, Any]:
    """The `x-amazon-apigateway-gateway-responses` extension for the REST API definition."""
    unauthorized = _response(401, "unauthorized", "a valid bearer token is required")
    return {
        # The authorizer denied the token (Chalice returns an empty policy) -> 401, like a missing token.
        "ACCESS_DENIED": unauthorized,
        "UNAUTHORIZED": unauthorized,
        # API Gateway's answer to an unknown path or method.
        "MISSING_AUTHENTICATION_TOKEN": _response(404, "not_found", "no such route"),
        # Over API Gateway's own 10 MB (or Lambda's 6 MB payload): the app's 1 MiB cap never saw it.
        "REQUEST_TOO_LARGE": _response(413, "payload_too_large", "the request body is over the size cap"),
        "THROTTLED": _response(None, "throttled", None, retryable=True),
        "INTEGRATION_TIMEOUT": _response(None, "timeout", None, retryable=True),
        "DEFAULT_4XX": _response(None, "bad_request", None),
        "DEFAULT_5XX": _response(None, "gateway_error", None, retryable=True),
    }


def method_not_allowed() -> dict[str, Any]:
    """The catch-all `ANY` method of every route: API Gateway takes it only for a method the path does not
    declare (declared methods win), and answers 405 in the API's envelope without invoking a function.
    Without it a wrong method on a known path is the gateway's MISSING_AUTHENTICATION_TOKEN, our 404."""
    body = json.dumps(envelope("method_not_allowed", "this route does not take that method"),
                      separators=(",", ":"))
    return {
        "consumes": ["application/json"],
        "produces": ["application/json"],
        "responses": {"405": {"description": "a known route with another method"}},
        "x-amazon-apigateway-integration": {
            "type": "mock",
            "passthroughBehavior": "when_no_match",
            "requestTemplates": {"application/json": '{"statusCode": 405}'},
            # The default integration response: whatever reached the mock, the client gets this.
            "responses": {"default": {"statusCode": "405", "responseTemplates": {"application/json": body}}},
        },
    }
