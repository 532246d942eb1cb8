"""The local event bus: the bus Clarify publishes to (CLARIFY_EVENT_BUS), a rule copying every event to a
queue that `scripts/bus-tail` prints, and the template's pending-question rule, into a queue of its own."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chalicelib import aws
from infra.bus import ALL_EVENTS, QUESTION_PENDING


@dataclass(frozen=True)
class LocalBus:
    name: str
    tail_queue: str  # URL: every event on the bus
    question_queue: str  # URL: what the deployed stack sends to its pending-question topic

    @staticmethod
    def queue_names(bus: str) -> tuple[str, str]:
        return f"{bus}-tail", f"{bus}-questions"


def ensure_bus(bus: str, endpoint: str | None = None) -> LocalBus:
    """Create the bus, its queues and rules unless they exist (every call is an upsert)."""
    events, sqs = aws.client("events", endpoint_url=endpoint), aws.client("sqs", endpoint_url=endpoint)
    try:
        events.describe_event_bus(Name=bus)
    except events.exceptions.ResourceNotFoundException:
        events.create_event_bus(Name=bus)
    tail, questions = (sqs.create_queue(QueueName=q)["QueueUrl"] for q in LocalBus.queue_names(bus))
    for rule, pattern, queue in ((f"{bus}-all", ALL_EVENTS, tail),
                                 (f"{bus}-question-pending", QUESTION_PENDING, questions)):
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name=rule, EventBusName=bus, EventPattern=json.dumps(pattern), State="ENABLED")
        events.put_targets(Rule=rule, EventBusName=bus, Targets=[{"Id": "queue", "Arn": arn}])
    return LocalBus(bus, tail, questions)


def receive(queue_url: str, *, wait: int = 1, endpoint: str | None = None, sqs: Any = None) -> list[dict[str, Any]]:
    """Take what the queue holds (waiting up to `wait` s for the first message): the bus events, oldest first."""
    sqs = sqs or aws.client("sqs", endpoint_url=endpoint)
    out: list[dict[str, Any]] = []
    while True:
        resp = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0 if out else wait)
        messages = resp.get("Messages", [])
        if not messages:
            return out
        out.extend(json.loads(m["Body"]) for m in messages)
        sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
