"""`make run`: Clarify on this machine. Starts and supervises the emulator (unless one already answers),
creates the tables from the models and the event bus (with a rule to the queue `scripts/bus-tail` prints),
creates the emulator's user pool, web client and agent keyring, starts the simulated agent, the API, the stream
pump and the scheduler, runs the reconciler (the API answers 503 not_ready until it succeeds), then prints the
URL, the sign-in email and password of a local user, and a development token. Ctrl-C stops every child
process.

The pieces (environment, supervisor, one function per process, the before-traffic reconciler) are also
what `scripts/load` uses to start the same stack and to restart its processes after a kill -9."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import requests
from botocore.config import Config

from chalicelib import aws

from .bus import ensure_bus
from .env import ROOT, local_env
from .identity import add_user, ensure_identity, new_password

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


def new_deployment_id(prefix: str = "local") -> str:
    """Each start of the API is a deployment of its own: it serves once the reconciler ran for this id."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def stack_env(endpoint: str, agent_port: int, **overrides: str) -> dict[str, str]:
    """The environment of every child process: the local stage, the emulator and the agent's URL."""
    env = {**os.environ, **local_env(CLARIFY_AGENTCTL_URL=f"http://127.0.0.1:{agent_port}",
                                     CLARIFY_DEPLOYMENT_ID=new_deployment_id())}
    env.update(overrides)
    env["AWS_ENDPOINT_URL"] = endpoint
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("CLARIFY_LOG_FORMAT", "text")  # people read these; `make run LOG_FORMAT=json` for JSON
    return env


class Supervisor:
    """Child processes by name. With `logs`, each child's output is appended to `<logs>/<name>.log`."""

    def __init__(self, env: dict[str, str], logs: Path | None = None) -> None:
        self.env = env
        self.logs = logs
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        out: Any = None
        if self.logs is not None:
            out = open(self.logs / f"{name}.log", "ab")  # the child holds it; closed when it exits
        try:
            self.children[name] = subprocess.Popen([PY, "-m", *args], cwd=ROOT, env=env or self.env, stdout=out,
                                                   stderr=subprocess.STDOUT if out else None)
        finally:
            if out is not None:
                out.close()

    def dead(self) -> str | None:
        return next((n for n, p in self.children.items() if p.poll() is not None), None)

    def kill(self, name: str) -> None:
        """kill -9 one child (a crash: no handler runs) and reap it."""
        proc = self.children[name]
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)

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


# ------------------------------------------------------------------ the processes of the stack
def ensure_emulator(sup: Supervisor, endpoint: str) -> bool:
    """Start the emulator unless one already answers at `endpoint`; True when this call started it."""
    if emulator_answers(endpoint):
        return False
    port = endpoint.rsplit(":", 1)[-1].strip("/")
    sup.spawn("emulator", "scripts.local.emulator", "--port", port)
    wait_for(lambda: emulator_answers(endpoint), "the emulator")
    return True


def create_tables_at(endpoint: str) -> int:
    """Create the tables (named by CLARIFY_TABLE_PREFIX in this process's environment); returns how many."""
    from chalicelib import bootstrap
    from chalicelib.store.tables import create_tables
    bootstrap.configure_tables()
    return len(create_tables(aws.client("dynamodb", endpoint_url=endpoint)))


def spawn_agent(sup: Supervisor, api_url: str, agent_port: int, *extra: str) -> None:
    sup.spawn("agent", "scripts.local.sim_agent", "--api", api_url, "--port", str(agent_port), "--quiet", *extra)
    wait_for(lambda: _answers(f"http://127.0.0.1:{agent_port}/health", 200), "the simulated agent")


def spawn_api(sup: Supervisor, api_port: int, env: dict[str, str] | None = None) -> None:
    sup.spawn("api", "scripts.local.api_server", "--port", str(api_port), env=env)


def spawn_worker(sup: Supervisor, schedule_interval: float) -> None:
    sup.spawn("worker", "scripts.local.worker", "--schedule-interval", str(schedule_interval))


