"""`make run`: Clarify on this machine. Starts and supervises the emulator (unless one already answers),
creates the tables from the models and the event bus (with a rule to the queue `scripts/bus-tail` prints),
starts the simulated agent, the API, the stream pump and the scheduler, runs the reconciler (the API
answers 503 not_ready until it succeeds), then prints the URL and a user token. Ctrl-C stops every child
process."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import requests
from botocore.config import Config

from chalicelib import aws

from .bus import ensure_bus
from .env import ROOT, local_env

PY = sys.executable
DEFAULT_ENDPOINT = "http://127.0.0.1:4566"  # the LocalStack edge port


def emulator_answers(endpoint: str) -> bool:
    client = aws.client("dynamodb", endpoint_url=endpoint,
                        config=Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1}))
    try:
        client.list_tables()
        return True
    except Exception:
        return False


def wait_for(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f}s")


class Supervisor:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, *args: str) -> None:
        self.children[name] = subprocess.Popen([PY, "-m", *args], cwd=ROOT, env=self.env)

    def dead(self) -> str | None:
        return next((n for n, p in self.children.items() if p.poll() is not None), None)

    def stop(self) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.time() + 5
        for proc in self.children.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description="Run Clarify locally")
    env_int = lambda name, default: int(os.environ.get(name, default))  # noqa: E731
    parser.add_argument("--api-port", type=int, default=env_int("CLARIFY_API_PORT", 8000))
    parser.add_argument("--agent-port", type=int, default=env_int("CLARIFY_AGENT_PORT", 8001))
    parser.add_argument("--schedule-interval", type=float,
                        default=float(os.environ.get("CLARIFY_SCHEDULE_INTERVAL", "15")))
    parser.add_argument("--workspace", default=os.environ.get("CLARIFY_WORKSPACE", "ws-local"))
    args = parser.parse_args()

    endpoint = aws.emulator_endpoint() or DEFAULT_ENDPOINT
    api_url = f"http://127.0.0.1:{args.api_port}"
    env = {**os.environ, **local_env(CLARIFY_AGENTCTL_URL=f"http://127.0.0.1:{args.agent_port}",
                                     CLARIFY_DEPLOYMENT_ID=f"local-{uuid.uuid4().hex[:8]}")}
    env["AWS_ENDPOINT_URL"] = endpoint
    env["PYTHONUNBUFFERED"] = "1"
    os.environ.update(env)
    sup = Supervisor(env)
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        if emulator_answers(endpoint):
            print(f"using the emulator already answering at {endpoint}", flush=True)
        else:
            port = endpoint.rsplit(":", 1)[-1].strip("/")
            sup.spawn("emulator", "scripts.local.emulator", "--port", port)
            wait_for(lambda: emulator_answers(endpoint), "the emulator")
        from chalicelib import bootstrap
        from chalicelib.store.tables import create_tables
        bootstrap.configure_tables()
        created = create_tables(aws.client("dynamodb"))
        print(f"tables: {len(created)} created", flush=True)
        bus = ensure_bus(env["CLARIFY_EVENT_BUS"])
        print(f"event bus: {bus.name} (watch its events: scripts/bus-tail)", flush=True)
        sup.spawn("agent", "scripts.local.sim_agent", "--api", api_url, "--port", str(args.agent_port), "--quiet")
        sup.spawn("api", "scripts.local.api_server", "--port", str(args.api_port))
        sup.spawn("worker", "scripts.local.worker", "--schedule-interval", str(args.schedule_interval))
        wait_for(lambda: _answers(api_url + "/api/v1/health"), "the API")
        import app
        report = app.reconcile_before_traffic({}, None)
        print(f"reconciler: {report}", flush=True)
        wait_for(lambda: _answers(api_url + "/api/v1/health", 200), "readiness")
        from chalicelib.auth.tokens import mint
        token = mint(bootstrap.auth_secret(), sub="local-user", role="user", workspace_id=args.workspace)
        print(f"\nClarify is ready: {api_url}/api/v1\nweb client: {api_url}/#token={token}\n"
              f"user token (workspace {args.workspace}):\n{token}\n", flush=True)
        while not stopping:
            dead = sup.dead()
            if dead:
                print(f"{dead} exited; stopping", file=sys.stderr, flush=True)
                return 1
            time.sleep(0.3)
        return 0
    except Exception as exc:
        print(f"make run failed: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        sup.stop()


def _answers(url: str, status: int | None = None) -> bool:
    try:
        code = requests.get(url, timeout=2).status_code
    except requests.RequestException:
        return False
    return code == status if status is not None else code in (200, 503)


if __name__ == "__main__":
    sys.exit(main())
