"""The event bus and its consumers: an archive of every event, and a rule that sends "a question is now pending
for a user" to an SNS topic (for other subscribers) and to the Web Push function (push_target)."""
from __future__ import annotations

from typing import Any

from chalicelib.bus import SOURCE

from . import observability as obs

Resource = dict[str, Any]
EVENT_BUS = "EventBus"
ARCHIVE = "EventArchive"
QUESTION_RULE = "QuestionPendingRule"
QUESTION_TOPIC = "QuestionTopic"
QUESTION_KEY = "QuestionTopicKey"
QUESTION_DLQ = "QuestionDeliveryFailureQueue"
ARCHIVE_RETENTION_DAYS = 30

# Every event Clarify publishes (the local run's tail queue uses this too).
ALL_EVENTS: dict[str, Any] = {"source": [SOURCE]}
# A question is now pending for a user: the agent asked a new clarification bundle. Its transcript message
# is added exactly once per bundle (a stable event id), and a bundle is only ever created pending in the
# session's current turn. The task summary's pending_action is not used: it changes only for a task's first
# pending question and again when its primary session changes; session.updated repeats while one is pending.
QUESTION_PENDING: dict[str, Any] = {"source": [SOURCE], "detail-type": ["message.added"],
                                    "detail": {"payload": {"type": ["clarification"]}}}


def names(app_name: str, stage: str) -> dict[str, str]:
    prefix = f"{app_name}-{stage}"
    return {"bus": f"{prefix}-events", "archive": f"{prefix}-events-archive",
            "rule": f"{prefix}-question-pending", "topic": f"{prefix}-questions",
            "dlq": f"{prefix}-question-delivery-failures"}


def bus_resources(app_name: str, stage: str) -> dict[str, Resource]:
    n = names(app_name, stage)
    rule_arn = {"Fn::GetAtt": [QUESTION_RULE, "Arn"]}
    return {
        EVENT_BUS: {"Type": "AWS::Events::EventBus", "Properties": {"Name": n["bus"]}},
        ARCHIVE: {"Type": "AWS::Events::Archive", "Properties": {
            "ArchiveName": n["archive"], "SourceArn": {"Fn::GetAtt": [EVENT_BUS, "Arn"]},
            "RetentionDays": ARCHIVE_RETENTION_DAYS,
            "Description": "Every Clarify event, for replay onto the bus (aws events start-replay)"}},
        QUESTION_RULE: {"Type": "AWS::Events::Rule", "Properties": {
            "Name": n["rule"], "EventBusName": {"Ref": EVENT_BUS}, "State": "ENABLED",
            "Description": "A question is now pending for a user (the agent asked a new clarification)",
            "EventPattern": QUESTION_PENDING,
            "Targets": [{"Id": "question-topic", "Arn": {"Ref": QUESTION_TOPIC},
                         "RetryPolicy": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86_400},
                         "DeadLetterConfig": {"Arn": {"Fn::GetAtt": [QUESTION_DLQ, "Arn"]}}}]}},
        # EventBridge cannot publish to a topic encrypted with the AWS-managed SNS key: it gets its own key.
        QUESTION_KEY: {"Type": "AWS::KMS::Key", "Properties": {
            "Description": "Encrypts the pending-question topic; EventBridge may use it to publish",
            "EnableKeyRotation": True,
            "KeyPolicy": {"Version": "2012-10-17", "Statement": [
                {"Sid": "AccountAdministers", "Effect": "Allow",
                 "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
                 "Action": "kms:*", "Resource": "*"},
                {"Sid": "EventBridgePublishes", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                 "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*"}]}}},
        QUESTION_TOPIC: {"Type": "AWS::SNS::Topic", "Properties": {
            "TopicName": n["topic"], "DisplayName": "Clarify: a question is pending",
            "KmsMasterKeyId": {"Ref": QUESTION_KEY}}},
        f"{QUESTION_TOPIC}Policy": {"Type": "AWS::SNS::TopicPolicy", "Properties": {
            "Topics": [{"Ref": QUESTION_TOPIC}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [
                {"Sid": "QuestionRulePublishes", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                 "Action": "sns:Publish", "Resource": {"Ref": QUESTION_TOPIC},
                 "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}}}]}}},
        # Events the rule could not deliver to the topic after its retries: kept 14 days, and alarmed.
        QUESTION_DLQ: {"Type": "AWS::SQS::Queue", "Properties": {
            "QueueName": n["dlq"], "MessageRetentionPeriod": 1_209_600, "SqsManagedSseEnabled": True}},
        f"{QUESTION_DLQ}Policy": {"Type": "AWS::SQS::QueuePolicy", "Properties": {
            "Queues": [{"Ref": QUESTION_DLQ}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [
                {"Sid": "QuestionRuleDeadLetters", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                 "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": [QUESTION_DLQ, "Arn"]},
                 "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}}}]}}},
        "QuestionDeliveryFailureAlarm": obs.queue_alarm(
            "pending-question events could not be delivered to the topic (see the question delivery failure queue)",
            QUESTION_DLQ),
    }


def push_target(resources: dict[str, Resource], function: str) -> dict[str, Resource]:
    """Adds the Web Push function (logical id `function`) as a second target of the pending-question rule, and
    the permission for the rule to invoke it. Lambda retries a failed invocation (devices still unreached)
    twice; the rule's own retry policy covers invoking it at all."""
    rule = resources[QUESTION_RULE]["Properties"]
    rule["Targets"].append({"Id": "push-delivery", "Arn": {"Fn::GetAtt": [function, "Arn"]},
                            "RetryPolicy": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86_400},
                            "DeadLetterConfig": {"Arn": {"Fn::GetAtt": [QUESTION_DLQ, "Arn"]}}})
    return {f"{function}QuestionRulePermission": {"Type": "AWS::Lambda::Permission", "Properties": {
        "Action": "lambda:InvokeFunction", "FunctionName": {"Ref": function}, "Principal": "events.amazonaws.com",
        "SourceArn": {"Fn::GetAtt": [QUESTION_RULE, "Arn"]}}}}


def bus_outputs() -> dict[str, Any]:
    return {
        "EventBusName": {"Description": "Clarify publishes every client event here (source \"clarify\")",
                         "Value": {"Ref": EVENT_BUS}},
        "EventBusArn": {"Value": {"Fn::GetAtt": [EVENT_BUS, "Arn"]}},
        "EventArchiveArn": {"Description": "Replay events from here onto the bus",
                            "Value": {"Fn::GetAtt": [ARCHIVE, "Arn"]}},
        "QuestionRuleName": {"Value": {"Ref": QUESTION_RULE}},
        "QuestionTopicArn": {"Description": "Subscribe here to hear of every new pending question",
                             "Value": {"Ref": QUESTION_TOPIC}},
    }
