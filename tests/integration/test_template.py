"""The deployable template: packaged offline, lint-clean, tables identical to the models, usable by the store.

One `scripts/package` run (network disabled for pip) feeds every test here, so they check the artifact
that would be deployed, not a re-derivation of it.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pynamodb.attributes import TTLAttribute, UnicodeAttribute
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from chalicelib import aws, hosting
from chalicelib.domain.errors import ConditionFailed
from chalicelib.domain.model import Dispatch, Event, Prompt, Session, State, Task, Turn
from chalicelib.store import models
from chalicelib.store.dynamo import DynamoStore
from chalicelib.store.models import ALL_MODELS, BASE_NAMES, SessionRecord
from infra import deploy_client, gate_handler
from infra.bus import QUESTION_PENDING
from scripts.local.emulator import EmulatorThread

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "clarify-prod-"  # the prod stage's CLARIFY_TABLE_PREFIX
DEPLOYMENT_ID = "test-deployment"
Normal = dict[str, Any]


# ------------------------------------------------------------------ the packaged artifact
@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`scripts/package` as a user runs it, with pip forbidden any index and every proxy dead."""
    out = tmp_path_factory.mktemp("package")
    dead = "http://127.0.0.1:9"
    env = {**os.environ, "PIP_NO_INDEX": "1", "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "NO_PROXY": "",
           "PIP_CONFIG_FILE": os.devnull}
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "package"), "--out", str(out),
                             "--deployment-id", DEPLOYMENT_ID], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def template(packaged: Path) -> dict[str, Any]:
    return dict(json.loads((packaged / "template.json").read_text()))


def _resources(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_package__offline__zip_holds_app_and_pure_python_deps(packaged: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(packaged / "deployment.zip") as zf:
        names = zf.namelist()
        zf.extractall(tmp_path)
    assert "app.py" in names and "chalicelib/store/models.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so"))]
    assert not [n for n in names if n.startswith("chalicelib/web/")]  # the client is in its bucket
    # Self-contained: the app imports with no site-packages at all (-S -I), as on a bare Lambda runtime.
    # As in Lambda, the Tracer is on: Powertools and the X-Ray SDK (wrapt without its C extension) load.
    # Web Push's P-256 (python-ecdsa and its six) signs and agrees a key there too.
    probe = ("import sys; sys.path.insert(0, '.'); import app, boto3, jwt, pynamodb, localstack_client.config; "
             "from chalicelib import observability; from chalicelib.push import ec, webpush; "
             "k = ec.new_private_key(); assert len(ec.sign_es256(k, b'm')) == 64; "
             "assert webpush.encrypt(b'm', ec.public_key(ec.new_private_key()), bytes(16)); "
             "print(len(app.app.routes), observability.tracer.disabled)")
    lambda_env = {"PATH": os.environ.get("PATH", ""), "AWS_LAMBDA_FUNCTION_NAME": "clarify-prod",
                  "LAMBDA_TASK_ROOT": str(tmp_path)}
    result = subprocess.run([sys.executable, "-S", "-I", "-c", probe], cwd=tmp_path, capture_output=True,
                            text=True, env=lambda_env, timeout=60)
    assert result.returncode == 0, result.stderr
    routes, disabled = result.stdout.split()
    assert int(routes) > 0 and disabled == "False"


