"""Serves the Chalice app on 127.0.0.1 like API Gateway, including its gateway responses.

In AWS the template's GatewayResponses turn an authorizer denial into 401 and an unknown route into 404,
and each path's catch-all ANY method answers a method the route does not declare with 405, all in the API's
error envelope; the local server does the same so clients see one contract. Like Lambda, it never lets one
request see another's: each serving thread has its own current request.

It also stands in for CloudFront: it serves the web client's files (chalicelib/hosting.py, exact paths only)
and adds the same security headers to every answer; and for API Gateway's CORS preflights (chalicelib/api/cors.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import socket
import threading
from typing import Any

from chalice.config import Config
from chalice.local import (
    ChaliceRequestHandler,
    ForbiddenError,
    LocalDevServer,
    LocalGatewayException,
    NotAuthorizedError,
    RouteMatcher,
    ThreadedHTTPServer,
)

from chalicelib import hosting
from chalicelib.api import cors
from chalicelib.api.errors import envelope, error_json

log = logging.getLogger(__name__)


class GatewayHandler(ChaliceRequestHandler):
    def _gateway_handle(self) -> None:
        path = self.path.split("?", 1)[0]
        if self.command in ("GET", "HEAD") and hosting.is_client_path(path):
            self._serve_file(path)
            return
        routes = self.local_gateway._app_object.routes
        try:
            resource = RouteMatcher(list(routes)).match_route(self.path).route
        except ValueError:
            resource = None  # unknown path: the app's gateway handling answers 404
        if resource is not None and self.command == "OPTIONS":
            self._parse_payload()
            self._send_http_response(204, cors.preflight_headers(self.headers.get("Origin")), None)
            return
        if resource is not None and self.command not in routes[resource]:
            self._parse_payload()  # read the body so the connection stays usable
            headers = {"Content-Type": "application/json", "Allow": ", ".join(sorted(routes[resource]))}
            body = error_json(405, "method_not_allowed", "this route does not take that method")
            self._send_http_response(405, headers, None if self.command == "HEAD" else body)
            return
        try:
            self._generic_handle()
        except Exception:
            # Only the gateway's own steps get here (views answer their errors themselves): the authorizer
            # failed, e.g. the user pool's keys could not be fetched. API Gateway answers 500 then, in the
            # template's DEFAULT_5XX envelope; closing the connection would leave the client guessing.
            log.exception("the gateway failed before the view: %s %s", self.command, self.path)
            body = json.dumps(envelope("gateway_error", "the authorizer failed", retryable=True)).encode()
            self._send_http_response(500, {"Content-Type": "application/json"}, body)

    def _serve_file(self, path: str) -> None:
        found = hosting.local_file(path)
        if found is None:
            body = None if self.command == "HEAD" else error_json(404, "not_found", "no such file")
            self._send_http_response(404, {"Content-Type": "application/json"}, body)
            return
        content_type, body, cache = found
        headers = {"Content-Type": content_type, "Cache-Control": cache}
        if self.command == "HEAD":
            self.send_response(200)
            self._send_headers({**headers, **hosting.local_headers(), "Content-Length": str(len(body))})
            return
        self._send_http_response(200, headers, body)

    def _send_http_response(self, code: int, headers: dict[str, Any], body: str | bytes | None) -> None:
        super()._send_http_response(code, {**headers, **hosting.local_headers()}, body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _gateway_handle

    def _send_error_response(self, error: LocalGatewayException) -> None:
        headers = {"Content-Type": "application/json"}
        if isinstance(error, NotAuthorizedError) or (
                isinstance(error, ForbiddenError) and b"not authorized" in (error.body or b"")):
            body = error_json(401, "unauthorized", "a valid bearer token is required")
            self._send_http_response(401, headers, body)
        elif isinstance(error, ForbiddenError):
            self._send_http_response(404, headers, error_json(404, "not_found", "no such route"))
        else:
            super()._send_error_response(error)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the run command prints what matters
        pass


class _PerThread:
    """A data descriptor holding one value per thread: it outranks the instance attribute of that name."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return getattr(self._local, "value", None)

    def __set__(self, obj: Any, value: Any) -> None:
        self._local.value = value


def isolate_requests(app: Any) -> Any:
    """Give each serving thread its own `current_request` and `lambda_context`.

    Chalice keeps both as plain attributes of the app, which is right in Lambda (one invocation at a time
    per instance) and wrong behind a threaded server: a view would read another request's caller and body.
    """
    if getattr(type(app), "_isolated", False):
        return app
    app.__class__ = type(f"PerThread{type(app).__name__}", (type(app),), {
        "_isolated": True, "current_request": _PerThread(), "lambda_context": _PerThread()})
    return app


class _Gateway(ThreadedHTTPServer):
    """Chalice's threaded dev server with a listen backlog like a gateway's: the default of 5 resets
    connections when a few dozen clients (two devices' retries, a load test) connect at once."""

    request_queue_size = 128


def make_server(app: Any, host: str = "127.0.0.1", port: int = 8000, stage: str = "local") -> LocalDevServer:
    config = Config(chalice_stage=stage, config_from_disk=_config(), user_provided_params={})
    return LocalDevServer(isolate_requests(app), config, host, port, handler_cls=GatewayHandler,
                          server_cls=_Gateway)


def _config() -> dict[str, Any]:
    with open(".chalice/config.json") as fh:
        return dict(json.load(fh))


class ApiThread:
    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = make_server(app, host, port)
        self.url = f"http://{host}:{self.server.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._open: set[socket.socket] = set()
        self._track_connections()

    def _track_connections(self) -> None:
        """Keep-alive connections outlive the listening socket; stop() closes them so the API is really gone."""
        httpd = self.server.server
        accept, finish = httpd.process_request, httpd.shutdown_request

        def process_request(request: Any, client_address: Any) -> None:
            self._open.add(request)
            accept(request, client_address)

        def shutdown_request(request: Any) -> None:
            self._open.discard(request)
            finish(request)
        httpd.process_request = process_request
        httpd.shutdown_request = shutdown_request

    def start(self) -> ApiThread:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server.server_close()
        for conn in list(self._open):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its handler


def main() -> None:
    parser = argparse.ArgumentParser(description="Clarify API (local gateway)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    from chalicelib import observability

    observability.configure()
    from app import app
    server = make_server(app, args.host, args.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
