"""The DynamoStore on fresh tables of the emulator, and raw access to an aggregate in either store: for the
contract suite and the interleaving explorer's emulator cases."""
from __future__ import annotations

import os
import uuid
from typing import Any

import boto3

from chalicelib.store import codec, models
from chalicelib.store.dynamo import DynamoStore
from chalicelib.store.expr import to_attr
from chalicelib.store.memory import MemoryStore
from chalicelib.store.tables import create_tables
from scripts.local.env import local_env


def dynamo_store(endpoint: str) -> DynamoStore:
    """A DynamoStore on fresh tables of the emulator (a prefix of its own)."""
    for key, value in local_env().items():
        if key.startswith("AWS_") and key != "AWS_ENDPOINT_URL":
            os.environ.setdefault(key, value)
    models.configure(prefix=f"c{uuid.uuid4().hex[:8]}-", host=endpoint, region="us-east-1")
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    create_tables(client)
    return DynamoStore(client)


def put_raw(store: Any, item: dict[str, Any]) -> None:
    """Store an aggregate exactly as another writer left it (flags as strings, rows without a status...)."""
    if isinstance(store, MemoryStore):
        store.put_raw_session(item)
    else:
        store.client.put_item(TableName=store.sessions_table, Item={k: to_attr(v) for k, v in item.items()})


def raw(store: Any, session_id: str) -> dict[str, Any]:
    if isinstance(store, MemoryStore):
        return store.items[session_id]
    resp = store.client.get_item(TableName=store.sessions_table, Key={"session_id": {"S": session_id}},
                                 ConsistentRead=True)
    return codec.from_attrs(resp["Item"])
