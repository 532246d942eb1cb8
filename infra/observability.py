"""Log groups, the stream dead-letter queue, the alarm topic and the alarms an operator pages on."""
from __future__ import annotations

from typing import Any

Resource = dict[str, Any]
ALARM_TOPIC = "AlarmTopic"
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
