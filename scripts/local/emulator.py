"""moto's server behind one lock: real DynamoDB never lets two conditional writes on one item both win,
and moto's backend does not serialise requests, so the emulator takes one request at a time."""
from __future__ import annotations

import argparse
import base64
import copy
import functools
import json
import logging
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import moto.dynamodb.models as moto_dynamodb
from moto.core import responses as moto_responses
from moto.core.responses import ActionResult
from moto.core.serialize import TimestampSerializer
from moto.dynamodb import comparisons
from moto.dynamodb import responses as moto_responses_dynamodb
from moto.dynamodb.exceptions import ItemSizeTooLarge, ItemSizeToUpdateTooLarge, TooManyClauses
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models import table as moto_table
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import bytesize
from moto.dynamodb.parsing import ast_nodes, executors, validators
from moto.dynamodb.parsing.expressions import UpdateExpressionParser
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


# What the request this thread is serving is in the middle of (requests run one at a time, see Serialised).
_REQUEST = threading.local()


def _an_update_validates_its_own_ast() -> None:
    """moto parses an UpdateItem's expression, then its validator deep-copies the whole AST before walking it
    (a fifth of the update's time), because for a new item the one AST is validated twice. For an existing
    item it is validated once and never used again, so the validator may walk the parsed AST itself."""
    original = validators.Validator.__init__
    if getattr(original, "own_ast", False):
        return

    def __init__(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        if not getattr(_REQUEST, "validated_once", False):
            original(self, expression, *args, **kwargs)
            return
        expression.__deepcopy__ = lambda memo: expression  # the root's copy is the root: nothing is copied
        try:
            original(self, expression, *args, **kwargs)
        finally:
            del expression.__deepcopy__
    __init__.own_ast = True  # type: ignore[attr-defined]
    validators.Validator.__init__ = __init__  # type: ignore[method-assign]


_an_update_validates_its_own_ast()


def _refused_updates_store_nothing() -> None:
    """moto applies an UpdateItem in place and only then refuses it for size, leaving the refused change
    stored; DynamoDB stores nothing. Restore the item so the emulator behaves like DynamoDB."""
    original = DynamoDBBackend.update_item
    if getattr(original, "restores_refused", False):
        return

    def update_item(self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        table = self.get_table(table_name)
        item = table.get_item(*self.get_keys_value(table, key))
        # The item's wire form, not a deep copy: several times cheaper, and every update pays for it; it is also
        # the stream record's old image, in place of moto's own deep copy of the item (_ItemBefore).
        saved = item.to_json()["Attributes"] if item is not None else None
        _REQUEST.validated_once = item is not None  # see _an_update_validates_its_own_ast
        _REQUEST.before = (item, saved) if item is not None and saved is not None else None  # see _ItemBefore
        try:
            return original(self, table_name, key, *args, **kwargs)
        except ItemSizeToUpdateTooLarge:
            if item is not None and saved is not None:
                item.attrs = LimitedSizeDict({name: DynamoType(value) for name, value in saved.items()})
            raise
        finally:
            _REQUEST.validated_once = False
            _REQUEST.before = None
    update_item.restores_refused = True  # type: ignore[attr-defined]
    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]


_refused_updates_store_nothing()

class _CopiesMotoNeedsNot:
    """`copy` in moto's DynamoDB models and handler, without the copies they need not make: a table named by a
    transaction while `tables_kept` (see _transactions_back_up_their_items), and an item. moto deep-copies an
    item in two places, both in UpdateItem: its handler, only to take the item's wire form at once, before the
    update (that wire form already is a copy); its backend, for the stream record's old image, which the
    update's own wire-form snapshot already is (_ItemBefore)."""

    tables_kept = False

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    def deepcopy(self, x: Any, memo: dict[int, Any] | None = None) -> Any:
        if self.tables_kept and isinstance(x, Table):
            return x
        if isinstance(x, Item):
            before: tuple[Item, dict[str, Any]] | None = getattr(_REQUEST, "before", None)
            return _ItemBefore(x, before[1]) if before is not None and x is before[0] else x
        return copy.deepcopy(x, memo)


COPIES = _CopiesMotoNeedsNot()
moto_dynamodb.copy = COPIES  # type: ignore[attr-defined]
moto_responses_dynamodb.copy = COPIES  # type: ignore[attr-defined]


class _ItemBefore:
    """What moto's UpdateItem deep-copies the item for: its stream record's old image (the item's wire form and
    keys). The update's wire-form snapshot (see _refused_updates_store_nothing) already is that image."""

    def __init__(self, item: Item, attributes: dict[str, Any]) -> None:
        self.hash_key, self.range_key, self.attributes = item.hash_key, item.range_key, attributes

    def to_json(self) -> dict[str, Any]:
        return {"Attributes": self.attributes}


def _transactions_back_up_their_items() -> None:
    """moto backs up a transaction by deep-copying every table it names (all items and every stream record
    the table ever wrote), so a transaction costs more the longer the emulator runs. Back up only what a
    transaction can change, its own items and the length of each stream, and restore them when it fails."""
    original = DynamoDBBackend.transact_write_items
    if getattr(original, "backs_up_items", False):
        return

    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        saved: list[tuple[Table, DynamoType, DynamoType | None, Item | None]] = []
        streams: dict[int, tuple[Any, int]] = {}
        for entry in transact_items:
            for op in entry.values():
                table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                if table is None:
                    continue
                key = op.get("Key") or op.get("Item") or {}
                try:
                    hash_key, range_key = self.get_keys_value(table, key)
                except Exception:  # noqa: BLE001 - moto itself refuses it, before writing anything
                    continue
                item = table.get_item(hash_key, range_key)
                saved.append((table, hash_key, range_key, copy.deepcopy(item) if item is not None else None))
                shard = table.stream_shard
                if shard is not None:
                    streams.setdefault(id(shard), (shard, len(shard.items)))
        COPIES.tables_kept = True
        try:
            return original(self, transact_items)
        except Exception:
            for table, hash_key, range_key, item in reversed(saved):
                place = table.items[hash_key] if range_key is not None else table.items
                slot = range_key if range_key is not None else hash_key
                if item is None:
                    place.pop(slot, None)
                else:
                    place[slot] = item
            for shard, length in streams.values():
                del shard.items[length:]
            raise
        finally:
            COPIES.tables_kept = False
    transact_write_items.backs_up_items = True  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def _plain_json_in_one_pass() -> None:
    """moto's DynamoType.to_regular_json deep-copies a value and then each of its members again, level by
    level (quadratic in the nesting); every item it answers or streams goes through it. Same result, one pass."""
    if getattr(DynamoType.to_regular_json, "one_pass", False):
        return

    def to_regular_json(self: DynamoType) -> dict[str, Any]:
        value = self.value
        if isinstance(value, dict):
            value = {k: v.to_regular_json() if isinstance(v, DynamoType) else copy.deepcopy(v)
                     for k, v in value.items()}
        elif isinstance(value, list):
            value = [v.to_regular_json() if isinstance(v, DynamoType) else copy.deepcopy(v) for v in value]
        else:
            value = copy.deepcopy(value)
        if self.is_binary() and isinstance(value, str):
            value = base64.b64decode(value)
        return {self.type: value}
    to_regular_json.one_pass = True  # type: ignore[attr-defined]
    DynamoType.to_regular_json = to_regular_json  # type: ignore[method-assign]


_transactions_back_up_their_items()
_plain_json_in_one_pass()

# Operations whose answer is items (or nothing) in DynamoDB's own JSON: written as is. moto's generic,
# shape-driven serializer walks every attribute of every item and costs more than the operation itself, so an
# aggregate of a few KB would look many times slower than a small item where DynamoDB shows no such gap. The
# same holds for a stream's records (their old and new images) and its iterators, which the stream pump reads
# several times a second; a record's one timestamp is written as moto's serializer writes it.
ITEM_ACTIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "BatchGetItem"})
STREAM_ACTIONS = frozenset({"GetRecords", "GetShardIterator"})


