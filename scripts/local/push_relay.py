"""The local stand-in for the pending-question rule's Lambda target: takes the events the rule put in its queue
(scripts/local/bus.py) and invokes the app's push function with each, as EventBridge invokes it in AWS. A
message is deleted once the function succeeded; a failed one comes back after its visibility timeout (Lambda's
own retry of a failed asynchronous invocation)."""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from chalicelib import aws

from .bus import LocalBus
from .handlers import LambdaContext

log = logging.getLogger(__name__)
RETRY_AFTER = 5  # seconds a failed event stays invisible before it is delivered again
IDLE = 0.5  # seconds between reads of an empty queue (never a long poll: the emulator serves one request at a time)


def question_queue(bus: str, endpoint: str | None = None) -> str:
    sqs = aws.client("sqs", endpoint_url=endpoint)
    return str(sqs.get_queue_url(QueueName=LocalBus.queue_names(bus)[1])["QueueUrl"])


def relay_once(queue_url: str, handler: Callable[[dict[str, Any], Any], Any], *,
               endpoint: str | None = None) -> int | None:
    """Deliver what the queue holds now; how many succeeded (None: the queue was empty)."""
    sqs = aws.client("sqs", endpoint_url=endpoint)
    resp = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                               VisibilityTimeout=RETRY_AFTER)
    if not resp.get("Messages"):
        return None
    done = 0
    for message in resp.get("Messages", []):
        try:
            handler(json.loads(message["Body"]), LambdaContext("push_delivery"))
        except Exception:
            log.exception("push_delivery failed; the event comes back in %ss", RETRY_AFTER)
            continue
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        done += 1
    return done


class PushRelay:
    def __init__(self, bus: str, endpoint: str | None = None) -> None:
        self.queue, self.endpoint = question_queue(bus, endpoint), endpoint
        self._stop = threading.Event()

    def run(self) -> None:
        import app as application
        while not self._stop.is_set():
            try:
                if relay_once(self.queue, application.push_delivery, endpoint=self.endpoint) is None:
                    self._stop.wait(IDLE)
            except Exception:
                log.exception("the push relay could not read its queue")
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
