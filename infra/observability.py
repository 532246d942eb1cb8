"""Log groups, the stream dead-letter queue, the alarm topic and the alarms an operator pages on."""
from __future__ import annotations

import json
from typing import Any

from chalicelib import observability as obs

Resource = dict[str, Any]
ALARM_TOPIC = "AlarmTopic"
DASHBOARD = "OperationsDashboard"
STREAM_DLQ = "StreamFailureQueue"
LOG_RETENTION_DAYS = 30
# Stream records older than this mean projections and client events lag visibly behind the aggregate.
ITERATOR_AGE_MS = 60_000


def log_group(function_name: str) -> Resource:
    """The function's log group, owned by the stack so it has a retention and a scoped IAM ARN."""
    return {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
            "Properties": {"LogGroupName": f"/aws/lambda/{function_name}",
                           "RetentionInDays": LOG_RETENTION_DAYS}}


def alarm_topic() -> Resource:
    """Subscribe people or a pager to this topic (README.md, "Deploying to AWS"); every alarm notifies it."""
    return {"Type": "AWS::SNS::Topic",
            "Properties": {"KmsMasterKeyId": "alias/aws/sns", "DisplayName": "Clarify alarms"}}


def stream_dlq(queue_name: str) -> Resource:
    """Where a stream batch goes after its retries: its shard/sequence range, for replay by an operator."""
    return {"Type": "AWS::SQS::Queue",
            "Properties": {"QueueName": queue_name, "MessageRetentionPeriod": 1_209_600,
                           "SqsManagedSseEnabled": True}}


def _alarm(description: str, namespace: str, metric: str, dimensions: list[dict[str, Any]], *, statistic: str,
           threshold: float, periods: int = 1, period: int = 60) -> Resource:
    return {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": description,
            "Namespace": namespace, "MetricName": metric, "Dimensions": dimensions,
            "Statistic": statistic, "Period": period,
            "EvaluationPeriods": periods, "DatapointsToAlarm": periods,
            "Threshold": threshold, "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            # No invocations is not a failure (a quiet stream, an idle API).
            "TreatMissingData": "notBreaching",
            "AlarmActions": [{"Ref": ALARM_TOPIC}], "OKActions": [{"Ref": ALARM_TOPIC}],
        },
    }


def _function(logical: str) -> list[dict[str, Any]]:
    return [{"Name": "FunctionName", "Value": {"Ref": logical}}]


def errors_alarm(logical: str, name: str) -> Resource:
    """Any failed invocation of the function within a minute."""
    return _alarm(f"{name}: invocations failed", "AWS/Lambda", "Errors", _function(logical),
                  statistic="Sum", threshold=1)


def iterator_age_alarm(logical: str, name: str) -> Resource:
    """The stream function is falling behind (or stuck retrying a poisoned batch)."""
    return _alarm(f"{name}: stream records older than {ITERATOR_AGE_MS // 1000}s", "AWS/Lambda", "IteratorAge",
                  _function(logical), statistic="Maximum", threshold=ITERATOR_AGE_MS, periods=5)


def reconciler_failing_alarm(logical: str, name: str) -> Resource:
    """The scheduled reconciler failed three runs in a row: expired claims and outbox markers stay stuck."""
    return _alarm(f"{name}: reconciler failing 3 runs in a row; owner deadlines are not being repaired",
                  "AWS/Lambda", "Errors", _function(logical), statistic="Sum", threshold=1, periods=3)


def queue_alarm(description: str, queue: str) -> Resource:
    """Anything waiting in the dead-letter queue `queue` (a logical id)."""
    return _alarm(description, "AWS/SQS", "ApproximateNumberOfMessagesVisible",
                  [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}],
                  statistic="Maximum", threshold=1, period=300)


def dlq_alarm() -> Resource:
    """A stream batch exhausted its retries: a projection or a client event is missing until replayed."""
    return queue_alarm("stream batches exhausted their retries (see the stream failure queue)", STREAM_DLQ)


# ------------------------------------------------------------------ Clarify's own metrics (chalicelib.observability)
def _service(service: str) -> list[dict[str, Any]]:
    return [{"Name": "service", "Value": service}]


def ambiguous_dispatch_alarm(service: str) -> Resource:
    """An agent may or may not have received a prompt or a resumed answer: it is never sent again, so a person
    looks at the session (clarify-ops session ID) and, if the agent lost it, asks the user to answer again."""
    return _alarm(f"{service}: a dispatch to an agent ended ambiguous (not resent)", obs.NAMESPACE,
                  obs.AMBIGUOUS_DISPATCHES, _service(service), statistic="Sum", threshold=1, period=300)


