"""Least-privilege IAM: one role per function, granting only the tables, streams and targets it uses.

The access map below is the one place to change when a function starts touching a new table. A function
missing from it fails packaging, so no Lambda ships with a guessed policy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .tables import logical_id

READ = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
# No Scan anywhere: every read path goes through a key or an index (the reconciler's sparse index included).
WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem",
         "dynamodb:ConditionCheckItem")
STREAM_READ = ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
               "dynamodb:ListStreams")
R, W, RW = "r", "w", "rw"


@dataclass(frozen=True)
class Access:
    """What one function may touch. `tables` maps base table name -> r | w | rw."""

    tables: dict[str, str] = field(default_factory=dict)
    stream: str | None = None  # base name of the table whose stream triggers the function
    publish: bool = False  # puts events on the EventBridge bus
    agent_keys: bool = False  # reads the agent-token keyring (verifies agent tokens, or mints them at dispatch)
    vapid: bool = False  # reads (and makes, the first time) the Web Push VAPID key


# Keyed by the Python handler name in app.py (the part after `app.` in the Lambda Handler).
ACCESS: dict[str, Access] = {
    # The API: every table it serves; meta only to read the traffic flag.
    "app": Access({"tasks": RW, "sessions": RW, "history": RW, "events": RW, "idempotency": RW, "meta": R,
                   "devices": RW}, publish=True, agent_keys=True, vapid=True),
    # The authorizer only verifies a token: no data access at all.
    "bearer": Access(agent_keys=True),
    # Keeps history and projections (task/session pending_action) in step, and publishes client events.
    # Every publisher reads the feed too: an event already there is already on the bus.
    "sessions_stream": Access({"sessions": RW, "tasks": RW, "history": RW, "events": RW}, stream="sessions",
                              publish=True),
    "history_stream": Access({"events": RW}, stream="history", publish=True),
    # Announces new tasks and republishes summary revisions written outside a stream.
    "tasks_stream": Access({"events": RW}, stream="tasks", publish=True),
    # Repairs reservations, delivery intents and the outbox, then sets the traffic flag in meta.
    "reconcile_before_traffic": Access({"sessions": RW, "tasks": RW, "history": RW, "events": RW,
                                        "idempotency": R, "meta": RW}, publish=True, agent_keys=True),
    # Web Push for a new pending question (a target of the pending-question rule): reads the question and its
    # task, the workspace's devices; writes push markers and removes expired subscriptions.
    "push_delivery": Access({"sessions": R, "tasks": R, "devices": RW}, vapid=True),
    "reconcile_scheduled": Access({"sessions": RW, "tasks": RW, "history": RW, "events": RW, "idempotency": R,
                                   "meta": R}, publish=True, agent_keys=True),
}


def access_for(handler: str) -> Access:
    """The declared access of a Chalice handler. Raises KeyError naming the handler when undeclared."""
    try:
        return ACCESS[handler]
    except KeyError:
        raise KeyError(f"no IAM access declared for handler {handler!r} in infra/iam.py ACCESS") from None


def _table_arns(base: str) -> list[Any]:
    table = logical_id(base)
    # Index ARNs are separate IAM resources: Query on a GSI needs table/<name>/index/*.
    return [{"Fn::GetAtt": [table, "Arn"]}, {"Fn::Sub": f"${{{table}.Arn}}/index/*"}]


def _table_statements(tables: dict[str, str]) -> list[dict[str, Any]]:
    statements = []
    for level in (R, W, RW):
        bases = sorted(b for b, lv in tables.items() if lv == level)
        if not bases:
            continue
        actions = sorted(set((READ if "r" in level else ()) + (WRITE if "w" in level else ())))
        statements.append({"Effect": "Allow", "Action": actions,
                           "Resource": [arn for b in bases for arn in _table_arns(b)]})
    return statements


def policy_statements(access: Access, log_group: str, *, bus: str, dlq: str) -> list[dict[str, Any]]:
    """IAM statements for one function; `log_group`, `bus` and `dlq` are logical ids in the template."""
    statements: list[dict[str, Any]] = [
        # The log group is created by the template, so the function never needs logs:CreateLogGroup.
        {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
         "Resource": {"Fn::GetAtt": [log_group, "Arn"]}},
    ]
    statements += _table_statements(access.tables)
    if access.stream:
        table = logical_id(access.stream)
        statements.append({"Effect": "Allow", "Action": list(STREAM_READ),
                           "Resource": {"Fn::Sub": f"${{{table}.Arn}}/stream/*"}})
        # The event source mapping's on-failure destination is written with the function's role.
        statements.append({"Effect": "Allow", "Action": ["sqs:SendMessage"],
                           "Resource": {"Fn::GetAtt": [dlq, "Arn"]}})
    if access.publish:
        statements.append({"Effect": "Allow", "Action": ["events:PutEvents"],
                           "Resource": {"Fn::GetAtt": [bus, "Arn"]}})
    return statements


def lambda_role(statements: list[dict[str, Any]], policy_name: str) -> dict[str, Any]:
    """An execution role only Lambda can assume, with exactly `statements` inline."""
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
                               "Action": "sts:AssumeRole"}],
            },
            "Policies": [{"PolicyName": policy_name,
                          "PolicyDocument": {"Version": "2012-10-17", "Statement": statements}}],
        },
    }
