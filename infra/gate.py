"""The deploy step "reconciler before traffic" as a CloudFormation custom resource.

Order inside one stack: tables -> functions -> this gate (invokes reconcile_before_traffic) -> the REST API
(it DependsOn the gate, so on the first deploy the API does not exist until reconciliation succeeded).
On later deploys the traffic flag does the gating: new functions carry a fresh CLARIFY_DEPLOYMENT_ID and
answer 503 not_ready until the gate's reconcile run marks that id ready.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .iam import lambda_role
from .observability import log_group

GATE = "ReconcileBeforeTrafficGate"
GATE_FUNCTION = "DeployGate"
GATE_ROLE = "DeployGateRole"
GATE_LOGS = "DeployGateLogGroup"
SOURCE = Path(__file__).with_name("gate_handler.py")
ZIPFILE_LIMIT = 4096  # CloudFormation's inline-code limit


def gate_source() -> str:
    source = SOURCE.read_text()
    if len(source.encode()) > ZIPFILE_LIMIT:
        raise ValueError(f"{SOURCE.name} exceeds CloudFormation's {ZIPFILE_LIMIT}-byte inline code limit")
    return source


def gate_resources(*, reconciler: str, reconciler_timeout: int, deployment_id: str, function_name: str,
                   runtime: str, depends_on: list[str]) -> dict[str, Any]:
    """The gate function, its role and log group, and the custom resource that runs it on every deploy.

    `reconciler` is the logical id of reconcile_before_traffic; `depends_on` lists what must exist first.
    """
    statements = [
        {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
         "Resource": {"Fn::GetAtt": [GATE_LOGS, "Arn"]}},
        # Read the reconciler's deployment id (rollback detection), then invoke it; nothing else.
        {"Effect": "Allow", "Action": ["lambda:GetFunctionConfiguration", "lambda:InvokeFunction"],
         "Resource": {"Fn::GetAtt": [reconciler, "Arn"]}},
    ]
    function = {
        "Type": "AWS::Lambda::Function",
        "DependsOn": [GATE_LOGS],
        "Properties": {
            "FunctionName": function_name,
            "Runtime": runtime, "Handler": "index.handler",
            "Code": {"ZipFile": gate_source()},
            "Role": {"Fn::GetAtt": [GATE_ROLE, "Arn"]},
            # The reconciler's own timeout plus room to report back to CloudFormation.
            "Timeout": reconciler_timeout + 60, "MemorySize": 128,
        },
    }
    gate = {
        "Type": "Custom::ReconcileBeforeTraffic",
        # The reconciler itself is already ordered by the Ref below (cfn-lint W3005 otherwise).
        "DependsOn": sorted(set(depends_on) - {reconciler}),
        "Properties": {
            "ServiceToken": {"Fn::GetAtt": [GATE_FUNCTION, "Arn"]},
            # Fail the deploy soon after the gate's own timeout instead of CloudFormation's default hour.
            "ServiceTimeout": reconciler_timeout + 120,
            # A new deployment id changes the properties, so every deploy of a new package runs the gate.
            "DeploymentId": deployment_id,
            "ReconcilerFunction": {"Ref": reconciler},
            "ReconcilerTimeout": str(reconciler_timeout),
        },
    }
    return {
        GATE_ROLE: lambda_role(statements, "deploy-gate"),
        GATE_LOGS: log_group(function_name),
        GATE_FUNCTION: function,
        GATE: gate,
    }
