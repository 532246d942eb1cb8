"""The benchmark's tape (scripts/bench_tape.py): what a thread asks of AWS is recorded against the emulator,
priced by AWS's capacity rules, and answered again from memory with no emulator behind the client."""
from __future__ import annotations

import uuid
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from scripts.bench_tape import Tape, TapeMismatch, item_size
from scripts.local.emulator import EmulatorThread

KB = 1024


@pytest.fixture
def client(emulator: EmulatorThread) -> Any:
    return boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


@pytest.fixture
def table(client: Any) -> str:
    """A table with one global secondary index on `due` (keys only), as the sessions table has."""
    name = f"tape-{uuid.uuid4().hex[:8]}"
    client.create_table(TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                              {"AttributeName": "due", "AttributeType": "S"}],
                        GlobalSecondaryIndexes=[{"IndexName": "by_due",
                                                 "KeySchema": [{"AttributeName": "due", "KeyType": "HASH"}],
                                                 "Projection": {"ProjectionType": "KEYS_ONLY"}}],
                        BillingMode="PAY_PER_REQUEST")
    return name


def item(pk: str, size: int, **extra: Any) -> dict[str, Any]:
    """An item of exactly `size` bytes by DynamoDB's rules (names and values)."""
    base = {"pk": {"S": pk}, **extra}
    return {**base, "d": {"S": "x" * (size - item_size(base) - 1)}}


def test_item_size__dynamodb_rules() -> None:
    assert item_size({"ab": {"S": "héllo"}}) == 2 + 6
    assert item_size({"n": {"N": "-123.45"}}) == 1 + 4  # 5 significant digits: 3 bytes, plus 1
    # a map or list: 3 bytes, plus 1 per element; here 1 + (3 + 1 + 1 + 1) and 1 + (3 + 1 + 1)
    assert item_size({"m": {"M": {"k": {"BOOL": True}}}, "l": {"L": [{"NULL": True}]}}) == 7 + 6


def test_capacity__reads_writes_conditions_transactions_and_index(client: Any, table: str) -> None:
    tape = Tape()
    with tape.recording():
        client.put_item(TableName=table, Item=item("a", 3 * KB - 16))  # under 3 KB: 3 WCU, not in the index
        client.get_item(TableName=table, Key={"pk": {"S": "a"}}, ConsistentRead=True)  # ≤ 4 KB: 1 RCU
        client.get_item(TableName=table, Key={"pk": {"S": "a"}})  # eventually consistent: 0.5
        client.put_item(TableName=table, Item=item("c", 5 * KB))
        client.get_item(TableName=table, Key={"pk": {"S": "c"}}, ProjectionExpression="pk",
                        ConsistentRead=True)  # the whole 5 KB item is read, whatever is returned: 2 RCU
        client.update_item(TableName=table, Key={"pk": {"S": "a"}}, UpdateExpression="SET due = :d",
                           ExpressionAttributeValues={":d": {"S": "now"}})  # 3 KB item, enters the index: 3 + 1
        with pytest.raises(ClientError):  # the condition fails: still the item's 3 WCU, no index write
            client.update_item(TableName=table, Key={"pk": {"S": "a"}}, UpdateExpression="SET due = :d",
                               ConditionExpression="attribute_not_exists(pk)",
                               ExpressionAttributeValues={":d": {"S": "later"}})
        client.transact_write_items(TransactItems=[  # doubled: 2 × 1 (new, small) + 2 × 3; "a" leaves the index
            {"Put": {"TableName": table, "Item": item("b", 500)}},
            {"Update": {"TableName": table, "Key": {"pk": {"S": "a"}}, "UpdateExpression": "REMOVE due"}}])
    priced = [(e.operation, e.wcu, e.rcu) for e in tape.exchanges]
    assert priced == [("PutItem", 3, 0), ("GetItem", 0, 1), ("GetItem", 0, 0.5), ("PutItem", 5, 0),
                      ("GetItem", 0, 2), ("UpdateItem", 4, 0),
                      ("UpdateItem", 3, 0), ("TransactWriteItems", 9, 0)]


def test_replay__same_answers_without_the_emulator__other_requests_refused(client: Any, table: str) -> None:
    tape = Tape()
    with tape.recording():
        client.put_item(TableName=table, Item=item("r", 100))
        recorded = client.get_item(TableName=table, Key={"pk": {"S": "r"}})
        with pytest.raises(ClientError) as refused:
            client.put_item(TableName=table, Item=item("r", 100), ConditionExpression="attribute_not_exists(pk)")
    offline = boto3.client("dynamodb", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")  # nothing listens there
    with tape.replaying():
        offline.put_item(TableName=table, Item=item("r", 100))
        assert offline.get_item(TableName=table, Key={"pk": {"S": "r"}})["Item"] == recorded["Item"]
        with pytest.raises(ClientError) as again:
            offline.put_item(TableName=table, Item=item("r", 100), ConditionExpression="attribute_not_exists(pk)")
    assert again.value.response["Error"]["Code"] == refused.value.response["Error"]["Code"]
    with pytest.raises(TapeMismatch), tape.replaying():
        offline.delete_item(TableName=table, Key={"pk": {"S": "r"}})
    with pytest.raises(TapeMismatch), tape.replaying():  # fewer requests than recorded
        offline.put_item(TableName=table, Item=item("r", 100))
