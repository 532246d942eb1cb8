"""Merge the infra resources into the SAM template `chalice package` generates: one deployable template.

`build` is pure (template in, template out), so tests exercise exactly what scripts/package writes.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from chalicelib.api import cors

from . import hosting
from . import observability as obs
from .bus import EVENT_BUS, bus_outputs, bus_resources, push_target
from .gate import GATE, gate_resources
from .gateway import gateway_responses, method_not_allowed
from .iam import access_for, lambda_role, policy_statements
from .identity import (
    agent_keys_statement,
    identity_environment,
    identity_outputs,
    identity_resources,
    vapid_key_statement,
)
from .tables import logical_id, table_resources

Template = dict[str, Any]
SAM_FUNCTION = "AWS::Serverless::Function"
REST_API = "RestAPI"
CHALICE_ROLE = "DefaultRole"
PLACEHOLDER = re.compile(r"^arn:aws:dynamodb:[^:]+:0{12}:table/(?P<table>[^/]+)/stream/placeholder$")
# Before traffic the reconciler repairs *all* outstanding work, each item possibly an agentctl call, and it is
# not behind API Gateway's 29 s limit: give it room instead of the API's 30 s.
RECONCILER_TIMEOUT = 300
# The push function tries each device up to 4 times (5 s each, backoff up to 10 s): a few slow push services
# must not time it out (a timeout is retried, and only the unsent devices are tried again).
PUSH_TIMEOUT = 120
# It ends up in a meta key (ready#<id>) and in environment variables: keep it plain.
DEPLOYMENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
STREAM_SETTINGS = {
    # Bounded: a poisoned batch is bisected down to the bad record, retried a few times, then parked in the
    # queue, so one record cannot block its shard for the stream's 24 h retention.
    "MaximumRetryAttempts": 5,
    "BisectBatchOnFunctionError": True,
    # The handlers return batchItemFailures from the first failed record on (per-item order is kept).
    "FunctionResponseTypes": ["ReportBatchItemFailures"],
}


@dataclass(frozen=True)
class Function:
    logical: str  # logical id in the template (Chalice's)
    handler: str  # Python handler name in app.py; "app" for the REST API handler
    name: str  # the Lambda function name


def build(chalice: Template, *, deployment_id: str, app_name: str, stage: str) -> Template:
    """The deployable template. Raises ValueError when the Chalice output is not what infra/ expects."""
    if not DEPLOYMENT_ID.match(deployment_id):
        raise ValueError(f"deployment id {deployment_id!r} must match {DEPLOYMENT_ID.pattern}")
    t = copy.deepcopy(chalice)
    resources: dict[str, Any] = t["Resources"]
    functions = _functions(resources, f"{app_name}-{stage}")
    tables = table_resources(_table_prefix(resources, functions))
    t["Description"] = f"Clarify ({stage}): API, stream, schedule and reconciler functions, tables, bus, alarms"
    t["Parameters"] = _parameters()
    resources.pop(CHALICE_ROLE, None)  # replaced by one least-privilege role per function
    resources.update(tables)
    resources.update(_shared(app_name, stage))
    resources.update(identity_resources(app_name, stage))
    for fn in functions:
        resources.update(_wire_function(resources[fn.logical], fn, deployment_id, service=f"{app_name}-{stage}",
                                        stage=stage))
    resources[obs.DASHBOARD] = obs.dashboard(
        f"{app_name}-{stage}", [(fn.name, fn.handler) for fn in functions],
        [fn.name for fn in functions if list(_stream_events(resources[fn.logical]["Properties"]))],
        f"{app_name}-{stage}-stream-failures")
    pusher = _by_handler(functions, "push_delivery")
    resources.update(push_target(resources, pusher.logical))
    resources[pusher.logical]["Properties"]["Timeout"] = PUSH_TIMEOUT
    reconciler = _by_handler(functions, "reconcile_before_traffic")
    resources[reconciler.logical]["Properties"]["Timeout"] = RECONCILER_TIMEOUT
    resources.update(gate_resources(
        reconciler=reconciler.logical, reconciler_timeout=RECONCILER_TIMEOUT, deployment_id=deployment_id,
        function_name=f"{app_name}-{stage}-deploy_gate",
        runtime=resources[reconciler.logical]["Properties"]["Runtime"],
        depends_on=[*tables, *(fn.logical for fn in functions)]))
    _wire_api(resources[REST_API])
    _wire_hosting(resources, _by_handler(functions, "app"), f"{app_name}-{stage}")
    obs.enable_tracing(resources)
    t["Outputs"] = {**t.get("Outputs", {}), **_outputs(reconciler, deployment_id), **hosting.outputs()}
    _check(t)
    return t


# ------------------------------------------------------------------ discovery
def _functions(resources: dict[str, Any], name_prefix: str) -> list[Function]:
    out = []
    for logical, res in sorted(resources.items()):
        if res.get("Type") != SAM_FUNCTION:
            continue
        module, _, handler = res["Properties"]["Handler"].partition(".")
        if module != "app":
            raise ValueError(f"{logical}: handler {res['Properties']['Handler']!r} is not in app.py")
        # Chalice's own naming: the API handler is `<app>-<stage>`, others `<app>-<stage>-<name>`.
        name = name_prefix if handler == "app" else f"{name_prefix}-{handler}"
        out.append(Function(logical, handler, name))
    return out


def _by_handler(functions: list[Function], handler: str) -> Function:
    for fn in functions:
        if fn.handler == handler:
            return fn
    raise ValueError(f"app.py has no function {handler!r}")


def _table_prefix(resources: dict[str, Any], functions: list[Function]) -> str:
    """The stage's CLARIFY_TABLE_PREFIX (.chalice/config.json): the tables must carry the names code uses."""
    prefixes = {resources[f.logical]["Properties"].get("Environment", {}).get("Variables", {})
                .get("CLARIFY_TABLE_PREFIX") for f in functions}
    if len(prefixes) != 1 or None in prefixes:
        raise ValueError(f"every function needs the same CLARIFY_TABLE_PREFIX, found {prefixes}")
    return str(prefixes.pop())