def _epoch(value: Any) -> Any:
    if isinstance(value, datetime):
        return TimestampSerializer._timestamp_unixtimestamp(value)
    raise TypeError(f"{type(value).__name__} is not plain JSON")


def _items_as_json() -> None:
    for handler, actions in ((DynamoHandler, ITEM_ACTIONS), (DynamoDBStreamsHandler, STREAM_ACTIONS)):
        _answers_as_json(handler, actions)


def _answers_as_json(handler: type[Any], actions: frozenset[str]) -> None:
    original = handler.serialized
    if getattr(original, "items_as_json", False):
        return

    def serialized(self: Any, action_result: ActionResult) -> Any:
        result = action_result.result
        if isinstance(result, dict) and self._get_action() in actions:
            try:
                body = json.dumps(result, default=_epoch)
            except TypeError:  # something that is not plain JSON: let moto's serializer handle it
                return original(self, action_result)
            return 200, {**self.response_headers, "Content-Type": "application/x-amz-json-1.0"}, body
        return original(self, action_result)
    serialized.items_as_json = True  # type: ignore[attr-defined]
    serialized.moto_serialized = original  # type: ignore[attr-defined]
    handler.serialized = serialized


_items_as_json()


def _per_request_lookups_once() -> None:
    """moto repeats two lookups on every request whose answers never change while it runs: the handler's
    method names (`inspect.getmembers` of its class) and, for the JSON protocol, which service a request is
    for (a scan of its module list and URL patterns). Remembered, they no longer cost more than a GetItem."""
    names = moto_responses.method_names_from_class
    if not hasattr(names, "cache_info"):
        moto_responses.method_names_from_class = functools.lru_cache(maxsize=None)(names)  # type: ignore[assignment]


