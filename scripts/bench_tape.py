"""What an operation asks of AWS, recorded once against the emulator and replayed without a network.

`Tape` records every AWS request a thread sends (botocore's `Endpoint._send`, below every client: boto3's,
PynamoDB's) with the emulator's answer, and prices each DynamoDB request by AWS's capacity rules from the
items the emulator (running in this process) holds before and after it. Replayed, the same answers come back
in order from memory: botocore still builds, signs and parses every request, only the wire is gone, so the CPU
a handler spends is its own and botocore's, as in Lambda with a store that answers instantly.

Capacity (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html): a
write costs 1 WCU per KB (rounded up) of the larger of the item before and after it, per item, also when its
condition fails; a strongly consistent read 1 RCU per 4 KB (rounded up, of all items a query returns), an
eventually consistent one half; transactional requests double; each global secondary index an item enters,
leaves or changes in costs a write of the projected item (two when its index key changes).
"""
from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import botocore.endpoint
from botocore.awsrequest import AWSResponse

SERVICES = {"DynamoDB_20120810": "dynamodb", "DynamoDBStreams_20120810": "dynamodbstreams", "AWSEvents": "events"}
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


@dataclass
class Exchange:
    service: str
    operation: str
    params: dict[str, Any]
    status: int
    headers: dict[str, str]
    body: bytes
    wcu: float = 0.0
    rcu: float = 0.0

    def response(self, url: str) -> AWSResponse:
        return AWSResponse(url, self.status, self.headers, _Body(self.body))


class _Body:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


class TapeMismatch(AssertionError):
    """The replayed code asked for something else than it did when recorded."""


class Tape:
    """One thread's AWS requests and answers: `recording()` fills it, `replaying()` answers from it."""

    _current = threading.local()

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self._next = 0
        self._recording = False
        self.pricing_cpu = 0.0  # this thread's CPU spent pricing requests while recording (not the code's own)

    @contextmanager
    def recording(self) -> Iterator[Tape]:
        self._recording = True
        with self._on_this_thread():
            yield self

    @contextmanager
    def replaying(self) -> Iterator[Tape]:
        self._recording, self._next = False, 0
        with self._on_this_thread():
            yield self
        if self._next != len(self.exchanges):
            raise TapeMismatch(f"replay asked {self._next} of {len(self.exchanges)} recorded requests")

    @contextmanager
    def _on_this_thread(self) -> Iterator[None]:
        _install()
        Tape._current.tape = self
        try:
            yield
        finally:
            Tape._current.tape = None

    def send(self, endpoint: Any, request: Any) -> AWSResponse:
        service, operation = _target(request)
        if not self._recording:
            if self._next >= len(self.exchanges):
                raise TapeMismatch(f"replay asked for an unrecorded {operation}")
            exchange = self.exchanges[self._next]
            if exchange.operation != operation:
                raise TapeMismatch(f"replay asked for {operation}, the recording has {exchange.operation}")
            self._next += 1
            return exchange.response(request.url)
        started = time.thread_time()
        params = json.loads(request.body or b"{}")
        before = _items(request, service, operation, params)
        self.pricing_cpu += time.thread_time() - started
        response = _ORIGINAL_SEND(endpoint, request)
        started = time.thread_time()
        exchange = Exchange(service, operation, params, response.status_code, dict(response.headers),
                            response.content)
        if service == "dynamodb":
            answer = json.loads(exchange.body or b"{}")
            exchange.wcu, exchange.rcu = capacity(operation, params, _stored_answer(request, operation, answer),
                                                  response.status_code < 300, before,
                                                  _items(request, service, operation, params))
        self.pricing_cpu += time.thread_time() - started
        self.exchanges.append(exchange)
        return response

    @property
    def calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [(e.service, e.operation, e.params) for e in self.exchanges]


_ORIGINAL_SEND = botocore.endpoint.Endpoint._send


def _send(self: Any, request: Any) -> AWSResponse:
    tape: Tape | None = getattr(Tape._current, "tape", None)
    return tape.send(self, request) if tape is not None else _ORIGINAL_SEND(self, request)


def _install() -> None:
    botocore.endpoint.Endpoint._send = _send  # type: ignore[method-assign]


def _target(request: Any) -> tuple[str, str]:
    target = request.headers.get("X-Amz-Target")
    target = target.decode() if isinstance(target, bytes) else str(target or "")
    prefix, _, operation = target.partition(".")
    if prefix not in SERVICES:
        raise TapeMismatch(f"a request the tape does not know: {request.method} {request.url} {target!r}")
    return SERVICES[prefix], operation


# ------------------------------------------------------------------ the emulator's items around a write
Key = tuple[str, str]  # (table, canonical key JSON)


def _backend(request: Any) -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends
    region = str(request.headers.get("Authorization", b"")).split("Credential=")[1].split("/")[2]
    return dynamodb_backends[DEFAULT_ACCOUNT_ID][region]


