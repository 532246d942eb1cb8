"""The local emulator: moto's server, corrected where it answers otherwise than DynamoDB (docs/emulator.md).

Each patch names the DynamoDB behaviour it restores; tests/integration/test_emulator.py checks each one over
HTTP. Nothing here makes moto faster except the transaction backup, kept for the reason its docstring gives.
"""
from __future__ import annotations

import argparse
import copy
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import bytesize
from moto.dynamodb.parsing.executors import UpdateExpressionExecutor
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
ITEM_SIZE_LIMIT = 405_000  # moto's figure for DynamoDB's 400 KB (its authors measured 409-410 KB)
Saved = tuple[Table, DynamoType, DynamoType | None, Item | None]


def _save(table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> Saved:
    item = table.get_item(hash_key, range_key)
    return table, hash_key, range_key, copy.deepcopy(item) if item is not None else None


def _put_back(saved: Saved) -> None:
    """The item as it was saved, or no item if there was none."""
    table, hash_key, range_key, item = saved
    place = table.items[hash_key] if range_key is not None else table.items
    slot = range_key if range_key is not None else hash_key
    if item is None:
        place.pop(slot, None)
    else:
        place[slot] = item


def _refused_updates_store_nothing() -> None:
    """DynamoDB: a refused UpdateItem stores nothing. moto applies the update's actions to the stored item one
    by one and stops at the first that fails (too large, a wrong type), keeping those before it; on a missing
    item it first stores the bare key. The item is put back as it was (or removed) when the update raises."""
    original = DynamoDBBackend.update_item

    def update_item(self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        table = self.get_table(table_name)
        saved = _save(table, *self.get_keys_value(table, key))
        try:
            return original(self, table_name, key, *args, **kwargs)
        except Exception:
            _put_back(saved)
            raise
    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]


def _nested_growth_refused() -> None:
    """DynamoDB: an update that leaves the item over 400 KB is refused, whatever it changes. moto measures the
    item only when a top-level attribute is set, so `SET doc.part = :big` grows an item past the limit. The
    item an update leaves is measured once more, as moto measures it, before the update is stored."""
    execute = UpdateExpressionExecutor.execute

    def execute_and_measure(self: UpdateExpressionExecutor, node: Any = None) -> None:
        execute(self, node)
        if node is None:  # the outermost call (moto recurses with a node): the update is complete
            size = sum(bytesize(k) + (v.size() if type(v) is DynamoType else bytesize(str(v)))
                       for k, v in self.item.attrs.items())
            if size > ITEM_SIZE_LIMIT:
                raise ItemSizeTooLarge  # moto's update_item answers it as DynamoDB's "Item size to update" error
    UpdateExpressionExecutor.execute = execute_and_measure  # type: ignore[method-assign]


class _Backup:
    """Set while a patched transaction runs: moto's own backup of a table is then the table itself."""
    active = threading.local()


def _transactions_back_up_their_items() -> None:
    """Not a DynamoDB behaviour, the suite's time and memory: to undo a cancelled TransactWriteItems, moto
    deep-copies every table it names, all items and every stream record the table ever held, before each
    transaction. The suite then slows to seconds per transaction and grows to gigabytes (docs/emulator.md).
    This backs up what a transaction can change, its own items and each stream's length, and restores them on
    any failure, which is what moto's copy restores."""
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        saved: list[Saved] = []
        streams: dict[int, tuple[Any, int]] = {}
        for entry in transact_items:
            for op in entry.values():
                table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                if table is None:
                    continue
                try:
                    saved.append(_save(table, *self.get_keys_value(table, op.get("Key") or op.get("Item") or {})))
                except Exception:  # noqa: BLE001,S112 - a malformed key: moto refuses it before writing anything
                    continue
                if table.stream_shard is not None:
                    streams.setdefault(id(table.stream_shard), (table.stream_shard, len(table.stream_shard.items)))
        _Backup.active.on = True
        try:
            return original(self, transact_items)
        except Exception:
            for one in reversed(saved):
                _put_back(one)
            for shard, length in streams.values():
                del shard.items[length:]
            raise
        finally:
            _Backup.active.on = False
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]

    def __deepcopy__(self: Table, memo: dict[int, Any]) -> Table:
        if getattr(_Backup.active, "on", False):
            return self
        clone = memo[id(self)] = Table.__new__(Table)  # otherwise the plain deep copy of an object
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone
    Table.__deepcopy__ = __deepcopy__  # type: ignore[attr-defined]


if not getattr(DynamoDBBackend, "clarify_patched", False):
    _refused_updates_store_nothing()
    _nested_growth_refused()
    _transactions_back_up_their_items()
    DynamoDBBackend.clarify_patched = True  # type: ignore[attr-defined]


class Serialised:
    """DynamoDB: of two conditional writes to one item, one wins. moto's server serves requests on threads and
    its backend takes no lock, so both could read the old item and both succeed. One request at a time."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:  # the whole request, body included
            return list(self.app(environ, start_response))


def make_emulator(host: str = "127.0.0.1", port: int = 4566) -> BaseWSGIServer:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    return make_server(host, port, Serialised(DomainDispatcherApplication(create_backend_app)), threaded=True)


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
    parser = argparse.ArgumentParser(description="moto server, corrected and serialised")
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