_per_request_lookups_once()


def _validators_pick_handlers_once() -> None:
    """moto's expression validators walk the AST ten times per UpdateItem, and at every node of every walk each
    rebuilds its node-type → handler map (twice: to test the node, then to pick its handler) and asks an ABC
    `isinstance` of it. The map is fixed per walker and no node class is registered virtually, so the handler
    for a node's class is the same every time: each walker remembers it (and a walker without a per-child hook
    is not called for one at every child). Same walk, same handlers, same AST."""
    cls = ast_nodes.DepthFirstTraverser
    if getattr(cls, "handlers_once", False):
        return
    is_node: dict[type, bool] = {}

    def handler_for(self: Any, kind: type) -> Callable[[Any], Any] | None:
        held: dict[type, Callable[[Any], Any] | None] | None = self.__dict__.get("_handler_for")
        if held is None:
            held = self.__dict__["_handler_for"] = {}
        if kind not in held:
            held[kind] = next((h for k, h in self._processing_map().items() if issubclass(kind, k)), None)
        return held[kind]

    no_hook = ast_nodes.DepthFirstTraverser.pre_processing_of_child

    def traverse_node_recursively(self: Any, node: Any, child_id: int = -1) -> Any:
        kind = type(node)
        if not is_node.get(kind, False) and not is_node.setdefault(kind, issubclass(kind, ast_nodes.Node)):
            return node
        parent_node = node.parent
        if node.children is not None:
            hook = type(self).pre_processing_of_child is not no_hook  # only one walker has a hook
            for i, child_node in enumerate(node.children):
                if hook:
                    self.pre_processing_of_child(node, i)
                self.traverse_node_recursively(child_node, i)
        handler = handler_for(self, kind)
        if handler is not None:
            node = handler(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    cls.traverse_node_recursively = traverse_node_recursively
    cls.handlers_once = True


_validators_pick_handlers_once()


def _one_parse_per_request() -> None:
    """moto parses a request's expressions twice: its handler to check them, its backend to apply them. Within one
    request the second parse of the same text (a condition with the very same names and values; for UpdateItem,
    the update expression) is the first one's result. A condition's parse is a pure tree; the handler reads an
    update's AST before the backend uses it. Nothing is remembered beyond the request (see Serialised)."""
    parse = comparisons.ConditionExpressionParser.parse
    if getattr(parse, "once_per_request", False):
        return

    def parse_once(self: Any) -> Any:
        memo: list[tuple[Any, ...]] | None = getattr(_REQUEST, "conditions", None)
        if memo is None:
            return parse(self)
        text, names, values = self.condition_expression, self.expression_attribute_names, \
            self.expression_attribute_values
        for seen_text, seen_names, seen_values, op, found_names, found_values in memo:
            if seen_text == text and seen_names is names and seen_values is values:
                self.expr_attr_names_found.extend(found_names)
                self.expr_attr_values_found.extend(found_values)
                return op
        op = parse(self)
        memo.append((text, names, values, op, list(self.expr_attr_names_found), list(self.expr_attr_values_found)))
        return op
    parse_once.once_per_request = True  # type: ignore[attr-defined]
    comparisons.ConditionExpressionParser.parse = parse_once  # type: ignore[method-assign]

    make = UpdateExpressionParser.make.__func__  # type: ignore[attr-defined]

    def make_once(cls: Any, text: str) -> Any:
        memo: dict[str, Any] | None = getattr(_REQUEST, "updates", None)
        if memo is None:
            return make(cls, text)
        if text not in memo:
            memo[text] = make(cls, text)
        return memo[text]
    UpdateExpressionParser.make = classmethod(make_once)  # type: ignore[method-assign,assignment]

    handle = DynamoHandler.update_item

    def update_item(self: DynamoHandler) -> Any:
        _REQUEST.updates = {}  # one UpdateItem, one update expression: its two parses are one
        try:
            return handle(self)
        finally:
            _REQUEST.updates = None
    DynamoHandler.update_item = update_item  # type: ignore[method-assign]


_one_parse_per_request()


def _clauses_counted_once() -> None:
    """moto allows one SET, one REMOVE and one ADD clause per update expression by counting, at every node of
    the AST, the clauses below it, by a fresh search of that node's subtree: quadratic in the expression, and
    on an update of a few paths more than the rest of its validation. Each node's counts follow from its
    children's, so one walk counts them all, checking the nodes in moto's order and refusing with its error."""
    cls = validators.ActionCountValidator
    if "counts_once" in cls.__dict__:
        return
    kinds = ((ast_nodes.UpdateExpressionAddClause, "ADD"), (ast_nodes.UpdateExpressionRemoveClause, "REMOVE"),
             (ast_nodes.UpdateExpressionSetClause, "SET"))
    searched = (ast_nodes.Expression, ast_nodes.UpdateExpressionFunction)  # what find_clauses descends into

    def counts(node: Any) -> list[int]:
        if not isinstance(node, ast_nodes.Node):
            return [0] * len(kinds)
        children = node.children or []
        below = [counts(child) for child in children]
        total = [0] * len(kinds)
        for child, child_counts in zip(children, below, strict=True):
            descend = isinstance(child, searched)
            for i, (kind, _) in enumerate(kinds):
                total[i] += 1 if type(child) is kind else child_counts[i] if descend else 0
        if isinstance(node, ast_nodes.UpdateExpression):
            for (_, name), n in zip(kinds, total, strict=True):
                if n > 1:
                    raise TooManyClauses(name)
        return total

    def traverse(self: Any, node: Any) -> Any:
        counts(node)
        return node
    cls.traverse = traverse
    cls.counts_once = True


_clauses_counted_once()


def _conditions_lexed_once() -> None:
    """moto splits a condition into tokens by trying six regular expressions at every position of its text (most
    of a condition's parse). The tokens follow from the text alone and are immutable, and a store sends the same
    few condition texts again and again (names and values vary, the text does not): each text is split once."""
    parser = comparisons.ConditionExpressionParser
    if "lexed_once" in parser.__dict__:
        return
    lex = parser._lex_condition_expression

    @functools.lru_cache(maxsize=4096)
    def tokens(text: str) -> tuple[Any, ...]:
        return tuple(lex(parser(text, {}, {})))

    def _lex_condition_expression(self: Any) -> Any:
        return deque(tokens(self.condition_expression))
    parser._lex_condition_expression = _lex_condition_expression
    parser.lexed_once = True


_conditions_lexed_once()


ITEM_SIZE_LIMIT = 405000  # moto's: DynamoDB's 400 KB, measured by moto's authors to lie between 409 and 410 KB


def _item_size_checked_once() -> None:
    """moto refuses an item over DynamoDB's size limit by summing the whole item's size at every top-level
    attribute an update sets (twice per Clarify write: its version and time). One update is one check: the
    attributes are set unchecked and the item that results is measured once, at the same limit and with the
    same error, before anything else sees it (a refused update is then undone, see _refused_updates_store_nothing)."""
    setitem = LimitedSizeDict.__setitem__
    if getattr(setitem, "checked_once", False):
        return

    def __setitem__(self: LimitedSizeDict, key: str, value: Any) -> None:
        if getattr(_REQUEST, "deferred", False):
            dict.__setitem__(self, key, value)
        else:
            setitem(self, key, value)
    __setitem__.checked_once = True  # type: ignore[attr-defined]
    LimitedSizeDict.__setitem__ = __setitem__  # type: ignore[method-assign]

    execute = executors.UpdateExpressionExecutor.execute

    def execute_checked_once(self: Any, node: Any = None) -> None:
        if getattr(_REQUEST, "deferred", False):  # a nested call: the outermost one checks
            return execute(self, node)
        _REQUEST.deferred = True
        try:
            execute(self, node)
        finally:
            _REQUEST.deferred = False
        attrs = self.item.attrs
        size = sum(bytesize(k) + (v.size() if type(v) is DynamoType else bytesize(str(v))) for k, v in attrs.items())
        if size > ITEM_SIZE_LIMIT:
            raise ItemSizeTooLarge
    executors.UpdateExpressionExecutor.execute = execute_checked_once  # type: ignore[method-assign]


_item_size_checked_once()



def _stream_records_sized_when_read() -> None:
    """moto sizes each stream record (`SizeBytes`) by serialising it whole, old and new image, as the write
    that makes it is answered; DynamoDB's streams cost a write no latency. The record is sized when first read,
    from the same content, so the figure is the one moto would have given."""
    record = moto_table.StreamRecord
    if "sized_when_read" in record.__dict__:
        return
    dump, init = moto_table.dynamo_json_dump, record.__init__

    def dump_unless_sizing_later(value: Any) -> str:
        return "" if getattr(_REQUEST, "sizing_later", False) else dump(value)
    moto_table.dynamo_json_dump = dump_unless_sizing_later

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _REQUEST.sizing_later = True
        try:
            init(self, *args, **kwargs)
        finally:
            _REQUEST.sizing_later = False
        self.size_pending = True

    def to_json(self: Any) -> dict[str, Any]:
        if self.__dict__.pop("size_pending", False):
            image = self.record["dynamodb"]
            image["SizeBytes"] = 1  # as moto measures it: with its placeholder in place
            image["SizeBytes"] = len(dump(image))
        return self.record
    record.__init__ = __init__
    record.to_json = to_json
    record.sized_when_read = True


_stream_records_sized_when_read()


def _jsonpaths_parsed_once() -> None:
    """moto's EventBridge builds each target's input by parsing its input paths (eight by default) with
    jsonpath_ng, which builds a new parser for every path of every event (~0.7 ms each): the local bus copies
    every event to a queue, so this was a twelfth of the integration tests' CPU. A parsed path follows from its
    text alone and is only read (`find`): each text is parsed once."""
    import jsonpath_ng.ext

    if getattr(jsonpath_ng.ext.parse, "parsed_once", False):
        return
    parse = functools.lru_cache(maxsize=1024)(jsonpath_ng.ext.parse)
    setattr(parse, "parsed_once", True)  # noqa: B010 - a mark on the function moto imports when it runs
    jsonpath_ng.ext.parse = parse  # moto imports it at each call (moto/events/utils.py)


_jsonpaths_parsed_once()


class Dispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering its choice for JSON-protocol requests: the service follows from the host,
    the `X-Amz-Target` prefix and the signature's scope; anything else is decided afresh, as moto does."""

    def __init__(self) -> None:
        super().__init__(create_backend_app)
        self.chosen: dict[tuple[str, ...], Any] = {}

    def get_application(self, environ: dict[str, Any]) -> Any:
        target = environ.get("HTTP_X_AMZ_TARGET")
        if not target:
            return super().get_application(environ)
        scope = environ.get("HTTP_AUTHORIZATION", "").partition("Credential=")[2].split("/")[2:4]
        key = (environ.get("HTTP_HOST", ""), environ.get("PATH_INFO", ""), target.partition(".")[0], *scope)
        app = self.chosen.get(key)
        if app is None:
            app = self.chosen[key] = super().get_application(environ)
        return app


class Serialised:
    """WSGI middleware: the whole request, body included, runs under one lock."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            _REQUEST.conditions = []  # see _one_parse_per_request
            try:
                return list(self.app(environ, start_response))
            finally:
                _REQUEST.conditions = None


def make_emulator(host: str = "127.0.0.1", port: int = 4566) -> BaseWSGIServer:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = Serialised(Dispatcher())
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
