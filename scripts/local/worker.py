"""The local event-source process: the stream pump, the scheduler and the push relay (the pending-question rule's
function target), invoking the app's functions."""
from __future__ import annotations

import argparse
import os
import signal
import threading

from chalicelib import bootstrap, observability

from .push_relay import PushRelay
from .stack import make_pump, make_scheduler


def main() -> None:
    parser = argparse.ArgumentParser(description="stream pump + scheduler")
    parser.add_argument("--schedule-interval", type=float, default=15.0)
    args = parser.parse_args()
    observability.configure()
    bootstrap.configure_tables()
    pump = make_pump(os.environ["AWS_ENDPOINT_URL"])
    scheduler = make_scheduler(args.schedule_interval)
    relay = PushRelay(os.environ["CLARIFY_EVENT_BUS"], os.environ["AWS_ENDPOINT_URL"])
    threads = [threading.Thread(target=pump.run, daemon=True), threading.Thread(target=scheduler.run, daemon=True),
               threading.Thread(target=relay.run, daemon=True)]
    stop = threading.Event()

    def shutdown(*_: object) -> None:
        pump.stop()
        scheduler.stop()
        relay.stop()
        stop.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    for t in threads:
        t.start()
    print("worker: stream pump, scheduler and push relay running", flush=True)
    stop.wait()


if __name__ == "__main__":
    main()
