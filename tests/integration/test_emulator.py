"""The local emulator behaves like DynamoDB where moto's own shortcuts are replaced (scripts/local/emulator.py):
a cancelled transaction changes no item and adds no stream record, a refused update stores nothing, and items
come back exactly as written. The whole suite trusts these, so they are checked over HTTP, on the emulator."""
from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.exceptions import TooManyClauses
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.utilities import dynamo_json_dump
from moto.dynamodb.parsing import ast_nodes, validators
from moto.dynamodb.parsing.expressions import UpdateExpressionParser

from scripts.local.emulator import EmulatorThread
from scripts.local.pump import StreamPump, Target
from tests.support.wait import eventually

NESTED: dict[str, Any] = {"M": {"rows": {"L": [{"M": {"id": {"S": "q1"}, "tags": {"SS": ["a", "b"]},
                                                      "n": {"N": "1.5"}, "ok": {"BOOL": True}}},
                                              {"NULL": True}]},
                               "blob": {"B": b"\x00\x01"}, "deep": {"M": {"x": {"M": {"y": {"S": "z"}}}}}}}


@pytest.fixture
def client(emulator: EmulatorThread) -> Any:
    return boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


@pytest.fixture
def table(client: Any) -> str:
    name = f"emu-{uuid.uuid4().hex[:8]}"
    client.create_table(TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                                   {"AttributeName": "sk", "KeyType": "RANGE"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                              {"AttributeName": "sk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST",
                        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    return name


def stream_records(emulator: EmulatorThread, client: Any, table: str) -> list[dict[str, Any]]:
    streams = boto3.client("dynamodbstreams", endpoint_url=emulator.url, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    return list(streams.get_records(ShardIterator=it, Limit=1000)["Records"])


def items(client: Any, table: str) -> list[dict[str, Any]]:
    return sorted(client.scan(TableName=table, ConsistentRead=True)["Items"], key=lambda i: i["sk"]["S"])


def test_cancelled_transaction__items_and_stream_as_before(emulator: EmulatorThread, client: Any, table: str) -> None:
    for sk in ("a", "b"):
        client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": sk}, "v": {"N": "1"}, "doc": NESTED})
    before, records = items(client, table), len(stream_records(emulator, client, table))
    with pytest.raises(ClientError) as refused:
        client.transact_write_items(TransactItems=[
            {"Update": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "a"}},
                        "UpdateExpression": "SET v = :two, doc.deep.x.y = :w", "ExpressionAttributeValues": {
                            ":two": {"N": "2"}, ":w": {"S": "changed"}}}},
            {"Put": {"TableName": table, "Item": {"pk": {"S": "p"}, "sk": {"S": "new"}}}},
            {"Delete": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "b"}}}},
            {"ConditionCheck": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "missing"}},
                                "ConditionExpression": "attribute_exists(pk)"}},
        ])
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert items(client, table) == before
    assert len(stream_records(emulator, client, table)) == records

    client.transact_write_items(TransactItems=[  # the same writes, nothing refusing them: all land, each streamed
        {"Update": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "a"}},
                    "UpdateExpression": "SET v = :two", "ExpressionAttributeValues": {":two": {"N": "2"}}}},
        {"Put": {"TableName": table, "Item": {"pk": {"S": "p"}, "sk": {"S": "new"}}}},
        {"Delete": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "b"}}}},
    ])
    assert [(i["sk"]["S"], i.get("v")) for i in items(client, table)] == [("a", {"N": "2"}), ("new", None)]
    assert len(stream_records(emulator, client, table)) == records + 3


def test_refused_update__stores_nothing(client: Any, table: str) -> None:
    client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": "a"}, "doc": NESTED})
    before = items(client, table)
    with pytest.raises(ClientError):
        client.update_item(TableName=table, Key={"pk": {"S": "p"}, "sk": {"S": "a"}},
                           UpdateExpression="SET big = :big", ExpressionAttributeValues={":big": {"S": "x" * 410_000}})
    assert items(client, table) == before


