"""Deploy gate (inline Lambda source): the reconciler runs before the API takes traffic.

A CloudFormation custom resource. Create/Update invoke the reconciler synchronously; its failure fails
the resource, so the deploy rolls back. Delete does nothing. During a rollback CloudFormation re-sends
the previous deployment id while the reconciler still carries the newer one: skip then, because the
older deployment's traffic flag was set by its own run. Kept under 4 KB (CloudFormation ZipFile limit).
"""
import json
import urllib.request
from typing import Any

import boto3
from botocore.config import Config


def handler(event: dict[str, Any], context: Any) -> None:
    status, reason, data = "SUCCESS", "ok", {}  # type: str, str, dict[str, str]
    try:
        if event["RequestType"] in ("Create", "Update"):
            data = run(event["ResourceProperties"])
    except Exception as exc:  # any failure must reach CloudFormation, or the stack waits for the timeout
        status, reason = "FAILED", f"{exc} (log stream {context.log_stream_name})"[:3000]
    respond(event, status, reason, data)


def run(props: dict[str, str]) -> dict[str, str]:
    name, wanted = props["ReconcilerFunction"], props["DeploymentId"]
    timeout = int(props["ReconcilerTimeout"]) + 30
    # One attempt: a retry after a read timeout would run a second reconcile next to the first.
    client = boto3.client("lambda", config=Config(read_timeout=timeout, retries={"total_max_attempts": 1}))
    env = client.get_function_configuration(FunctionName=name).get("Environment", {}).get("Variables", {})
    running = env.get("CLARIFY_DEPLOYMENT_ID")
    if running != wanted:
        return {"Result": f"skipped: reconciler carries deployment {running}, not {wanted} (rollback)"}
    resp = client.invoke(FunctionName=name, InvocationType="RequestResponse", Payload=b"{}")
    payload = resp["Payload"].read().decode()
    if resp.get("FunctionError"):
        raise RuntimeError(f"reconciler failed, traffic stays off: {payload[:1500]}")
    return {"Result": payload[:2000]}


def respond(event: dict[str, Any], status: str, reason: str, data: dict[str, str]) -> None:
    body = json.dumps({
        "Status": status, "Reason": reason, "Data": data,
        "PhysicalResourceId": event.get("PhysicalResourceId") or "clarify-reconcile-before-traffic",
        "StackId": event["StackId"], "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
    }).encode()
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"Content-Type": ""})  # the presigned URL signs an empty type
    with urllib.request.urlopen(request, timeout=30):
        pass
