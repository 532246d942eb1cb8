"""DynamoDB table resources, derived from the PynamoDB models through `table_spec` (one definition)."""
from __future__ import annotations

from typing import Any

from pynamodb.models import Model

from chalicelib.store.models import ALL_MODELS, BASE_NAMES
from chalicelib.store.tables import table_spec

Resource = dict[str, Any]


def logical_id(base: str) -> str:
    """`sessions` -> `SessionsTable`; stable, because renaming a logical id replaces the table."""
    return "".join(part.capitalize() for part in base.split("_")) + "Table"


def table_properties(model: type[Model], table_name: str) -> dict[str, Any]:
    """CloudFormation properties for `model`: the CreateTable shape plus TTL, PITR and deletion protection."""
    spec = table_spec(model, table_name)
    props: dict[str, Any] = {
        "TableName": spec["TableName"],
        "BillingMode": spec["BillingMode"],
        "AttributeDefinitions": spec["AttributeDefinitions"],
        "KeySchema": spec["KeySchema"],
        # Restores to any second of the last 35 days are the recovery path for bad writes (README: Deploying).
        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        # A stack mistake must not be able to drop production data.
        "DeletionProtectionEnabled": True,
    }
    if "GlobalSecondaryIndexes" in spec:
        props["GlobalSecondaryIndexes"] = spec["GlobalSecondaryIndexes"]
    if "StreamSpecification" in spec:
        # CloudFormation has no StreamEnabled flag: a view type enables the stream.
        props["StreamSpecification"] = {"StreamViewType": spec["StreamSpecification"]["StreamViewType"]}
    if "TimeToLiveAttribute" in spec:
        props["TimeToLiveSpecification"] = {"AttributeName": spec["TimeToLiveAttribute"], "Enabled": True}
    return props


def table_resource(model: type[Model], table_name: str) -> Resource:
    return {
        "Type": "AWS::DynamoDB::Table",
        # Keep data when the stack is deleted or a property forces replacement; a failed first create may
        # still clean up, so a retried first deploy does not trip over orphaned tables.
        "DeletionPolicy": "RetainExceptOnCreate",
        "UpdateReplacePolicy": "Retain",
        "Properties": table_properties(model, table_name),
    }


def table_resources(prefix: str) -> dict[str, Resource]:
    """Every model's table, named `prefix + base name` (the runtime's CLARIFY_TABLE_PREFIX convention)."""
    return {logical_id(BASE_NAMES[m]): table_resource(m, prefix + BASE_NAMES[m]) for m in ALL_MODELS}


def base_names() -> list[str]:
    return [BASE_NAMES[m] for m in ALL_MODELS]