def test_update_expressions__new_and_existing_item__applied_as_dynamodb_does(client: Any, table: str) -> None:
    """The validator walks an update's own AST when the item exists, and a copy when it is created (moto
    validates that one twice): both apply the same expression alike, and a refused one changes nothing."""
    key = {"pk": {"S": "p"}, "sk": {"S": "u"}}
    update = {"UpdateExpression": "SET n = if_not_exists(n, :zero) + :one, l = list_append(if_not_exists(l, :e), :l), "
                                  "m = if_not_exists(m, :m) REMOVE gone ADD s :s",
              "ExpressionAttributeValues": {":zero": {"N": "0"}, ":one": {"N": "1"}, ":e": {"L": []},
                                            ":l": {"L": [{"S": "x"}]}, ":m": {"M": {"k": {"S": "v"}}},
                                            ":s": {"SS": ["a"]}}}
    for _ in range(2):
        client.update_item(TableName=table, Key=key, **update)
    got = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert got == {**key, "n": {"N": "2"}, "l": {"L": [{"S": "x"}, {"S": "x"}]}, "m": {"M": {"k": {"S": "v"}}},
                   "s": {"SS": ["a"]}}
    with pytest.raises(ClientError) as refused:  # one path set twice: refused by validation, nothing written
        client.update_item(TableName=table, Key=key, UpdateExpression="SET n = :one, n = :one",
                           ExpressionAttributeValues={":one": {"N": "1"}})
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(ClientError):  # no such function: refused for a new item as for an existing one
        client.update_item(TableName=table, Key={"pk": {"S": "p"}, "sk": {"S": "new"}},
                           UpdateExpression="SET n = nope(n)")
    assert client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"] == got
    assert "Item" not in client.get_item(TableName=table, Key={"pk": {"S": "p"}, "sk": {"S": "new"}})


CLAUSES = ["SET a = :v", "SET a = :v, b = :v REMOVE c ADD d :n DELETE e :s", "REMOVE a, b SET c = :v",
           "SET a = :v SET b = :v", "ADD a :n ADD b :n", "REMOVE a REMOVE b", "SET a = :v ADD b :n ADD c :n SET d = :v",
           "REMOVE a SET b = list_append(b, :l) REMOVE c", "SET #a.#b[1].c = if_not_exists(#a.x, :v) + :n, d = :v"]


@pytest.mark.parametrize("expression", CLAUSES)
def test_clause_counts__one_walk_refuses_as_moto_does(expression: str) -> None:
    """One walk counts the SET/REMOVE/ADD clauses below every node; it accepts and refuses what moto's own
    per-node search does, with the same error."""
    def verdict(walk: Any) -> str:
        try:
            walk(validators.ActionCountValidator(), UpdateExpressionParser.make(expression))
        except TooManyClauses as e:
            return str(e)
        return "accepted"
    assert verdict(validators.ActionCountValidator.traverse) == verdict(ast_nodes.DepthFirstTraverser.traverse)


def test_expressions_parsed_once__same_text_other_values__each_its_own(client: Any, table: str) -> None:
    """A request's expressions are parsed once and a condition's text is split once for all requests: the same
    text with other names or values is still decided on its own values."""
    key_a, key_b = {"pk": {"S": "p"}, "sk": {"S": "a"}}, {"pk": {"S": "p"}, "sk": {"S": "b"}}
    client.put_item(TableName=table, Item={**key_a, "v": {"N": "1"}, "w": {"N": "5"}})
    client.put_item(TableName=table, Item={**key_b, "v": {"N": "2"}, "w": {"N": "5"}})
    key_c = {"pk": {"S": "p"}, "sk": {"S": "c"}}
    client.put_item(TableName=table, Item={**key_c, "w": {"N": "5"}})

    def check(key: dict[str, Any], value: str, name: str = "v") -> dict[str, Any]:
        return {"ConditionCheck": {"TableName": table, "Key": key, "ConditionExpression": "#x = :x",
                                   "ExpressionAttributeNames": {"#x": name},
                                   "ExpressionAttributeValues": {":x": {"N": value}}}}
    client.transact_write_items(TransactItems=[check(key_a, "1"), check(key_b, "2"), check(key_c, "5", "w")])
    with pytest.raises(ClientError) as cancelled:  # same text twice: b's own value decides, and it is not 1
        client.transact_write_items(TransactItems=[check(key_a, "1"), check(key_b, "1")])
    assert [r["Code"] for r in cancelled.value.response["CancellationReasons"]] == ["None", "ConditionalCheckFailed"]
    for value, holds in (("1", True), ("2", False), ("1", True)):
        update = {"TableName": table, "Key": key_a, "UpdateExpression": "SET #x = :x", "ConditionExpression": "#x = :x",
                  "ExpressionAttributeNames": {"#x": "v"}, "ExpressionAttributeValues": {":x": {"N": value}}}
        if holds:
            client.update_item(**update)
        else:
            with pytest.raises(ClientError, match="ConditionalCheckFailed"):
                client.update_item(**update)


