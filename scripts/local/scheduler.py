"""Fires the app's @app.schedule functions on a timer, with the event shape EventBridge delivers."""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("scheduler")


def scheduled_event(name: str) -> dict[str, Any]:
    return {"version": "0", "id": uuid.uuid4().hex, "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "000000000000", "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1", "resources": [f"arn:aws:events:us-east-1:000000000000:rule/{name}"],
            "detail": {}}


class Scheduler:
    def __init__(self, jobs: dict[str, Callable[[dict[str, Any], Any], Any]], interval: float) -> None:
        self.jobs, self.interval = jobs, interval
        self._stop = threading.Event()
        self.runs = 0

    def fire_all(self) -> None:
        for name, job in self.jobs.items():
            try:
                job(scheduled_event(name), None)
            except Exception:
                log.exception("scheduled function %s failed", name)
        self.runs += 1

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.fire_all()

    def stop(self) -> None:
        self._stop.set()