def _stored_answer(request: Any, operation: str, answer: dict[str, Any]) -> dict[str, Any]:
    """A read's answer with every item it returns as stored: DynamoDB charges a read for the whole item,
    whatever its projection returns."""
    if operation not in ("GetItem", "Query", "Scan", "BatchGetItem"):
        return answer
    backend = _backend(request)

    def whole(table_name: str, item: dict[str, Any]) -> dict[str, Any]:
        table = backend.tables.get(table_name)
        names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else []) if table else []
        if not names or any(n not in item for n in names):
            return item
        stored = backend.get_item(table_name, {n: item[n] for n in names})
        return stored.to_json()["Attributes"] if stored is not None else item
    params = json.loads(request.body or b"{}")
    if operation == "GetItem" and "Item" in answer:
        return {**answer, "Item": whole(params["TableName"], {**answer["Item"], **params["Key"]})}
    if operation in ("Query", "Scan"):
        return {**answer, "Items": [whole(params["TableName"], i) for i in answer.get("Items", [])]}
    if operation == "BatchGetItem":
        return {**answer, "Responses": {t: [whole(t, i) for i in items]
                                        for t, items in answer.get("Responses", {}).items()}}
    return answer


def _items(request: Any, service: str, operation: str, params: dict[str, Any]) -> dict[Key, Any]:
    """The stored items (wire form, or None) a write names, read from the in-process emulator."""
    if service != "dynamodb" or operation not in WRITES:
        return {}
    backend = _backend(request)
    found: dict[Key, Any] = {}
    for table_name, key in _named(operation, params, backend):
        item = backend.get_item(table_name, key) if table_name in backend.tables else None
        found[(table_name, json.dumps(key, sort_keys=True))] = item.to_json()["Attributes"] if item else None
    return found


def _named(operation: str, params: dict[str, Any], backend: Any) -> list[tuple[str, dict[str, Any]]]:
    def key_of(table_name: str, op: dict[str, Any]) -> dict[str, Any]:
        if "Key" in op:
            return dict(op["Key"])
        table = backend.tables[table_name]
        names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        return {n: op["Item"][n] for n in names}
    if operation == "TransactWriteItems":
        return [(op["TableName"], key_of(op["TableName"], op)) for entry in params["TransactItems"]
                for op in entry.values()]
    if operation == "BatchWriteItem":
        return [(t, key_of(t, r.get("PutRequest") or r["DeleteRequest"])) for t, rs in params["RequestItems"].items()
                for r in rs]
    return [(params["TableName"], key_of(params["TableName"], params))]


# ------------------------------------------------------------------ capacity by AWS's rules
def value_size(v: dict[str, Any]) -> int:
    (kind, val), = v.items()
    if kind == "S":
        return len(val.encode())
    if kind == "N":
        return math.ceil(len(val.lstrip("-").replace(".", "").lstrip("0") or "0") / 2) + 1
    if kind == "B":
        return len(val) * 3 // 4  # base64 on the wire
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(x) + 1 for k, x in val.items())
    if kind == "L":
        return 3 + sum(value_size(x) + 1 for x in val)
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: x}) for x in val)
    return 0


def item_size(item: dict[str, Any] | None) -> int:
    return sum(len(k.encode()) + value_size(v) for k, v in (item or {}).items())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def read_units(size: int, consistent: bool) -> float:
    return max(1, math.ceil(size / 4096)) * (1.0 if consistent else 0.5)


def capacity(operation: str, params: dict[str, Any], answer: dict[str, Any], ok: bool,
             before: dict[Key, Any], after: dict[Key, Any]) -> tuple[float, float]:
    """(WCU, RCU) of one DynamoDB request, from its parameters, its answer and the items around it."""
    consistent = bool(params.get("ConsistentRead"))
    if operation == "GetItem":
        return 0.0, read_units(item_size(answer.get("Item")), consistent)
    if operation in ("Query", "Scan"):
        return 0.0, read_units(sum(item_size(i) for i in answer.get("Items", [])), consistent)
    if operation == "BatchGetItem":
        return 0.0, sum(read_units(item_size(i), bool(req.get("ConsistentRead")))
                        for table, req in params["RequestItems"].items()
                        for i in answer.get("Responses", {}).get(table, []))
    if operation == "TransactGetItems":
        return 0.0, sum(2 * read_units(item_size(r.get("Item")), True) for r in answer.get("Responses", []))
    if operation not in WRITES:
        return 0.0, 0.0
    factor = 2 if operation == "TransactWriteItems" else 1
    wcu = 0.0
    for key, old in before.items():
        new = after.get(key)
        wcu += factor * write_units(max(item_size(old), item_size(new)))
        if ok:
            wcu += index_writes(key[0], old, new)
    return wcu, 0.0


def index_writes(table_name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> int:
    """Writes to the table's global secondary indexes when an item goes from `old` to `new`."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends
    units = 0
    for backend in dynamodb_backends[DEFAULT_ACCOUNT_ID].values():
        table = backend.tables.get(table_name)
        if table is None:
            continue
        base = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        for index in table.global_indexes:
            keys = [k["AttributeName"] for k in index.schema]
            projection = index.projection or {}

            def projected(item: dict[str, Any] | None, keys: list[str] = keys, base: list[str] = base,
                          projection: dict[str, Any] = projection) -> dict[str, Any] | None:
                if item is None or any(k not in item for k in keys):
                    return None
                kind = projection.get("ProjectionType", "ALL")
                if kind == "ALL":
                    return item
                extra = projection.get("NonKeyAttributes", []) if kind == "INCLUDE" else []
                names = set(base) | set(keys) | set(extra)
                return {n: v for n, v in item.items() if n in names}
            was, now = projected(old), projected(new)
            if was is None and now is None or was == now:
                continue
            if was is not None and now is not None and any(was.get(k) != now.get(k) for k in keys):
                units += write_units(item_size(was)) + write_units(item_size(now))
            else:
                units += write_units(item_size(now if now is not None else was))
        break
    return units