def test_package__bare_runtime__verifies_a_pool_token_without_cryptography(packaged: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """RS256 is verified in pure Python: the same check, in the zip, with no site-packages (no `cryptography`)."""
    from tests.support import pool
    with zipfile.ZipFile(packaged / "deployment.zip") as zf:
        zf.extractall(tmp_path)
    monkeypatch.setenv("CLARIFY_USER_POOL_ID", "us-east-1_p")
    monkeypatch.setenv("CLARIFY_USER_POOL_CLIENT_ID", "c")
    token = pool.sign(pool.access_claims("ws-9"))
    (tmp_path / "probe.json").write_text(json.dumps({"jwks": pool.public_jwks(), "token": token}))
    probe = ("import sys, json; sys.path.insert(0, '.'); from chalicelib.auth.pool import PoolVerifier, UserPool\n"
             "d = json.load(open('probe.json')); import jwt.algorithms as a; assert not a.has_crypto\n"
             "v = PoolVerifier(UserPool.at('us-east-1_p', 'c'), fetch=lambda url: d['jwks'])\n"
             "print(v.verify(d['token']).workspace_id)\n"
             "try:\n    v.verify(d['token'][:-2] + 'AA')\nexcept Exception as e: print(type(e).__name__)")
    result = subprocess.run([sys.executable, "-S", "-I", "-c", probe], cwd=tmp_path, capture_output=True,
                            text=True, env={"PATH": os.environ.get("PATH", "")}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ws-9", "Unauthorized"]


def test_identity__pool_client_keyring_and_who_reads_them(template: dict[str, Any]) -> None:
    res = template["Resources"]
    pool = res["UserPool"]["Properties"]
    assert pool["UsernameAttributes"] == ["email"] and pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"]
    policy = pool["Policies"]["PasswordPolicy"]
    assert policy["MinimumLength"] >= 12 and all(policy[f"Require{c}"] for c in
                                                 ("Lowercase", "Uppercase", "Numbers", "Symbols"))
    assert (pool["MfaConfiguration"], pool["EnabledMfas"]) == ("OPTIONAL", ["SOFTWARE_TOKEN_MFA"])
    assert res["UserPool"]["DeletionPolicy"] == res["AgentKeys"]["DeletionPolicy"] == "Retain"
    client = res["UserPoolWebClient"]["Properties"]
    assert client["GenerateSecret"] is False and client["UserPoolId"] == {"Ref": "UserPool"}
    assert sorted(client["ExplicitAuthFlows"]) == ["ALLOW_REFRESH_TOKEN_AUTH", "ALLOW_USER_PASSWORD_AUTH"]
    # No development secret anywhere in a deployed stage: its tokens are refused there.
    assert "AuthSecret" not in template.get("Parameters", {})
    for fn in _functions(template).values():
        env = fn["Properties"]["Environment"]["Variables"]
        assert "CLARIFY_AUTH_SECRET" not in env and env["CLARIFY_STAGE"] == "prod"
        assert env["CLARIFY_USER_POOL_ID"] == {"Ref": "UserPool"}
        assert env["CLARIFY_AGENT_KEYS_SECRET"] == {"Ref": "AgentKeys"}
    readers = sorted({name for name, role in _resources(template, "AWS::IAM::Role").items()
                      for st in role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                      if "secretsmanager:GetSecretValue" in st["Action"]})
    assert readers == ["APIHandlerRole", "BearerRole", "PushDeliveryRole", "ReconcileBeforeTrafficRole",
                       "ReconcileScheduledRole"]
    # The VAPID key: made by CloudFormation empty, kept like users; read by the API (its public half) and the
    # push function only.
    assert res["VapidKey"]["DeletionPolicy"] == "Retain" and res["VapidKey"]["Properties"]["SecretString"] == "{}"
    vapid = sorted(name for name, role in _resources(template, "AWS::IAM::Role").items()
                   for st in role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                   if st.get("Resource") == {"Ref": "VapidKey"})
    assert vapid == ["APIHandlerRole", "PushDeliveryRole"]


def test_template__cfn_lint__clean(packaged: Path) -> None:
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    result = subprocess.run([str(cfn_lint), str(packaged / "template.json")], capture_output=True, text=True,
                            timeout=120)
    # cfn-lint's exit code is a bit mask: 2 errors, 4 warnings, 8 informational. All must be zero.
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------ drift: models vs template
def _keys(schema: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return sorted(((k["AttributeName"], k["KeyType"]) for k in schema), key=lambda k: k[1] != "HASH")


def _index(keys: Sequence[Mapping[str, Any]], projection: Mapping[str, Any]) -> tuple[Any, ...]:
    return (_keys(keys), projection["ProjectionType"], sorted(projection.get("NonKeyAttributes", [])))


def _ttl(model: type[Model]) -> str | None:
    return next((a.attr_name for a in model.get_attributes().values() if isinstance(a, TTLAttribute)), None)


def model_normal(model: type[Model]) -> Normal:
    """A table as the PynamoDB model declares it (read from pynamodb directly, not via infra/)."""
    schema = model._get_schema()
    return {
        "billing": model.Meta.billing_mode,
        "attributes": sorted({(a["AttributeName"], a["AttributeType"]) for a in schema["attribute_definitions"]}),
        "keys": _keys(schema["key_schema"]),
        "indexes": {g["index_name"]: _index(g["key_schema"], g["projection"])
                    for g in schema["global_secondary_indexes"]},
        "local_indexes": {i["index_name"]: _index(i["key_schema"], i["projection"])
                          for i in schema["local_secondary_indexes"]},
        "stream": getattr(model.Meta, "stream_view_type", None),
        "ttl": _ttl(model),
    }


def resource_normal(props: dict[str, Any]) -> Normal:
    """A table as an AWS::DynamoDB::Table resource declares it."""
    ttl = props.get("TimeToLiveSpecification", {})
    return {
        "billing": props.get("BillingMode"),
        "attributes": sorted({(a["AttributeName"], a["AttributeType"]) for a in props["AttributeDefinitions"]}),
        "keys": _keys(props["KeySchema"]),
        "indexes": {g["IndexName"]: _index(g["KeySchema"], g["Projection"])
                    for g in props.get("GlobalSecondaryIndexes", [])},
        "local_indexes": {i["IndexName"]: _index(i["KeySchema"], i["Projection"])
                          for i in props.get("LocalSecondaryIndexes", [])},
        "stream": props.get("StreamSpecification", {}).get("StreamViewType"),
        "ttl": ttl["AttributeName"] if ttl.get("Enabled") else None,
    }


def models_tables(table_models: list[type[Model]], *, base_of: dict[type[Model], str]) -> dict[str, Normal]:
    return {PREFIX + base_of[m]: model_normal(m) for m in table_models}


def template_tables(template: dict[str, Any]) -> dict[str, Normal]:
    return {r["Properties"]["TableName"]: resource_normal(r["Properties"])
            for r in _resources(template, "AWS::DynamoDB::Table").values()}


def drift(expected: dict[str, Normal], actual: dict[str, Normal], fields: tuple[str, ...] = ()) -> list[str]:
    """Human-readable differences between two sets of tables (all fields, or only `fields`)."""
    found = [f"{t}: only in the models" for t in sorted(expected.keys() - actual.keys())]
    found += [f"{t}: only in the template" for t in sorted(actual.keys() - expected.keys())]
    for table in sorted(expected.keys() & actual.keys()):
        for field in fields or tuple(expected[table]):
            want, got = expected[table][field], actual[table].get(field)
            if want != got:
                found.append(f"{table}.{field}: models {want!r} != template {got!r}")
    return found


def test_drift__template_tables__identical_to_models(template: dict[str, Any]) -> None:
    assert drift(models_tables(list(ALL_MODELS), base_of=BASE_NAMES), template_tables(template)) == []


class _WorkspaceIndex(GlobalSecondaryIndex["SessionRecordPlusIndex"]):
    class Meta:
        index_name = "by_workspace"
        projection = AllProjection()

    workspace_id = UnicodeAttribute(hash_key=True)
    created_at = UnicodeAttribute(range_key=True)


class SessionRecordPlusIndex(SessionRecord):
    """The sessions model after a developer added an index but nobody regenerated the template."""

    by_workspace = _WorkspaceIndex()


def test_drift__model_gains_index__detected(template: dict[str, Any]) -> None:
    changed = [SessionRecordPlusIndex if m is SessionRecord else m for m in ALL_MODELS]
    base_of: dict[type[Model], str] = {**BASE_NAMES, SessionRecordPlusIndex: BASE_NAMES[SessionRecord]}
    found = drift(models_tables(changed, base_of=base_of), template_tables(template))
    # The new index and its key attribute both differ; nothing else does.
    assert [f.split(":")[0] for f in found] == [f"{PREFIX}sessions.attributes", f"{PREFIX}sessions.indexes"]
    assert "by_workspace" in found[1]


def test_tables__prod_settings__on_demand_pitr_protected(template: dict[str, Any]) -> None:
    for res in _resources(template, "AWS::DynamoDB::Table").values():
        props = res["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["DeletionProtectionEnabled"] is True and res["UpdateReplacePolicy"] == "Retain"


# ------------------------------------------------------------------ streams, IAM, gateway, gate, alarms
def _functions(template: dict[str, Any]) -> dict[str, Any]:
    return _resources(template, "AWS::Serverless::Function")


def test_streams__real_table_streams_with_bounded_retries_and_dlq(template: dict[str, Any]) -> None:
    events = {logical: e["Properties"] for logical, fn in _functions(template).items()
              for e in fn["Properties"].get("Events", {}).values() if e["Type"] == "DynamoDB"}
    assert {k: v["Stream"] for k, v in events.items()} == {
        "SessionsStream": {"Fn::GetAtt": ["SessionsTable", "StreamArn"]},
        "HistoryStream": {"Fn::GetAtt": ["HistoryTable", "StreamArn"]},
        "TasksStream": {"Fn::GetAtt": ["TasksTable", "StreamArn"]}}
    for props in events.values():
        assert 0 < props["MaximumRetryAttempts"] <= 10 and props["BisectBatchOnFunctionError"] is True
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["DestinationConfig"]["OnFailure"]["Destination"] == {
            "Fn::GetAtt": ["StreamFailureQueue", "Arn"]}


def test_iam__one_scoped_role_per_function(template: dict[str, Any]) -> None:
    functions = _functions(template)
    roles = [fn["Properties"]["Role"]["Fn::GetAtt"][0] for fn in functions.values()]
    assert len(set(roles)) == len(functions) and "DefaultRole" not in template["Resources"]
    for role in _resources(template, "AWS::IAM::Role").values():
        for policy in role["Properties"]["Policies"]:
            for statement in policy["PolicyDocument"]["Statement"]:
                assert statement["Resource"] != "*" and "*" not in statement.get("Resource", [])
                assert not [a for a in statement["Action"] if a.endswith("*") or a == "dynamodb:Scan"]
    bearer = template["Resources"]["BearerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    assert [a for s in bearer for a in s["Action"] if a.startswith("dynamodb:")] == []


def test_tracing__active_on_every_function_and_the_api__roles_may_write_segments(template: dict[str, Any]) -> None:
    res = template["Resources"]
    assert all(fn["Properties"]["Tracing"] == "Active" for fn in _functions(template).values())
    plain = _resources(template, "AWS::Lambda::Function")
    assert plain and all(fn["Properties"]["TracingConfig"] == {"Mode": "Active"} for fn in plain.values())
    assert res["RestAPI"]["Properties"]["TracingEnabled"] is True
    roles = {fn["Properties"]["Role"]["Fn::GetAtt"][0] for fn in [*_functions(template).values(), *plain.values()]}
    for role in roles:
        assert {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AWSXRayDaemonWriteAccess"} in (
            res[role]["Properties"]["ManagedPolicyArns"]), role


def test_gateway__denial_401_unknown_route_404__error_envelope(template: dict[str, Any]) -> None:
    body = template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]
    responses = body["x-amazon-apigateway-gateway-responses"]
    expected = {"ACCESS_DENIED": ("401", "unauthorized"), "UNAUTHORIZED": ("401", "unauthorized"),
                "MISSING_AUTHENTICATION_TOKEN": ("404", "not_found"),
                "REQUEST_TOO_LARGE": ("413", "payload_too_large")}
    for kind, (status, code) in expected.items():
        envelope = json.loads(responses[kind]["responseTemplates"]["application/json"])
        assert responses[kind]["statusCode"] == status
        assert envelope["error"]["code"] == code and envelope["error"]["retryable"] is False


def test_gateway__wrong_method_on_a_known_route__405_in_the_envelope(template: dict[str, Any]) -> None:
    """Each route's catch-all ANY method (declared methods take precedence) answers 405 from a mock."""
    paths = template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]["paths"]
    assert paths
    for path, item in paths.items():
        declared = {m for m in item if m in ("get", "post", "put", "patch", "delete")}
        assert declared, path
        integration = item["x-amazon-apigateway-any-method"]["x-amazon-apigateway-integration"]
        assert integration["type"] == "mock" and "security" not in item["x-amazon-apigateway-any-method"]
        response = integration["responses"]["default"]
        envelope = json.loads(response["responseTemplates"]["application/json"])
        assert response["statusCode"] == "405"
        assert envelope["error"]["code"] == "method_not_allowed" and envelope["error"]["retryable"] is False


def test_gate__reconciler_before_traffic__ordering_and_fresh_deployment_id(template: dict[str, Any]) -> None:
    res = template["Resources"]
    gate = res["ReconcileBeforeTrafficGate"]
    assert "ReconcileBeforeTrafficGate" in res["RestAPI"]["DependsOn"]  # traffic after the reconciler
    tables = _resources(template, "AWS::DynamoDB::Table")
    assert set(tables) <= set(gate["DependsOn"])  # reconciler after tables and functions
    assert set(_functions(template)) - {"ReconcileBeforeTraffic"} <= set(gate["DependsOn"])
    assert gate["Properties"]["ReconcilerFunction"] == {"Ref": "ReconcileBeforeTraffic"}
    assert gate["Properties"]["DeploymentId"] == DEPLOYMENT_ID
    ids = {fn["Properties"]["Environment"]["Variables"]["CLARIFY_DEPLOYMENT_ID"] for fn in
           _functions(template).values()}
    assert ids == {DEPLOYMENT_ID}


def test_alarms__iterator_age_errors_and_reconciler_failing(template: dict[str, Any]) -> None:
    alarms = _resources(template, "AWS::CloudWatch::Alarm")
    by_metric: dict[str, set[str]] = {}
    for alarm in alarms.values():
        props = alarm["Properties"]
        for dim in props["Dimensions"]:
            if dim["Name"] == "FunctionName":
                by_metric.setdefault(props["MetricName"], set()).add(dim["Value"]["Ref"])
    assert by_metric["IteratorAge"] == {"SessionsStream", "HistoryStream", "TasksStream"}
    assert by_metric["Errors"] == set(_functions(template))
    assert "ReconcileScheduledFailingAlarm" in alarms


def test_alarms__ambiguous_dispatches_and_quarantines__on_the_stack_s_own_metrics(template: dict[str, Any]) -> None:
    alarms = _resources(template, "AWS::CloudWatch::Alarm")
    own = {a["Properties"]["MetricName"]: a["Properties"] for a in alarms.values()
           if a["Properties"]["Namespace"] == "Clarify"}
    assert set(own) == {"AmbiguousDispatches", "Quarantines"}
    for props in own.values():
        assert props["Dimensions"] == [{"Name": "service", "Value": "clarify-prod"}]
        assert props["Threshold"] == 1 and props["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    services = {fn["Properties"]["Environment"]["Variables"]["CLARIFY_SERVICE"] for fn in
                _functions(template).values()}
    assert services == {"clarify-prod"}  # what the functions' metrics carry is what the alarms select


def test_dashboard__own_metrics_iterator_age_and_errors(template: dict[str, Any]) -> None:
    [board] = _resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.loads(board["Properties"]["DashboardBody"]["Fn::Sub"].replace("${AWS::Region}", "us-east-1"))
    text = json.dumps(body)
    for metric in ("Answers", "Conflicts", "AmbiguousDispatches", "Quarantines", "Restores", "WatchdogFallbacks",
                   "ReconcilerRepairs", "StreamRecordFailures", "LongPollWaits"):
        assert f'"{metric}"' in text or f'MetricName=\\"{metric}\\"' in text, metric
    metrics = [m for w in body["widgets"] for m in w["properties"]["metrics"] if isinstance(m, list)]
    ages = {m[3] for m in metrics if m[1] == "IteratorAge"}
    errors = {m[3] for m in metrics if m[1] == "Errors"}
    names = {fn["Properties"]["FunctionName"] for fn in _functions(template).values()}
    assert ages == {"clarify-prod-sessions_stream", "clarify-prod-history_stream", "clarify-prod-tasks_stream"}
    assert errors == names


def test_bus__publishers_may_put_events_on_the_bus_they_are_told(template: dict[str, Any]) -> None:
    res = template["Resources"]
    for logical, fn in _functions(template).items():
        assert fn["Properties"]["Environment"]["Variables"]["CLARIFY_EVENT_BUS"] == {"Ref": "EventBus"}
        statements = res[f"{logical}Role"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        puts = [s["Resource"] for s in statements if "events:PutEvents" in s["Action"]]
        # Everything that emits events publishes them; only the authorizer and the push function do not.
        assert puts == ([] if logical in ("Bearer", "PushDelivery") else [{"Fn::GetAtt": ["EventBus", "Arn"]}]), \
            logical
        if puts:  # the feed is read before the bus is put to, so a redelivery puts nothing again
            reads = [a for s in statements for a in s["Action"] if a == "dynamodb:BatchGetItem"
                     and {"Fn::GetAtt": ["EventsTable", "Arn"]} in s["Resource"]]
            assert reads, logical


def test_bus__archive_and_pending_question_rule_to_an_encrypted_topic(template: dict[str, Any]) -> None:
    res = template["Resources"]
    assert res["EventBus"]["Properties"]["Name"] == "clarify-prod-events"
    archive = res["EventArchive"]["Properties"]
    assert archive["SourceArn"] == {"Fn::GetAtt": ["EventBus", "Arn"]} and archive["RetentionDays"] > 0
    rule = res["QuestionPendingRule"]["Properties"]
    assert rule["EventBusName"] == {"Ref": "EventBus"} and rule["EventPattern"] == QUESTION_PENDING
    target, push = rule["Targets"]
    assert target["Arn"] == {"Ref": "QuestionTopic"}
    assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": ["QuestionDeliveryFailureQueue", "Arn"]}
    # The Web Push function is the rule's second target, and the rule alone may invoke it.
    assert push["Arn"] == {"Fn::GetAtt": ["PushDelivery", "Arn"]}
    assert push["DeadLetterConfig"] == target["DeadLetterConfig"]
    permission = res["PushDeliveryQuestionRulePermission"]["Properties"]
    assert (permission["FunctionName"], permission["Principal"], permission["SourceArn"]) == (
        {"Ref": "PushDelivery"}, "events.amazonaws.com", {"Fn::GetAtt": ["QuestionPendingRule", "Arn"]})
    topic = res["QuestionTopic"]["Properties"]
    assert topic["KmsMasterKeyId"] == {"Ref": "QuestionTopicKey"}  # not the AWS-managed key EventBridge cannot use
    (allow,) = res["QuestionTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sns:Publish"
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["QuestionPendingRule", "Arn"]}}}
    assert {"EventBusName", "EventArchiveArn", "QuestionRuleName", "QuestionTopicArn"} <= set(template["Outputs"])


# ------------------------------------------------------------------ the deploy gate's handler
class _FakeLambda:
    def __init__(self, deployment_id: str, error: bool = False) -> None:
        self.deployment_id, self.error, self.invoked = deployment_id, error, 0

    def get_function_configuration(self, FunctionName: str) -> dict[str, Any]:  # noqa: N803 (boto3 casing)
        return {"Environment": {"Variables": {"CLARIFY_DEPLOYMENT_ID": self.deployment_id}}}

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.invoked += 1
        payload = b'{"errorMessage": "boom"}' if self.error else b'{"examined": 0}'
        out: dict[str, Any] = {"Payload": _Body(payload)}
        if self.error:
            out["FunctionError"] = "Unhandled"
        return out


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data

    def __enter__(self) -> _Body:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _run_gate(monkeypatch: pytest.MonkeyPatch, fake: _FakeLambda, request_type: str) -> dict[str, Any]:
    sent: list[dict[str, Any]] = []

    def urlopen(request: Any, timeout: float) -> _Body:
        sent.append(json.loads(request.data))
        return _Body(b"")

    monkeypatch.setattr(gate_handler.boto3, "client", lambda *a, **k: fake)
    monkeypatch.setattr(gate_handler.urllib.request, "urlopen", urlopen)
    event = {"RequestType": request_type, "ResponseURL": "https://example.invalid/cfn", "StackId": "s",
             "RequestId": "r", "LogicalResourceId": "ReconcileBeforeTrafficGate",
             "ResourceProperties": {"ReconcilerFunction": "clarify-prod-reconcile_before_traffic",
                                    "DeploymentId": "d2", "ReconcilerTimeout": "300"}}
    gate_handler.handler(event, type("Ctx", (), {"log_stream_name": "ls"})())
    assert len(sent) == 1
    return sent[0]


def test_gate_handler__reconciler_succeeds__success(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeLambda("d2")
    assert _run_gate(monkeypatch, fake, "Create")["Status"] == "SUCCESS" and fake.invoked == 1


def test_gate_handler__reconciler_fails__deploy_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = _run_gate(monkeypatch, _FakeLambda("d2", error=True), "Update")
    assert reply["Status"] == "FAILED" and "boom" in reply["Reason"]


def test_gate_handler__rollback_or_delete__no_reconcile(monkeypatch: pytest.MonkeyPatch) -> None:
    rollback, delete = _FakeLambda("d3"), _FakeLambda("d2")
    assert _run_gate(monkeypatch, rollback, "Update")["Status"] == "SUCCESS" and rollback.invoked == 0
    assert _run_gate(monkeypatch, delete, "Delete")["Status"] == "SUCCESS" and delete.invoked == 0


# ------------------------------------------------------------------ the template's tables on the emulator
def _aws(emulator: EmulatorThread, service: str) -> Any:
    return aws.client(service, endpoint_url=emulator.url)


def _description_normal(desc: dict[str, Any]) -> Normal:
    return {
        "billing": desc.get("BillingModeSummary", {}).get("BillingMode"),
        "attributes": sorted({(a["AttributeName"], a["AttributeType"]) for a in desc["AttributeDefinitions"]}),
        "keys": _keys(desc["KeySchema"]),
        "indexes": {g["IndexName"]: _index(g["KeySchema"], g["Projection"])
                    for g in desc.get("GlobalSecondaryIndexes", [])},
        "stream": desc.get("StreamSpecification", {}).get("StreamViewType"),
    }


@pytest.fixture(scope="module")
def stack_prefix(template: dict[str, Any], emulator: EmulatorThread) -> str:
    """Deploy the template's table resources through the emulator's CloudFormation; returns their prefix.

    Only TableName is re-prefixed (the session's emulator is shared); every other property is verbatim.
    """
    prefix = f"cfn{uuid.uuid4().hex[:6]}-"
    tables = copy.deepcopy(_resources(template, "AWS::DynamoDB::Table"))
    for res in tables.values():
        res["Properties"]["TableName"] = res["Properties"]["TableName"].replace(PREFIX, prefix, 1)
    body = {"AWSTemplateFormatVersion": "2010-09-09", "Resources": tables}
    cfn = _aws(emulator, "cloudformation")
    cfn.create_stack(StackName=f"{prefix}tables", TemplateBody=json.dumps(body))
    status = cfn.describe_stacks(StackName=f"{prefix}tables")["Stacks"][0]["StackStatus"]
    assert status == "CREATE_COMPLETE"
    return prefix


@pytest.fixture
def store(stack_prefix: str, emulator: EmulatorThread, monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoStore]:
    """The real store pointed at the stack's tables; the models are restored afterwards for other tests."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "test")
    saved = {m: (m.Meta.table_name, getattr(m.Meta, "host", None), m.Meta.region) for m in ALL_MODELS}
    models.configure(prefix=stack_prefix, host=emulator.url, region="us-east-1")
    yield DynamoStore()
    for m, (name, host, region) in saved.items():
        m.Meta.table_name, m.Meta.host, m.Meta.region = name, host, region  # type: ignore[attr-defined]
        m._connection = None


def test_cloudformation__template_tables__match_models(stack_prefix: str, emulator: EmulatorThread) -> None:
    dynamodb = _aws(emulator, "dynamodb")
    # By name, not list_tables: the shared emulator holds other tests' tables and list_tables pages at 100.
    deployed = {PREFIX + base: _description_normal(dynamodb.describe_table(TableName=stack_prefix + base)["Table"])
                for base in BASE_NAMES.values()}
    fields = ("billing", "attributes", "keys", "indexes", "stream")  # moto's CloudFormation ignores TTL
    assert drift(models_tables(list(ALL_MODELS), base_of=BASE_NAMES), deployed, fields) == []


def test_cloudformation__template_tables__store_contract(store: DynamoStore) -> None:
    at = "2030-01-01T00:00:00.000000Z"
    store.put_task(Task(id="t1", workspace_id="ws", title="Refactor", workflow_step="build", created_at=at))
    assert store.get_task("t1") is not None and [t.id for t in store.list_tasks("ws")] == ["t1"]
    store.create_session(Session(id="s1", workspace_id="ws", task_id="t1", created_at=at, is_primary=True,
                                 state=State.IDLE, version=0))
    assert [s.id for s in store.list_sessions("t1")] == ["s1"]
    turn = Turn(id="turn-1", seq=1, started_at=at)
    prompt = Prompt(message_id="m1", client_message_id="c1", turn_id=turn.id, content="hi", author_id="u",
                    created_at=at, generation=1, dispatch=Dispatch.PENDING, deadline="2030-01-01T00:01:00.000000Z")
    started = store.start_turn("s1", expected_turn_id=None, from_states={State.IDLE}, turn=turn, prompt=prompt,
                               state=State.RUNNING, at=at)
    assert started.current_turn == turn and started.version == 1
    assert store.due_sessions(None) == ["s1"]  # the sparse KEYS_ONLY index exists and fills
    with pytest.raises(ConditionFailed) as lost:  # a second writer who saw "no turn yet" loses
        store.start_turn("s1", expected_turn_id=None, from_states={State.IDLE}, turn=Turn("turn-2", 2, at),
                         prompt=None, state=State.RUNNING, at=at)
    assert lost.value.current is not None and lost.value.current.current_turn == turn
    event = Event(id="e1", workspace_id="ws", type="turn.started", task_id="t1", session_id="s1",
                  payload={"turn_id": "turn-1"}, at=at)
    assert store.put_event(event, at) is True and store.put_event(event, at) is False
    assert [e.id for _, _, e in store.list_events("ws", low_sk="", after_sk="", written_after="", limit=10)] == [
        "e1"]
    store.set_meta(f"ready#{DEPLOYMENT_ID}", "true", at)
    assert store.get_meta(f"ready#{DEPLOYMENT_ID}") == "true"


# ------------------------------------------------------------------ the client's hosting (infra/hosting.py)
def _distribution(template: dict[str, Any]) -> dict[str, Any]:
    (distribution,) = _resources(template, "AWS::CloudFront::Distribution").values()
    return dict(distribution["Properties"]["DistributionConfig"])


def test_hosting__bucket_private__read_only_by_the_distribution_through_oac(template: dict[str, Any]) -> None:
    res = template["Resources"]
    (bucket_id,) = _resources(template, "AWS::S3::Bucket")
    block = res[bucket_id]["Properties"]["PublicAccessBlockConfiguration"]
    assert block == {"BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
                     "RestrictPublicBuckets": True}
    (policy,) = _resources(template, "AWS::S3::BucketPolicy").values()
    allows = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert allows and all(s["Principal"] == {"Service": "cloudfront.amazonaws.com"} for s in allows)
    for statement in allows:  # only this stack's distribution, reading (ListBucket: a missing file is a 404)
        assert sorted(statement["Action"]) == ["s3:GetObject", "s3:ListBucket"]
        arn = statement["Condition"]["StringEquals"]["AWS:SourceArn"]["Fn::Sub"]
        assert arn.endswith(":distribution/${ClientDistribution}")
    (oac_id,) = _resources(template, "AWS::CloudFront::OriginAccessControl")
    oac = res[oac_id]["Properties"]["OriginAccessControlConfig"]
    assert oac["OriginAccessControlOriginType"] == "s3" and oac["SigningBehavior"] == "always"
    (origin,) = [o for o in _distribution(template)["Origins"] if "S3OriginConfig" in o]
    assert origin["OriginAccessControlId"] == {"Fn::GetAtt": [oac_id, "Id"]}
    assert origin["DomainName"] == {"Fn::GetAtt": [bucket_id, "RegionalDomainName"]}


def test_hosting__client_compressed_cached_as_told__api_forwarded_uncached(template: dict[str, Any]) -> None:
    config = _distribution(template)
    default = config["DefaultCacheBehavior"]
    assert default["Compress"] is True and config["DefaultRootObject"] == "index.html"
    cache = template["Resources"][default["CachePolicyId"]["Ref"]]["Properties"]["CachePolicyConfig"]
    # The objects' own Cache-Control decides (no-cache revalidates: MinTTL 0); gzip and brotli served.
    assert cache["MinTTL"] == 0 and cache["MaxTTL"] >= 31_536_000
    keyed = cache["ParametersInCacheKeyAndForwardedToOrigin"]
    assert keyed["EnableAcceptEncodingGzip"] is True and keyed["EnableAcceptEncodingBrotli"] is True
    (api,) = config["CacheBehaviors"]
    assert api["PathPattern"] == "/api/*"
    assert set(api["AllowedMethods"]) == {"GET", "HEAD", "OPTIONS", "PUT", "PATCH", "POST", "DELETE"}
    assert api["CachePolicyId"] == "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"  # managed CachingDisabled
    # managed AllViewerExceptHostHeader: Authorization, every other header and the query string, not Host
    assert api["OriginRequestPolicyId"] == "b689b0a8-53d0-40ab-baf2-68738e2966ac"
    (origin,) = [o for o in config["Origins"] if o["Id"] == api["TargetOriginId"]]
    assert origin["DomainName"] == {"Fn::Sub": "${RestAPI}.execute-api.${AWS::Region}.amazonaws.com"}
    stage = template["Resources"]["RestAPI"]["Properties"]["StageName"]
    assert origin["OriginPath"] == f"/{stage}"
    assert template["Resources"]["RestAPI"]["Properties"]["EndpointConfiguration"] == "REGIONAL"
    paths = template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]["paths"]
    assert paths and all(p.startswith("/api/") for p in paths)  # the function serves no file


def test_hosting__security_headers_policy__attached_to_both_behaviours(template: dict[str, Any]) -> None:
    config = _distribution(template)
    policies = {b["ResponseHeadersPolicyId"]["Ref"] for b in [config["DefaultCacheBehavior"],
                                                               *config["CacheBehaviors"]]}
    (policy_id,) = policies
    security = template["Resources"][policy_id]["Properties"]["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]
    csp = security["ContentSecurityPolicy"]["ContentSecurityPolicy"]["Fn::Sub"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert security["ContentTypeOptions"]["Override"] is True
    assert security["FrameOptions"]["FrameOption"] == "DENY"
    assert security["ReferrerPolicy"]["ReferrerPolicy"] == "no-referrer"
    assert security["StrictTransportSecurity"]["AccessControlMaxAgeSec"] >= 31_536_000
    # One definition: the local server sends exactly these (chalicelib/hosting.py)
    assert "connect-src 'self' https://cognito-idp.${AWS::Region}.amazonaws.com" in csp  # the sign-in form
    assert hosting.security_headers(hosting.COGNITO_AWS) == {
        "Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": security["FrameOptions"]["FrameOption"],
        "Referrer-Policy": security["ReferrerPolicy"]["ReferrerPolicy"],
        "Strict-Transport-Security": f"max-age={security['StrictTransportSecurity']['AccessControlMaxAgeSec']}; "
                                     "includeSubDomains"}


def test_cors__allowed_origins_parameter__empty_default__preflight_mock_per_route(template: dict[str, Any]) -> None:
    param = template["Parameters"]["AllowedOrigins"]
    assert param["Type"] == "CommaDelimitedList" and param["Default"] == ""
    env = template["Resources"]["APIHandler"]["Properties"]["Environment"]["Variables"]
    assert env["CLARIFY_CORS_ORIGINS"] == {"Fn::Join": [",", {"Ref": "AllowedOrigins"}]}
    for path, item in template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]["paths"].items():
        integration = item["options"]["x-amazon-apigateway-integration"]
        assert integration["type"] == "mock" and "security" not in item["options"], path
        vtl = json.dumps(integration["responses"]["default"]["responseTemplates"])
        assert "Access-Control-Allow-Origin = $origin" in vtl and '{"Ref": "AllowedOrigins"}' in vtl


@pytest.fixture
def client_bucket(template: dict[str, Any], emulator: EmulatorThread) -> str:
    """The template's bucket through the emulator's CloudFormation; returns the stack name."""
    name = f"client{uuid.uuid4().hex[:6]}"
    resources = {k: v for k, v in template["Resources"].items() if v["Type"] == "AWS::S3::Bucket"}
    body = {"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources,
            "Outputs": {"ClientBucketName": template["Outputs"]["ClientBucketName"]}}
    _aws(emulator, "cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(body))
    return name


def test_deploy_client__objects_typed_and_cached__entry_points_revalidated(
        client_bucket: str, emulator: EmulatorThread, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator.url)
    assert deploy_client.main(["--stack", client_bucket]) == 0
    bucket = deploy_client.stack_bucket(_aws(emulator, "cloudformation"), client_bucket)
    s3 = _aws(emulator, "s3")
    version = hosting.version()
    index = s3.get_object(Bucket=bucket, Key="index.html")
    assert index["ContentType"] == "text/html; charset=utf-8" and index["CacheControl"] == "no-cache"
    html = index["Body"].read().decode()
    assert f'src="/web/{version}/app.js"' in html and 'src="/web/app.js"' not in html
    sw = s3.get_object(Bucket=bucket, Key="sw.js")
    assert sw["CacheControl"] == "no-cache" and f"/web/{version}/app.js" in sw["Body"].read().decode()
    for key, kind in (("app.js", "text/javascript; charset=utf-8"), ("style.css", "text/css; charset=utf-8"),
                      ("icon.svg", "image/svg+xml"), ("manifest.webmanifest", "application/manifest+json")):
        head = s3.head_object(Bucket=bucket, Key=f"web/{version}/{key}")
        assert (head["ContentType"], head["CacheControl"]) == (kind, "public, max-age=31536000, immutable")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {o.key for o in hosting.objects()}
    assert "web/index.html" not in keys and f"web/{version}/index.html" not in keys
