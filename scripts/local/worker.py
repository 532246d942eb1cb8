"""The local event-source process: the stream pump and the scheduler, invoking the app's functions."""
from __future__ import annotations

import argparse
import os
import signal
import threading

from chalicelib import bootstrap, observability

from .stack import make_pump, make_scheduler


def main() -> None:
    parser = argparse.ArgumentParser(description="stream pump + scheduler")
    parser.add_argument("--schedule-interval", type=float, default=15.0)
    args = parser.parse_args()
    observability.configure()
    bootstrap.configure_tables()
    pump = make_pump(os.environ["AWS_ENDPOINT_URL"])
    scheduler = make_scheduler(args.schedule_interval)
    threads = [threading.Thread(target=pump.run, daemon=True), threading.Thread(target=scheduler.run, daemon=True)]
    stop = threading.Event()

    def shutdown(*_: object) -> None:
        pump.stop()
        scheduler.stop()
        stop.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    for t in threads:
        t.start()
    print("worker: stream pump and scheduler running", flush=True)
    stop.wait()


if __name__ == "__main__":
    main()