def test_update__old_values_answered_as_before_the_update(client: Any, table: str) -> None:
    """The item an update changes is not copied first; what the update answers about the old item is still the
    item before it."""
    key = {"pk": {"S": "p"}, "sk": {"S": "o"}}
    client.put_item(TableName=table, Item={**key, "doc": NESTED, "v": {"N": "1"}})
    update = {"TableName": table, "Key": key, "UpdateExpression": "SET v = :v, #d.#deep.#x.#y = :z",
              "ExpressionAttributeNames": {"#d": "doc", "#deep": "deep", "#x": "x", "#y": "y"},
              "ExpressionAttributeValues": {":v": {"N": "2"}, ":z": {"S": "changed"}}}
    assert client.update_item(**update, ReturnValues="ALL_OLD")["Attributes"] == {**key, "doc": NESTED, "v": {"N": "1"}}
    update["ExpressionAttributeValues"] = {":v": {"N": "3"}, ":z": {"S": "again"}}
    old = client.update_item(**update, ReturnValues="UPDATED_OLD")["Attributes"]
    assert old["v"] == {"N": "2"} and old["doc"]["M"]["deep"]["M"]["x"]["M"]["y"] == {"S": "changed"}


def test_item_size__checked_once_per_update__nested_growth_refused_too(client: Any, table: str) -> None:
    """An update is measured once, on the item it would leave: a nested change that takes the item past
    DynamoDB's limit is refused like a top-level one (moto checked only top-level sets), and stores nothing;
    one that fits is applied."""
    key = {"pk": {"S": "p"}, "sk": {"S": "z"}}
    client.put_item(TableName=table, Item={**key, "doc": {"M": {"a": {"S": "x" * 300_000}}}})
    before = items(client, table)
    with pytest.raises(ClientError, match="Item size to update has exceeded the maximum allowed size"):
        client.update_item(TableName=table, Key=key, UpdateExpression="SET doc.b = :b",
                           ExpressionAttributeValues={":b": {"S": "y" * 110_000}})
    assert items(client, table) == before
    client.update_item(TableName=table, Key=key, UpdateExpression="SET doc.b = :b, n = :n",
                       ExpressionAttributeValues={":b": {"S": "y" * 90_000}, ":n": {"N": "1"}})
    assert len(client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]["doc"]["M"]["b"]["S"]) == 90_000


def test_items__read_back_exactly_as_written(emulator: EmulatorThread, client: Any, table: str) -> None:
    item = {"pk": {"S": "p"}, "sk": {"S": "a"}, "doc": NESTED}
    client.put_item(TableName=table, Item=item)
    assert client.get_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})["Item"] == item
    assert stream_records(emulator, client, table)[-1]["dynamodb"]["NewImage"] == item


def test_stream__update_images_and_size__as_moto_makes_them(emulator: EmulatorThread, client: Any,
                                                            table: str) -> None:
    """An update's stream record takes its old image from the update's own snapshot (not a deep copy of the
    item) and is sized when read: old and new image are the item before and after, and SizeBytes is moto's
    figure (the record serialised with its placeholder), not the placeholder."""
    key = {"pk": {"S": "p"}, "sk": {"S": "s"}}
    client.put_item(TableName=table, Item={**key, "doc": NESTED, "v": {"N": "1"}})
    client.update_item(TableName=table, Key=key, UpdateExpression="SET v = :v, doc.#deep.#x.#y = :z",
                       ExpressionAttributeNames={"#deep": "deep", "#x": "x", "#y": "y"},
                       ExpressionAttributeValues={":v": {"N": "2"}, ":z": {"S": "changed"}})
    client.update_item(TableName=table, Key=key, UpdateExpression="SET v = :v",
                       ExpressionAttributeValues={":v": {"N": "3"}})
    records = stream_records(emulator, client, table)
    first, second = (r["dynamodb"] for r in records[-2:])
    assert first["OldImage"] == {**key, "doc": NESTED, "v": {"N": "1"}}
    changed = first["NewImage"]
    assert changed["v"] == {"N": "2"} and changed["doc"]["M"]["deep"]["M"]["x"]["M"]["y"] == {"S": "changed"}
    assert second["OldImage"] == changed and second["NewImage"] == {**changed, "v": {"N": "3"}}
    shard = emulator_shard(client, table)
    for stored in shard.items[-2:]:
        image = dict(stored.to_json()["dynamodb"], SizeBytes=1)
        assert stored.to_json()["dynamodb"]["SizeBytes"] == len(dynamo_json_dump(image)) > 100


