"""Glue between Chalice requests and services: readiness, caller scope, body parsing, error envelope."""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from chalice import Chalice, Response

from .. import hosting
from .. import observability as obs
from ..auth.tokens import Caller
from ..bootstrap import deps
from ..domain.errors import DomainError, NotReady, PayloadTooLarge
from ..domain.public import to_json
from ..services import readiness
from ..services.deps import Deps
from . import boundary
from .errors import envelope, error_payload

log = logging.getLogger(__name__)
# CloudFront adds every security header (chalicelib/hosting.py); this one also holds when the API is called
# directly at its execute-api URL (agents).
NOSNIFF = hosting.NOSNIFF
Handler = Callable[..., tuple[int, Any]]


def json_response(status: int, body: Any) -> Response:
    return Response(body=to_json(body) if body is not None else "", status_code=status,
                    headers={"Content-Type": "application/json", "Cache-Control": "no-store", **NOSNIFF})


class Api:
    """Wraps a service call: readiness gate, caller from the authorizer context, one error mapping."""

    def __init__(self, app: Chalice) -> None:
        self.app = app

    @property
    def request(self) -> Any:
        request = self.app.current_request
        if request is None:
            raise RuntimeError("no current request")
        return request

    def body(self) -> Any:
        """The JSON body, or None when there is none, checked at the input boundary (chalicelib.api.boundary)."""
        return boundary.parse_body(self.request.raw_body)

    def query(self, name: str) -> str | None:
        params = self.request.query_params or {}
        value = params.get(name)
        return boundary.query_value(name, str(value) if value is not None else None)

    def header(self, name: str) -> str | None:
        value = self.request.headers.get(name)
        return boundary.query_value(name, str(value) if value is not None else None)

    def caller(self) -> Caller:
        ctx = (self.request.context or {}).get("authorizer") or {}
        return Caller.from_context(str(ctx.get("principalId", "")), ctx)

    def endpoint(self, fn: Callable[..., tuple[int, Any]]) -> Callable[..., Response]:
        @functools.wraps(fn)
        def view(*args: Any, **kwargs: Any) -> Response:
            started = time.monotonic()
            with obs.scope(**self._ids(fn.__name__, kwargs)), obs.traced(fn.__name__):
                response = self._serve(fn, args, kwargs)
                log.info("%s %s", fn.__name__, response.status_code,
                         extra={"fields": {"status": response.status_code,
                                             "ms": round((time.monotonic() - started) * 1000, 1)}})
                return response
        return view

    def _serve(self, fn: Callable[..., tuple[int, Any]], args: Any, kwargs: dict[str, Any]) -> Response:
        try:
            d: Deps = deps()
            if not readiness.is_ready(d):
                raise NotReady("Clarify is reconciling; it takes traffic once that succeeds")
            self._check_request(kwargs)
            caller = self.caller()
            obs.bind(workspace=caller.workspace_id)
            status, body = fn(d, caller, *args, **kwargs)
            return json_response(status, body)
        except DomainError as exc:
            status, payload = error_payload(exc)
            if status == 409:
                error = payload["error"]
                obs.count(obs.CONFLICTS, reason=(error.get("details") or {}).get("reason") or error["code"])
            return json_response(status, _bounded(payload))
        except Exception:
            log.exception("unhandled error")
            # A fault we did not foresee: nothing says the same request will succeed later.
            return json_response(500, envelope("internal_error", "an internal error occurred", retryable=False))

    def _ids(self, route: str, path_params: dict[str, Any]) -> dict[str, object]:
        """The request's ids: API Gateway's request id (else the invocation's), the route, the path's ids
        (only well-formed ones: a log never repeats arbitrary input)."""
        request = self.app.current_request
        context = (request.context or {}) if request is not None else {}
        lambda_context = getattr(self.app, "lambda_context", None)
        ids: dict[str, object] = {
            "request_id": context.get("requestId") or getattr(lambda_context, "aws_request_id", None),
            "route": route}
        for name in ("task_id", "session_id", "clarification_id"):
            value = path_params.get(name)
            if isinstance(value, str) and len(value) <= boundary.MAX_PATH_ID and boundary.PATH_ID.match(value):
                ids[name.removesuffix("_id")] = value
        return ids

    def _check_request(self, path_params: dict[str, Any]) -> None:
        """Before any service runs: the body cap (whether or not the route reads a body) and path ids."""
        raw = self.request.raw_body
        if raw and len(raw) > boundary.MAX_BODY_BYTES:
            raise PayloadTooLarge(f"the request body is over {boundary.MAX_BODY_BYTES} bytes")
        for name, value in path_params.items():
            boundary.path_id(name, str(value))


def _bounded(payload: dict[str, Any]) -> dict[str, Any]:
    """An error never echoes unbounded input: messages and named fields are cut to a readable length."""
    error = payload["error"]
    error["message"] = _cut(str(error["message"]), 500)
    details = error.get("details") or {}
    if isinstance(details.get("field"), str):
        details["field"] = _cut(details["field"], 200)
    return payload


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
