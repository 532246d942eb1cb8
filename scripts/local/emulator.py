"""moto's server behind one lock: real DynamoDB never lets two conditional writes on one item both win,
and moto's backend does not serialise requests, so the emulator takes one request at a time."""
from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.core.responses import ActionResult
from moto.dynamodb.exceptions import ItemSizeToUpdateTooLarge
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
from moto.dynamodb.responses import DynamoHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _refused_updates_store_nothing() -> None:
    """moto applies an UpdateItem in place and only then refuses it for size, leaving the refused change
    stored; DynamoDB stores nothing. Restore the item so the emulator behaves like DynamoDB."""
    original = DynamoDBBackend.update_item
    if getattr(original, "restores_refused", False):
        return

    def update_item(self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        table = self.get_table(table_name)
        item = table.get_item(*self.get_keys_value(table, key))
        # The item's wire form, not a deep copy: several times cheaper, and every update pays for it.
        saved = item.to_json()["Attributes"] if item is not None else None
        try:
            return original(self, table_name, key, *args, **kwargs)
        except ItemSizeToUpdateTooLarge:
            if item is not None and saved is not None:
                item.attrs = LimitedSizeDict({name: DynamoType(value) for name, value in saved.items()})
            raise
    update_item.restores_refused = True  # type: ignore[attr-defined]
    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]


_refused_updates_store_nothing()

# Operations whose answer is items (or nothing) in DynamoDB's own JSON: written as is. moto's generic,
# shape-driven serializer walks every attribute of every item and costs more than the operation itself, so an
# aggregate of a few KB would look many times slower than a small item where DynamoDB shows no such gap.
ITEM_ACTIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "BatchGetItem"})


def _items_as_json() -> None:
    original = DynamoHandler.serialized
    if getattr(original, "items_as_json", False):
        return

    def serialized(self: DynamoHandler, action_result: ActionResult) -> Any:
        result = action_result.result
        if isinstance(result, dict) and self._get_action() in ITEM_ACTIONS:
            try:
                body = json.dumps(result)
            except TypeError:  # something that is not plain JSON: let moto's serializer handle it
                return original(self, action_result)
            return 200, {**self.response_headers, "Content-Type": "application/x-amz-json-1.0"}, body
        return original(self, action_result)
    serialized.items_as_json = True  # type: ignore[attr-defined]
    DynamoHandler.serialized = serialized  # type: ignore[method-assign,assignment]


_items_as_json()


class Serialised:
    """WSGI middleware: the whole request, body included, runs under one lock."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            return list(self.app(environ, start_response))


def make_emulator(host: str = "127.0.0.1", port: int = 4566) -> BaseWSGIServer:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = Serialised(DomainDispatcherApplication(create_backend_app))
    return make_server(host, port, app, threaded=True)


class EmulatorThread:
    """The emulator in a background thread (tests, benchmarks)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = make_emulator(host, port)
        self.url = f"http://{host}:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> EmulatorThread:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description="moto server, serialised")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4566)
    args = parser.parse_args()
    server = make_emulator(args.host, args.port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"emulator on http://{args.host}:{args.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
