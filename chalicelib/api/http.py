"""Glue between Chalice requests and services: readiness, caller scope, body parsing, error envelope."""
from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from chalice import Chalice, Response

from ..auth.tokens import Caller
from ..bootstrap import deps
from ..domain.errors import DomainError, NotReady, ValidationError
from ..services import readiness
from ..services.deps import Deps
from .errors import envelope, error_payload

log = logging.getLogger(__name__)
Handler = Callable[..., tuple[int, Any]]


def json_response(status: int, body: Any) -> Response:
    return Response(body=json.dumps(body) if body is not None else "", status_code=status,
                    headers={"Content-Type": "application/json", "Cache-Control": "no-store"})


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
        """The JSON body, or None when there is none. JSON `null` is not a body object."""
        raw = self.request.raw_body
        if not raw:
            return None
        try:
            parsed = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ValidationError("body", "the request body is not valid JSON") from None
        if parsed is None:
            raise ValidationError("body", "the request body must be a JSON object")
        return parsed

    def query(self, name: str) -> str | None:
        params = self.request.query_params or {}
        value = params.get(name)
        return str(value) if value is not None else None

    def header(self, name: str) -> str | None:
        value = self.request.headers.get(name)
        return str(value) if value is not None else None

    def caller(self) -> Caller:
        ctx = (self.request.context or {}).get("authorizer") or {}
        return Caller.from_context(str(ctx.get("principalId", "")), ctx)

    def endpoint(self, fn: Callable[..., tuple[int, Any]]) -> Callable[..., Response]:
        @functools.wraps(fn)
        def view(*args: Any, **kwargs: Any) -> Response:
            try:
                d: Deps = deps()
                if not readiness.is_ready(d):
                    raise NotReady("Clarify is reconciling; it takes traffic once that succeeds")
                status, body = fn(d, self.caller(), *args, **kwargs)
                return json_response(status, body)
            except DomainError as exc:
                status, payload = error_payload(exc)
                return json_response(status, payload)
            except Exception:
                log.exception("unhandled error")
                return json_response(500, envelope("internal_error", "an internal error occurred",
                                                   retryable=True))
        return view