def quarantine_alarm(service: str) -> Resource:
    """The reconciler set a session aside that it could not repair: it takes no more input until a person
    repairs it and releases it (clarify-ops outstanding, session ID, release ID)."""
    return _alarm(f"{service}: the reconciler quarantined a session", obs.NAMESPACE, obs.QUARANTINES,
                  _service(service), statistic="Sum", threshold=1, period=300)


def dashboard(service: str, functions: list[tuple[str, str]], streams: list[str], queue: str) -> Resource:
    """One page for on-call: answers, conflicts, the alarmed metrics, the reconciler, the streams, errors.

    `functions` are (function name, title), `streams` the stream functions' names, `queue` the stream
    failure queue's name. Breakdowns are SEARCH expressions, so a new delivery or reason shows up unasked."""
    def search(metric: str, dimension: str, stat: str = "Sum") -> list[Any]:
        expr = (f"SEARCH('{{{obs.NAMESPACE},service,{dimension}}} MetricName=\"{metric}\" "
                f"service=\"{service}\"', '{stat}', 60)")
        return [{"expression": expr, "id": metric.lower(), "label": ""}]

    def own(*metrics: str, stat: str = "Sum") -> list[Any]:
        return [[obs.NAMESPACE, m, "service", service, {"stat": stat}] for m in metrics]

    def lambda_metric(metric: str, stat: str) -> list[Any]:
        return [["AWS/Lambda", metric, "FunctionName", name, {"stat": stat, "label": title}]
                for name, title in functions if not streams or metric != "IteratorAge" or name in streams]

    def widget(title: str, metrics: list[Any], x: int, y: int) -> dict[str, Any]:
        return {"type": "metric", "x": x, "y": y, "width": 12, "height": 6,
                "properties": {"title": title, "region": "${AWS::Region}", "view": "timeSeries",
                               "stacked": False, "period": 60, "metrics": metrics}}

    widgets = [
        widget("Answers by delivery (live, resumed, recorded, late)", search(obs.ANSWERS, "delivery"), 0, 0),
        widget("Conflicts (409) by reason", search(obs.CONFLICTS, "reason"), 12, 0),
        widget("Alarmed: ambiguous dispatches, quarantines",
               own(obs.AMBIGUOUS_DISPATCHES, obs.QUARANTINES), 0, 6),
        widget("Restores, watchdog fallbacks, live answers falling through",
               own(obs.RESTORES, obs.WATCHDOG_FALLBACKS, obs.LIVE_FALL_THROUGHS), 12, 6),
        widget("Reconciler repairs by kind", search(obs.RECONCILER_REPAIRS, "kind"), 0, 12),
        widget("Long-poll waits (count) and time held (s, average)",
               own(obs.LONG_POLL_WAITS) + own(obs.LONG_POLL_SECONDS, stat="Average"), 12, 12),
        widget("Stream iterator age (ms, max)",
               [["AWS/Lambda", "IteratorAge", "FunctionName", name, {"stat": "Maximum"}] for name in streams],
               0, 18),
        widget("Stream records failed (retried) and batches parked in the failure queue",
               own(obs.STREAM_RECORD_FAILURES) + [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName",
                                                  queue, {"stat": "Maximum"}]], 12, 18),
        widget("Function errors", lambda_metric("Errors", "Sum"), 0, 24),
        widget("Function invocations", lambda_metric("Invocations", "Sum"), 12, 24),
    ]
    return {"Type": "AWS::CloudWatch::Dashboard",
            "Properties": {"DashboardName": f"{service}-operations",
                           "DashboardBody": {"Fn::Sub": json.dumps({"widgets": widgets})}}}


# ------------------------------------------------------------------ X-Ray (chalicelib.observability's Tracer)
XRAY_WRITE = {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AWSXRayDaemonWriteAccess"}


def enable_tracing(resources: dict[str, Resource]) -> None:
    """Active tracing on every function and the API stage; each function role may write its segments (X-Ray
    actions take no resource ARN, hence AWS's managed policy rather than an inline statement)."""
    for res in resources.values():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::Serverless::Function":
            props["Tracing"] = "Active"
        elif res["Type"] == "AWS::Lambda::Function":
            props["TracingConfig"] = {"Mode": "Active"}
        elif res["Type"] == "AWS::Serverless::Api":
            props["TracingEnabled"] = True
        elif res["Type"] == "AWS::IAM::Role" and _lambda_assumes(props):
            props["ManagedPolicyArns"] = [*props.get("ManagedPolicyArns", []), XRAY_WRITE]


def _lambda_assumes(role: dict[str, Any]) -> bool:
    return any(s.get("Principal", {}).get("Service") == "lambda.amazonaws.com"
               for s in role.get("AssumeRolePolicyDocument", {}).get("Statement", []))