def test_stream_reads__written_as_json__what_moto_s_serializer_answers(emulator: EmulatorThread, client: Any,
                                                                         table: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """GetRecords and GetShardIterator are answered as plain JSON (the record's timestamp as moto writes it):
    a client reads the same records, images and timestamps as from moto's own serializer."""
    from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

    key = {"pk": {"S": "p"}, "sk": {"S": "s"}}
    client.put_item(TableName=table, Item={**key, "doc": NESTED})
    client.update_item(TableName=table, Key=key, UpdateExpression="SET v = :v",
                       ExpressionAttributeValues={":v": {"NS": ["1", "2.5"]}})
    client.delete_item(TableName=table, Key=key)
    fast = stream_records(emulator, client, table)
    assert [r["eventName"] for r in fast] == ["INSERT", "MODIFY", "REMOVE"]
    monkeypatch.setattr(DynamoDBStreamsHandler, "serialized", DynamoDBStreamsHandler.serialized.moto_serialized)
    assert stream_records(emulator, client, table) == fast


def emulator_shard(client: Any, table: str) -> Any:
    """The emulator's own stream shard of `table` (the emulator runs in this process)."""
    from moto.dynamodb.models import dynamodb_backends
    shard = dynamodb_backends["123456789012"]["us-east-1"].tables[table].stream_shard
    assert shard is not None
    return shard


def test_plain_json__same_as_a_deep_copy_per_level() -> None:
    """The one-pass to_regular_json gives what moto's own (a deep copy at every level) gives, and shares
    nothing with the stored value."""
    value = DynamoType(NESTED)
    plain = value.to_regular_json()
    assert plain == NESTED
    plain["M"]["rows"]["L"][0]["M"]["tags"]["SS"].append("c")
    assert value.to_regular_json() == NESTED


def test_pump__stream_looked_up_once__again_after_a_failed_pass(emulator: EmulatorThread, client: Any,
                                                                 table: str) -> None:
    """The pump reuses a table's stream and shards between passes (an idle pass is one iterator and one read per
    shard); a pass over the table that fails (a recreated table's old stream, on DynamoDB) looks them up again."""
    streams = boto3.client("dynamodbstreams", endpoint_url=emulator.url, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")
    seen: list[str] = []
    checkpoints: dict[str, str] = {}
    pump = StreamPump(client, streams, [Target(table, lambda event, _: seen.extend(
        r["dynamodb"]["Keys"]["sk"]["S"] for r in event["Records"]))], checkpoints.get, checkpoints.__setitem__)
    calls: list[str] = []
    fail = [False]

    def observe(model: Any, **_: Any) -> None:
        calls.append(model.name)
        if fail[0] and model.name == "GetShardIterator":
            fail[0] = False
            raise RuntimeError("the stream is gone")
    for c in (client, streams):
        c.meta.events.register("before-call", observe)
    client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": "first"}})
    assert pump.drain() == 1 and seen == ["first"]
    calls.clear()
    assert pump.poll_once() == 0
    assert sorted(calls) == ["GetRecords", "GetShardIterator"]

    fail[0] = True
    with pytest.raises(RuntimeError):
        pump.poll_once()
    calls.clear()
    client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": "second"}})
    assert pump.poll_once() == 1 and seen == ["first", "second"]
    assert {"DescribeTable", "DescribeStream"} <= set(calls)


def test_bus_to_queue__input_paths_parsed_once__message_as_moto_builds_it(emulator: EmulatorThread) -> None:
    import jsonpath_ng.ext

    kw: dict[str, Any] = {"endpoint_url": emulator.url, "region_name": "us-east-1", "aws_access_key_id": "test",
                          "aws_secret_access_key": "test"}
    events, sqs = boto3.client("events", **kw), boto3.client("sqs", **kw)
    name = f"emu-{uuid.uuid4().hex[:8]}"
    events.create_event_bus(Name=name)
    queue = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=name, EventBusName=name, EventPattern='{"source": ["clarify"]}')
    events.put_targets(Rule=name, EventBusName=name, Targets=[
        {"Id": "plain", "Arn": arn},
        {"Id": "shaped", "Arn": arn, "InputTransformer": {"InputPathsMap": {"t": "$.detail.type"},
                                                          "InputTemplate": '{"kind": "<t>"}'}}])
    for n in range(2):
        events.put_events(Entries=[{"EventBusName": name, "Source": "clarify", "DetailType": "clarify.event",
                                    "Detail": f'{{"type": "t{n}", "n": {n}}}'}])
    bodies: list[dict[str, Any]] = []

    def four_received() -> bool:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        bodies.extend(json.loads(m["Body"]) for m in got)
        return len(bodies) >= 4
    eventually(four_received, "the four queue messages")
    plain = sorted((b for b in bodies if "detail" in b), key=lambda b: b["detail"]["n"])
    assert [(b["source"], b["detail-type"], b["detail"]) for b in plain] == [
        ("clarify", "clarify.event", {"type": "t0", "n": 0}), ("clarify", "clarify.event", {"type": "t1", "n": 1})]
    assert sorted(b["kind"] for b in bodies if "kind" in b) == ["t0", "t1"]
    assert jsonpath_ng.ext.parse("$.detail") is jsonpath_ng.ext.parse("$.detail")  # parsed once, then reused
