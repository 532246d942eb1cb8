"""Table specifications derived from the PynamoDB models, and creation on an emulator or account."""
from __future__ import annotations

from typing import Any

from pynamodb.attributes import TTLAttribute
from pynamodb.models import Model

from .models import ALL_MODELS, BASE_NAMES


def _key_schema(keys: Any) -> list[dict[str, str]]:
    # HASH first: DynamoDB requires it and comparisons stay stable.
    return sorted(({"AttributeName": k["AttributeName"], "KeyType": k["KeyType"]} for k in keys),
                  key=lambda k: k["KeyType"] != "HASH")


def ttl_attribute(model: type[Model]) -> str | None:
    for name, attr in model.get_attributes().items():
        if isinstance(attr, TTLAttribute):
            return attr.attr_name or name
    return None


def table_spec(model: type[Model], table_name: str | None = None) -> dict[str, Any]:
    """CreateTable arguments (boto3 shape) for `model`, plus `TimeToLiveAttribute` when it has one."""
    schema = model._get_schema()
    spec: dict[str, Any] = {
        "TableName": table_name or model.Meta.table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": sorted(
            ({"AttributeName": a["AttributeName"], "AttributeType": a["AttributeType"]}
             for a in schema["attribute_definitions"]),
            key=lambda a: a["AttributeName"]),
        "KeySchema": _key_schema(schema["key_schema"]),
    }
    gsis = [
        {
            "IndexName": g["index_name"],
            "KeySchema": _key_schema(g["key_schema"]),
            "Projection": {"ProjectionType": g["projection"]["ProjectionType"]},
        }
        for g in schema["global_secondary_indexes"]
    ]
    if gsis:
        spec["GlobalSecondaryIndexes"] = sorted(gsis, key=lambda g: g["IndexName"])
    stream = getattr(model.Meta, "stream_view_type", None)
    if stream:
        spec["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream}
    ttl = ttl_attribute(model)
    if ttl:
        spec["TimeToLiveAttribute"] = ttl
    return spec


def all_specs() -> dict[str, dict[str, Any]]:
    """Specs keyed by base table name (tasks, sessions, ...), with the configured table names."""
    return {BASE_NAMES[m]: table_spec(m) for m in ALL_MODELS}


def create_tables(client: Any) -> list[str]:
    """Create every missing table (idempotent). Returns the names it created."""
    existing = {name for page in client.get_paginator("list_tables").paginate() for name in page["TableNames"]}
    created = []
    for spec in all_specs().values():
        spec = dict(spec)
        ttl = spec.pop("TimeToLiveAttribute", None)
        if spec["TableName"] in existing:
            continue
        client.create_table(**spec)
        client.get_waiter("table_exists").wait(TableName=spec["TableName"],
                                               WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
        if ttl:
            client.update_time_to_live(TableName=spec["TableName"],
                                       TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl})
        created.append(spec["TableName"])
    return created
