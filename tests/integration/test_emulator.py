"""The local emulator answers as DynamoDB does where moto alone would not (scripts/local/emulator.py,
docs/emulator.md): one request at a time, a refused update stores nothing, an update that grows an item past
400 KB is refused, and a cancelled transaction changes nothing while its backup copies only its own items.
Each of those tests fails on moto without the patch it names; they run over HTTP, on the emulator. The last
test checks the local stream pump's use of the streams API."""
from __future__ import annotations

import threading
import uuid
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends

from scripts.local.emulator import EmulatorThread
from scripts.local.pump import StreamPump, Target

NESTED: dict[str, Any] = {"M": {"rows": {"L": [{"M": {"id": {"S": "q1"}, "tags": {"SS": ["a", "b"]},
                                                      "n": {"N": "1.5"}, "ok": {"BOOL": True}}},
                                              {"NULL": True}]},
                               "blob": {"B": b"\x00\x01"}, "deep": {"M": {"x": {"M": {"y": {"S": "z"}}}}}}}
BIG = {"S": "x" * 410_000}  # over DynamoDB's 400 KB on its own


def make_client(emulator: EmulatorThread, service: str = "dynamodb") -> Any:
    return boto3.client(service, endpoint_url=emulator.url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


@pytest.fixture
def client(emulator: EmulatorThread) -> Any:
    return make_client(emulator)


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
    streams = make_client(emulator, "dynamodbstreams")
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    return list(streams.get_records(ShardIterator=it, Limit=1000)["Records"])


def items(client: Any, table: str) -> list[dict[str, Any]]:
    return sorted(client.scan(TableName=table, ConsistentRead=True)["Items"], key=lambda i: i["sk"]["S"])


def moto_table(name: str) -> Any:
    """The emulator's own table object (the emulator runs in this process)."""
    return dynamodb_backends["123456789012"]["us-east-1"].tables[name]


def test_conditional_writes_at_once__one_request_at_a_time__one_wins(emulator: EmulatorThread, table: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Four clients write the same item at once, each on condition that nobody has yet. The backend is held
    up until a second request reaches it (or a second passes): with moto's threads alone two are inside at
    once and both can win; served one at a time, none overlaps and exactly one wins."""
    key = {"pk": {"S": "p"}, "sk": {"S": "race"}}
    make_client(emulator).put_item(TableName=table, Item={**key, "v": {"N": "0"}})
    inside, most, arrived, guard = [0], [0], threading.Event(), threading.Lock()
    update = DynamoDBBackend.update_item

    def held_up(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            if inside[0] > 1:
                arrived.set()
        arrived.wait(1.0)
        try:
            return update(self, *args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1
    monkeypatch.setattr(DynamoDBBackend, "update_item", held_up)
    clients = [make_client(emulator) for _ in range(4)]
    winners: list[int] = []

    def write(n: int) -> None:
        try:
            clients[n].update_item(TableName=table, Key=key, UpdateExpression="SET v = :one, w = :n",
                                   ConditionExpression="v = :zero", ExpressionAttributeValues={
                                       ":zero": {"N": "0"}, ":one": {"N": "1"}, ":n": {"N": str(n)}})
            winners.append(n)
        except ClientError as e:
            assert e.response["Error"]["Code"] == "ConditionalCheckFailedException"
    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most[0] == 1
    assert len(winners) == 1


def test_refused_update__stores_nothing(client: Any, table: str) -> None:
    """moto applies an update's actions in place one by one and stops at the one refused, keeping those
    before it; on a missing item it stores the bare key first. DynamoDB stores nothing."""
    key = {"pk": {"S": "p"}, "sk": {"S": "a"}}
    client.put_item(TableName=table, Item={**key, "v": {"N": "1"}, "doc": NESTED})
    before = items(client, table)
    with pytest.raises(ClientError, match="Item size to update has exceeded the maximum allowed size"):
        client.update_item(TableName=table, Key=key, UpdateExpression="SET v = :two, big = :big",
                           ExpressionAttributeValues={":two": {"N": "2"}, ":big": BIG})
    with pytest.raises(ClientError, match="incorrect data type"):  # ADD of a string: refused after the SET
        client.update_item(TableName=table, Key=key, UpdateExpression="SET v = :two ADD doc :s",
                           ExpressionAttributeValues={":two": {"N": "2"}, ":s": {"S": "x"}})
    with pytest.raises(ClientError, match="Item size to update"):
        client.update_item(TableName=table, Key={"pk": {"S": "p"}, "sk": {"S": "new"}},
                           UpdateExpression="SET big = :big", ExpressionAttributeValues={":big": BIG})
    assert items(client, table) == before


def test_item_size__nested_growth_past_the_limit__refused(client: Any, table: str) -> None:
    """moto measures an item only when a top-level attribute is set; DynamoDB refuses any update that leaves
    the item over 400 KB, a nested change included, and stores nothing. One that fits is applied."""
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


def test_cancelled_transaction__items_and_stream_as_before__table_not_copied(emulator: EmulatorThread, client: Any,
                                                                             table: str) -> None:
    """A cancelled transaction changes no item and adds no stream record (DynamoDB; moto too), and the backup
    that undoes it holds the transaction's own items: the table itself is not copied (moto replaces it with
    a deep copy taken before the transaction, every item and stream record)."""
    for sk in ("a", "b"):
        client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": sk}, "v": {"N": "1"}, "doc": NESTED})
    before, records, stored = items(client, table), len(stream_records(emulator, client, table)), moto_table(table)
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
    assert moto_table(table) is stored

    client.transact_write_items(TransactItems=[  # the same writes, nothing refusing them: all land, each streamed
        {"Update": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "a"}},
                    "UpdateExpression": "SET v = :two", "ExpressionAttributeValues": {":two": {"N": "2"}}}},
        {"Put": {"TableName": table, "Item": {"pk": {"S": "p"}, "sk": {"S": "new"}}}},
        {"Delete": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "b"}}}},
    ])
    assert [(i["sk"]["S"], i.get("v")) for i in items(client, table)] == [("a", {"N": "2"}), ("new", None)]
    assert len(stream_records(emulator, client, table)) == records + 3


def test_cancelled_transaction__refused_update_inside__nothing_stored(client: Any, table: str) -> None:
    """A transaction cancelled by its own too-large update (moto: a validation error raised half-way through)
    leaves every item as it was, the ones written before the refusal included."""
    client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": "a"}, "v": {"N": "1"}})
    before = items(client, table)
    with pytest.raises(ClientError):
        client.transact_write_items(TransactItems=[
            {"Put": {"TableName": table, "Item": {"pk": {"S": "p"}, "sk": {"S": "b"}}}},
            {"Update": {"TableName": table, "Key": {"pk": {"S": "p"}, "sk": {"S": "a"}},
                        "UpdateExpression": "SET v = :two, big = :big",
                        "ExpressionAttributeValues": {":two": {"N": "2"}, ":big": BIG}}}])
    assert items(client, table) == before


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