def reconcile_before_traffic(env: dict[str, str], timeout: float = 120.0) -> dict[str, Any]:
    """Run the before-traffic reconciler for env's deployment id in a process of its own (as the deploy
    gate invokes its function). Raises RuntimeError naming the failure; traffic then stays off."""
    done = subprocess.run([PY, "-m", "scripts.local.reconcile"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise RuntimeError(f"the reconciler failed: {lines[-1] if lines else done.returncode}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def start_api(sup: Supervisor, api_port: int, env: dict[str, str]) -> dict[str, Any]:
    """Start the API for env's deployment id and reconcile before it takes traffic; returns the report."""
    api_url = f"http://127.0.0.1:{api_port}"
    spawn_api(sup, api_port, env)
    wait_for(lambda: _answers(api_url + "/api/v1/health"), "the API")
    report = reconcile_before_traffic(env)
    wait_for(lambda: _answers(api_url + "/api/v1/health", 200), "readiness")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description="Run Clarify locally")
    env_int = lambda name, default: int(os.environ.get(name, default))  # noqa: E731
    parser.add_argument("--api-port", type=int, default=env_int("CLARIFY_API_PORT", 8000))
    parser.add_argument("--agent-port", type=int, default=env_int("CLARIFY_AGENT_PORT", 8001))
    parser.add_argument("--schedule-interval", type=float,
                        default=float(os.environ.get("CLARIFY_SCHEDULE_INTERVAL", "15")))
    parser.add_argument("--workspace", default=os.environ.get("CLARIFY_WORKSPACE", "ws-local"))
    parser.add_argument("--email", default=os.environ.get("CLARIFY_EMAIL", "you@example.com"),
                        help="the local user's sign-in email (its password is new on every start)")
    parser.add_argument("--json-logs", action="store_true",
                        help="log one JSON object per line, as in Lambda (default: readable lines)")
    args = parser.parse_args()
    if args.json_logs:
        os.environ["CLARIFY_LOG_FORMAT"] = "json"

    endpoint = aws.emulator_endpoint() or DEFAULT_ENDPOINT
    api_url = f"http://127.0.0.1:{args.api_port}"
    env = stack_env(endpoint, args.agent_port)
    os.environ.update(env)
    sup = Supervisor(env)
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        if not ensure_emulator(sup, endpoint):
            print(f"using the emulator already answering at {endpoint}", flush=True)
        print(f"tables: {create_tables_at(endpoint)} created", flush=True)
        env.update(ensure_identity(endpoint, env["CLARIFY_TABLE_PREFIX"]))  # the children's environment too
        os.environ.update(env)
        password = new_password()
        add_user(aws.client("cognito-idp", endpoint_url=endpoint), env["CLARIFY_USER_POOL_ID"], args.email,
                 args.workspace, password=password, move=True)  # the workspace this start asks for
        print(f"user pool: {env['CLARIFY_USER_POOL_ID']} app client: {env['CLARIFY_USER_POOL_CLIENT_ID']}", flush=True)
        bus = ensure_bus(env["CLARIFY_EVENT_BUS"], endpoint)
        print(f"event bus: {bus.name} (watch its events: scripts/bus-tail)", flush=True)
        spawn_agent(sup, api_url, args.agent_port)
        spawn_worker(sup, args.schedule_interval)
        report = start_api(sup, args.api_port, env)
        print(f"reconciler: {report}", flush=True)
        from chalicelib import bootstrap
        from chalicelib.auth.tokens import mint
        token = mint(bootstrap.auth_secret(), sub="local-user", role="user", workspace_id=args.workspace)
        print(f"\nClarify is ready: {api_url}/api/v1\nweb client: {api_url}/\n"
              f"sign in as {args.email} with password {password} (workspace {args.workspace})\n"
              f"development token (local stage only; {api_url}/#token=<it>):\n{token}\n", flush=True)
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