# ------------------------------------------------------------------ resources
def _parameters() -> dict[str, Any]:
    return {
        "AgentctlUrl": {"Type": "String", "AllowedPattern": "^https?://.+",
                        "Description": "Base URL of the agent runtime service (CLARIFY_AGENTCTL_URL)"},
        **hosting.parameters(),
    }


def _shared(app_name: str, stage: str) -> dict[str, Any]:
    return {
        **bus_resources(app_name, stage),
        obs.STREAM_DLQ: obs.stream_dlq(f"{app_name}-{stage}-stream-failures"),
        obs.ALARM_TOPIC: obs.alarm_topic(),
        "StreamFailureQueueAlarm": obs.dlq_alarm(),
        "AmbiguousDispatchAlarm": obs.ambiguous_dispatch_alarm(f"{app_name}-{stage}"),
        "QuarantineAlarm": obs.quarantine_alarm(f"{app_name}-{stage}"),
    }


def _wire_function(res: dict[str, Any], fn: Function, deployment_id: str, *, service: str,
                   stage: str) -> dict[str, Any]:
    """Name, environment, role and stream settings for one Chalice function; returns the resources it adds."""
    access = access_for(fn.handler)
    props = res["Properties"]
    props["FunctionName"] = fn.name
    props.setdefault("Environment", {}).setdefault("Variables", {}).update({
        # Fresh per package: the new code answers 503 not_ready until the gate reconciled for this id.
        "CLARIFY_DEPLOYMENT_ID": deployment_id,
        # Who may call: the pool's users and the keyring's agents; never a development token (no secret here).
        "CLARIFY_STAGE": stage,
        **identity_environment(),
        "CLARIFY_AGENTCTL_URL": {"Ref": "AgentctlUrl"},
        "CLARIFY_EVENT_BUS": {"Ref": EVENT_BUS},
        # Every log line and metric names the stack; the alarms and the dashboard select on it.
        "CLARIFY_SERVICE": service,
    })
    role, logs = f"{fn.logical}Role", f"{fn.logical}LogGroup"
    props["Role"] = {"Fn::GetAtt": [role, "Arn"]}
    statements = policy_statements(access, logs, bus=EVENT_BUS, dlq=obs.STREAM_DLQ)
    if access.agent_keys:
        statements.append(agent_keys_statement())
    if access.vapid:
        statements.append(vapid_key_statement())
    added = {
        role: lambda_role(statements, fn.handler),
        logs: obs.log_group(fn.name),
        f"{fn.logical}ErrorsAlarm": obs.errors_alarm(fn.logical, fn.name),
    }
    for event in _stream_events(props):
        _wire_stream(event, access.stream, fn)
        added[f"{fn.logical}IteratorAgeAlarm"] = obs.iterator_age_alarm(fn.logical, fn.name)
    if fn.handler == "reconcile_scheduled":
        added[f"{fn.logical}FailingAlarm"] = obs.reconciler_failing_alarm(fn.logical, fn.name)
    return added


