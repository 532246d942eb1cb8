"""`make run` as the README says: the whole local stack in child processes, over real HTTP.

The emulator is started here first, so the run command must use it (and its data) instead of its own,
which also proves a restart keeps the data and the reconciler runs again before traffic.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from chalicelib import aws
from scripts.local.emulator import EmulatorThread
from scripts.local.identity import sign_in
from scripts.local.ports import free_port
from tests.support.wait import eventually

ROOT = Path(__file__).resolve().parents[2]

# make itself receives the Ctrl-C too and reports it (130, or -SIGINT); the run command exits 0.
CTRL_C_EXIT = (0, 130, -signal.SIGINT)


class Run:
    def __init__(self, endpoint: str) -> None:
        self.api_port, self.agent_port = free_port(), free_port()
        env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "CLARIFY_API_PORT": str(self.api_port),
               "CLARIFY_AGENT_PORT": str(self.agent_port), "CLARIFY_SCHEDULE_INTERVAL": "2",
               "CLARIFY_WORKSPACE": "ws-e2e"}
        self.endpoint = endpoint
        self.proc = subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.output: list[str] = []
        self.token = self._wait_ready()
        self.url = f"http://127.0.0.1:{self.api_port}/api/v1"

    def _wait_ready(self, timeout: float = 90) -> str:
        deadline = time.time() + timeout
        assert self.proc.stdout is not None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            if "development token" in line:
                self.dev_token = self.proc.stdout.readline().strip()
                # Keep reading: the processes log every request, and a full pipe would stall them.
                threading.Thread(target=lambda: self.output.extend(self.proc.stdout or ()), daemon=True).start()
                # The local user signs in as the web client does, at the emulator's Cognito.
                text = "".join(self.output)
                client = re.search(r"app client: (\S+)", text)
                user = re.search(r"sign in as (\S+) with password (\S+) ", text)
                assert client and user, text
                cognito = aws.client("cognito-idp", endpoint_url=self.endpoint)
                return str(sign_in(cognito, client[1], user[1], user[2])["AccessToken"])
        raise AssertionError("make run did not become ready:\n" + "".join(self.output))

    def call(self, method: str, path: str, body: Any = None) -> requests.Response:
        return requests.request(method, self.url + path, json=body, timeout=30,
                                headers={"Authorization": f"Bearer {self.token}"})

    def stop(self) -> int:
        os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        return self.proc.wait(timeout=30)


@pytest.fixture
def shared_emulator() -> Iterator[EmulatorThread]:
    emu = EmulatorThread(port=free_port()).start()
    yield emu
    emu.stop()


def test_make_run__message__agent_reply_events_and_clean_stop(shared_emulator: EmulatorThread) -> None:
    run = Run(shared_emulator.url)
    try:
        health = requests.get(run.url + "/health", timeout=30).json()
        assert (health["status"], health["ready"]) == ("ok", True), health
        assert health.get("stream", {}).get("set_aside", 0) == 0  # the worker's pump reports here once it ran
        assert "using the emulator already answering" in "".join(run.output)
        # The development token printed beside the sign-in works too, on the local stage.
        assert requests.get(run.url + "/tasks", headers={"Authorization": f"Bearer {run.dev_token}"},
                            timeout=30).status_code == 200
        task = run.call("POST", "/tasks", {"title": "e2e"}).json()
        session = run.call("POST", f"/tasks/{task['id']}/sessions", {}).json()
        sent = run.call("POST", f"/sessions/{session['id']}/messages", {"client_message_id": "e2e-1",
                                                                         "content": "hello agent"})
        assert sent.status_code == 201 and sent.json()["admission"] == "sent"
        messages = eventually(lambda: [m for m in run.call("GET", f"/sessions/{session['id']}/transcript")
                                       .json()["messages"] if m["author_type"] == "agent"])
        assert messages[0]["content"] == "Echo: hello agent"
        # Readable request lines with their ids, not JSON (`make run LOG_FORMAT=json` for that).
        eventually(lambda: any("send_message 201  request_id=" in line and f"session={session['id']}" in line
                               for line in list(run.output)))
        types = eventually(lambda: {e["type"] for e in run.call("GET", "/events").json()["events"]}
                           >= {"turn.started", "turn.completed", "message.added"})
        assert types
    finally:
        code = run.stop()
    assert code in CTRL_C_EXIT, "".join(run.output)
    ports = (run.api_port, run.agent_port)
    for port in ports:  # every child stopped with it
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0

    again = Run(shared_emulator.url)  # restart against the same data
    try:
        titles = [t["title"] for t in again.call("GET", "/tasks").json()["tasks"]]
        assert "e2e" in titles
    finally:
        assert again.stop() in CTRL_C_EXIT


def _broken_aggregate(endpoint: str) -> Any:
    from scripts.local.stack import aws_clients
    client = aws_clients(endpoint)[0]
    from chalicelib.store import tables
    os.environ["CLARIFY_TABLE_PREFIX"] = "clarify-local-"
    from chalicelib import bootstrap
    bootstrap.configure_tables()
    tables.create_tables(client)
    return client


def test_make_run__unrepairable_aggregate__set_apart_and_the_stack_serves(shared_emulator: EmulatorThread) -> None:
    """An aggregate no repair fits does not hold traffic: the reconciler quarantines it, says so, and the
    stack serves with /health naming the count (the operator releases it with scripts/clarify-ops)."""
    client = _broken_aggregate(shared_emulator.url)
    client.put_item(TableName="clarify-local-sessions", Item={
        "session_id": {"S": "broken"}, "workspace_id": {"S": "w"}, "task_id": {"S": "t"},
        "created_at": {"S": "x"}, "updated_at": {"S": "x"}, "state": {"S": "WAITING_FOR_INPUT"},
        "version": {"N": "1"}, "bundles": {"M": {}}, "recon_shard": {"S": "due"}, "recon_due": {"S": "x"},
        # a reservation without its predecessor turn is malformed recovery metadata
        "reservation": {"M": {"turn_id": {"S": "t2"}, "attempted": {"BOOL": False}}}})
    run = Run(shared_emulator.url)
    try:
        assert re.search(r"reconciler: .*quarantined.*broken", "".join(run.output)), "".join(run.output)
        health = requests.get(run.url + "/health", timeout=30).json()
        assert health["quarantined_sessions"] == 1 and health["ready"] is True, health
    finally:
        assert run.stop() in CTRL_C_EXIT, "".join(run.output)[-4000:]
        client.delete_item(TableName="clarify-local-sessions", Key={"session_id": {"S": "broken"}})


def test_make_run__reconciler_fails__refuses_to_start(shared_emulator: EmulatorThread) -> None:
    """The before-traffic reconciler cannot run at all (its sessions table is not what the code expects):
    the run command must not serve."""
    from scripts.local.stack import aws_clients
    client = aws_clients(shared_emulator.url)[0]
    if "clarify-local-sessions" in client.list_tables()["TableNames"]:  # the emulator's state is per process
        client.delete_table(TableName="clarify-local-sessions")
    client.create_table(TableName="clarify-local-sessions", BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    env = {**os.environ, "AWS_ENDPOINT_URL": shared_emulator.url, "CLARIFY_API_PORT": str(free_port()),
           "CLARIFY_AGENT_PORT": str(free_port())}
    try:
        done = subprocess.run(["make", "--no-print-directory", "run"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        client.delete_table(TableName="clarify-local-sessions")
    assert done.returncode != 0
    assert re.search(r"make run failed: .*reconciler failed", done.stdout + done.stderr), done.stdout + done.stderr
