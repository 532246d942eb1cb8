"""The stack under load: `make run`'s processes (scripts/local/run.py's pieces) on free loopback ports,
with tables of its own, and the faults: kill -9 one process, restart it as `make run` would (the API as a
new deployment that serves only after the before-traffic reconciler ran for it)."""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import requests

from scripts.local import run
from scripts.local.bus import ensure_bus
from scripts.local.ports import free_port

from .journal import Fault, Journal

TARGETS = ("api", "worker", "agent")
AGENT_RETRY_FOR = 30.0  # the simulated agent waits out an API restart instead of dropping its script


class LoadStack:
    def __init__(self, workdir: Path, journal: Journal, *, endpoint: str | None = None,
                 schedule_interval: float = 2.0) -> None:
        self.workdir, self.journal = workdir, journal
        self.api_port, self.agent_port = free_port(), free_port()
        self.endpoint = endpoint or f"http://127.0.0.1:{free_port()}"
        self.prefix = f"load{uuid.uuid4().hex[:6]}-"
        self.schedule_interval = schedule_interval
        self.env = run.stack_env(self.endpoint, self.agent_port, CLARIFY_TABLE_PREFIX=self.prefix)
        self.record = workdir / "agent-record.jsonl"
        self.sup = run.Supervisor(self.env, logs=workdir)
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.agent_url = f"http://127.0.0.1:{self.agent_port}"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> dict[str, Any]:
        os.environ.update(self.env)  # this process reads the same tables (settling, the verdict)
        run.ensure_emulator(self.sup, self.endpoint)
        run.create_tables_at(self.endpoint)
        ensure_bus(self.env["CLARIFY_EVENT_BUS"], self.endpoint)
        self._agent()
        run.spawn_worker(self.sup, self.schedule_interval)
        return self._api()

    def stop(self) -> None:
        self.sup.stop()

    def _api(self) -> dict[str, Any]:
        env = {**self.env, "CLARIFY_DEPLOYMENT_ID": run.new_deployment_id("load")}
        return run.start_api(self.sup, self.api_port, env)

    def _agent(self) -> None:
        run.spawn_agent(self.sup, self.api_url, self.agent_port, "--record", str(self.record),
                        "--retry-for", str(AGENT_RETRY_FOR))

    # ------------------------------------------------------------------ faults
    def crash(self, target: str) -> Fault:
        """kill -9 `target` at this moment and bring it back; the fault's window is journaled first."""
        fault = Fault(target, time.time(), self.sup.children[target].pid)
        self.journal.faults.append(fault)
        self.sup.kill(target)
        if target == "api":
            fault.reconciler = self._api()
        elif target == "agent":
            self._agent()
        else:
            run.spawn_worker(self.sup, self.schedule_interval)
        fault.back = time.time()
        return fault

    def ensure_up(self) -> None:
        for name in TARGETS:
            if self.sup.children[name].poll() is not None:
                self.crash(name)

    # ------------------------------------------------------------------ settling
    def agent_running(self) -> int:
        try:
            return int(requests.get(self.agent_url + "/health", timeout=5).json().get("running", 0))
        except (requests.RequestException, ValueError):
            return -1

    def settle(self, agent_idle_within: float = 90.0, passes: int = 10) -> list[dict[str, Any]]:
        """No more traffic: wait for the agent's scripts to end, stop the worker, then alternate the
        before-traffic reconciler (repair everything) and the stream pump until neither has work left."""
        deadline = time.time() + agent_idle_within
        while self.agent_running() != 0 and time.time() < deadline:
            time.sleep(0.5)
        worker = self.sup.children["worker"]
        worker.terminate()
        worker.wait(timeout=15)
        import app
        from scripts.local.stack import make_pump
        pump = make_pump(self.endpoint)
        reports = []
        for _ in range(passes):
            drained = pump.drain()
            report = dict(app.reconcile_before_traffic({}, None))
            report["stream_records"] = drained + pump.drain()
            reports.append(report)
            repairs = {k: v for k, v in report.items() if k not in ("examined", "errors") and v}
            if not repairs:
                break
        return reports

    # ------------------------------------------------------------------ the stored data
    def dynamodb(self) -> Any:
        return boto3.client("dynamodb", endpoint_url=self.endpoint, region_name="us-east-1")