def _stream_events(props: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for event in props.get("Events", {}).values():
        if event.get("Type") == "DynamoDB":
            yield event["Properties"]


def _wire_stream(event: dict[str, Any], declared: str | None, fn: Function) -> None:
    """Point the mapping at the real table's stream and add what Chalice does not expose."""
    match = PLACEHOLDER.match(str(event.get("Stream")))
    if not match:
        raise ValueError(f"{fn.logical}: stream {event.get('Stream')!r} is not app.py's placeholder ARN")
    table = match["table"]
    if table != declared:
        raise ValueError(f"{fn.logical} reads the {table} stream but infra/iam.py grants {declared!r}")
    event["Stream"] = {"Fn::GetAtt": [logical_id(table), "StreamArn"]}
    event.update(copy.deepcopy(STREAM_SETTINGS))
    event["DestinationConfig"] = {"OnFailure": {"Type": "SQS",
                                                "Destination": {"Fn::GetAtt": [obs.STREAM_DLQ, "Arn"]}}}


def _wire_api(api: dict[str, Any]) -> None:
    definition = api["Properties"]["DefinitionBody"]
    definition["x-amazon-apigateway-gateway-responses"] = gateway_responses()
    for item in definition.get("paths", {}).values():
        item["x-amazon-apigateway-any-method"] = method_not_allowed()
    # First deploy: the API (and its stage) is created only after the reconciler succeeded.
    api["DependsOn"] = sorted(set(api.get("DependsOn", [])) | {GATE})


def _wire_hosting(resources: dict[str, Any], api_function: Function, name: str) -> None:
    """The client's bucket and distribution in front of a regional API (one CloudFront, not two), CORS."""
    api = resources[REST_API]["Properties"]
    api["EndpointConfiguration"] = "REGIONAL"
    for item in api["DefinitionBody"].get("paths", {}).values():
        item["options"] = hosting.preflight_method()
    env = resources[api_function.logical]["Properties"]["Environment"]["Variables"]
    env[cors.ENV] = hosting.cors_origins()
    resources.update(hosting.resources(name, REST_API, api["StageName"]))


def _outputs(reconciler: Function, deployment_id: str) -> dict[str, Any]:
    return {
        "DeploymentId": {"Description": "CLARIFY_DEPLOYMENT_ID of this package (meta item ready#<id>)",
                         "Value": deployment_id},
        "ReconcilerFunctionName": {"Description": "Invoke to re-run reconciliation before traffic by hand",
                                   "Value": {"Ref": reconciler.logical}},
        **bus_outputs(),
        **identity_outputs(),
        "AlarmTopicArn": {"Description": "Subscribe on-call to this topic", "Value": {"Ref": obs.ALARM_TOPIC}},
        "StreamFailureQueueUrl": {"Description": "Stream batches that exhausted their retries",
                                  "Value": {"Ref": obs.STREAM_DLQ}},
    }


# ------------------------------------------------------------------ checks
def _walk(node: Any) -> Iterator[Any]:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from _walk(child)


def _check(t: Template) -> None:
    """Nothing of Chalice's shared role or placeholder stream ARNs may survive the merge."""
    for node in _walk(t):
        if isinstance(node, str) and "stream/placeholder" in node:
            raise ValueError(f"placeholder stream ARN left in the template: {node}")
        if isinstance(node, dict) and _target(node) == CHALICE_ROLE:
            raise ValueError("a resource still uses Chalice's DefaultRole")


def _target(node: dict[str, Any]) -> str | None:
    """The logical id a Ref / Fn::GetAtt node points at (GetAtt may be a list or "Id.Attr")."""
    if "Ref" in node:
        return str(node["Ref"])
    att = node.get("Fn::GetAtt")
    if att is None:
        return None
    return str(att[0] if isinstance(att, list) else att).split(".")[0]
