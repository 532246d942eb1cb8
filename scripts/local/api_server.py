"""Serves the Chalice app on 127.0.0.1 like API Gateway, including its gateway responses.

In AWS the template's GatewayResponses turn an authorizer denial into 401 and an unknown route into 404,
both in the API's error envelope; the local server does the same so clients see one contract.
"""
from __future__ import annotations

import argparse
import json
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
)

from chalicelib.api.errors import error_json


class GatewayHandler(ChaliceRequestHandler):
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


def make_server(app: Any, host: str = "127.0.0.1", port: int = 8000, stage: str = "local") -> LocalDevServer:
    config = Config(chalice_stage=stage, config_from_disk=_config(), user_provided_params={})
    return LocalDevServer(app, config, host, port, handler_cls=GatewayHandler)


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
    from app import app
    server = make_server(app, args.host, args.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
