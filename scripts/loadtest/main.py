"""The load and soak run: locust users against the local stack, kill -9 faults, settling, the verdict."""
from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import gevent
import requests
from locust.env import Environment

from chalicelib import bootstrap
from chalicelib.auth.tokens import mint
from chalicelib.domain.model import Session, Task
from chalicelib.services import archive
from chalicelib.store import codec
from scripts.local.env import ROOT

from .journal import AnswerOp, Journal, Request
from .stack import TARGETS, LoadStack
from .users import Person
from .verdict import AgentRecord, Verdict, judge

BASELINE_SAMPLES = 300
PROBE_EVERY = 0.25  # a bare GetItem during the load, to show what contention alone does to it


def args_of(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Load and soak run of Clarify under kill -9 faults")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (the soak: minutes)")
    p.add_argument("--users", type=int, default=10, help="concurrent simulated users")
    p.add_argument("--spawn-rate", type=float, default=5.0)
    p.add_argument("--fault-interval", type=float, default=None,
                   help="mean seconds between kills (default: a sixth of the duration, 8-30 s)")
    p.add_argument("--no-faults", action="store_true")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--workdir", type=Path, default=None, help="logs, the agent's record, the verdict")
    p.add_argument("--json", type=Path, default=None, help="also write the verdict as JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = args_of(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    random.seed(seed)
    workdir = args.workdir or ROOT / "artifacts" / "load" / time.strftime("%Y%m%d-%H%M%S")
    workdir.mkdir(parents=True, exist_ok=True)
    journal = Journal()
    stack = LoadStack(workdir, journal)
    print(f"load: {args.users} users for {args.duration:.0f}s, seed {seed}, logs in {workdir}", flush=True)
    try:
        stack.start()
        baseline = bare_getitems(stack, BASELINE_SAMPLES)
        load_window = drive(args, stack, journal, rng)
        stack.ensure_up()
        settled = stack.settle()
        verdict = judge(journal, AgentRecord.load(stack.record), stored_sessions(stack), stored_tasks(journal),
                        lambda op: ask_again(stack, op))
    finally:
        stack.stop()
    report = Report(args, seed, journal, verdict, baseline, load_window, settled, logged(workdir))
    text = report.markdown()
    print(text, flush=True)
    (workdir / "verdict.md").write_text(text)
    data = json.dumps(report.as_dict(), indent=2, default=str)
    (workdir / "verdict.json").write_text(data)
    if args.json:
        args.json.write_text(data)
    return 0 if verdict.clean else 1


# ------------------------------------------------------------------ running the load
def drive(args: argparse.Namespace, stack: LoadStack, journal: Journal, rng: random.Random) -> tuple[float, float]:
    secret = bootstrap.auth_secret()

    class User(Person):
        host = stack.api_url

    User.journal = journal
    User.token_for = staticmethod(lambda ws, sub: mint(secret, sub=sub, role="user", workspace_id=ws))
    env = Environment(user_classes=[User], host=stack.api_url, stop_timeout=60.0)
    env.events.request.add_listener(lambda **kw: journal.requests.append(request_of(**kw)))
    runner = env.create_local_runner()
    start = time.time()
    until = start + args.duration
    helpers = [gevent.spawn(probe, stack, journal, until)]
    if not args.no_faults:
        interval = args.fault_interval or min(30.0, max(8.0, args.duration / 6))
        helpers.append(gevent.spawn(inject_faults, stack, rng, interval, until))
    runner.start(args.users, spawn_rate=args.spawn_rate)
    gevent.joinall(helpers)  # both end by `until`; a restart in progress completes first
    gevent.sleep(max(0.0, until - time.time()))
    # On a starved machine the restarts can take most of a short run, and no answer reaches a waiting agent
    # live; the faults are over, so the users run on until one did (at most the run's length again).
    limit = time.time() + args.duration
    if not journal.handed_over_live():
        print("load: no live handoff yet; running on without faults until one (bounded)", flush=True)
    while not journal.handed_over_live() and time.time() < limit:
        gevent.sleep(0.5)
    runner.quit()  # users finish the scenario they are in (stop_timeout), then stop
    return start, time.time()


def inject_faults(stack: LoadStack, rng: random.Random, interval: float, until: float) -> None:
    """kill -9 api, worker and agent in a shuffled rotation at random moments (mean `interval`).

    The first rotation is spread over the first half of the run whatever `interval` says, so every process
    dies at least once even when a restart takes long on a loaded machine (a kill waits for the restart);
    when restarts took the whole run, the rotation still completes after its end."""
    first = rng.sample(TARGETS, len(TARGETS))
    half = max(0.0, until - time.time()) / 2
    begin = time.time()
    for i, target in enumerate(first):  # completed even past `until`: a slow restart must not spare a process
        gevent.sleep(max(0.0, begin + half * (i + rng.uniform(0.5, 1.0)) / len(first) - time.time()))
        _kill(stack, target)
    order: list[str] = []
    while True:
        gevent.sleep(rng.uniform(0.5, 1.5) * interval)
        if time.time() >= until:
            return
        if not order:
            order = rng.sample(TARGETS, len(TARGETS))
        _kill(stack, order.pop())


def _kill(stack: LoadStack, target: str) -> None:
    fault = stack.crash(target)
    print(f"fault: kill -9 {fault.target} (pid {fault.pid}); back after {fault.back - fault.killed:.1f}s"
          + (f"; reconciler {fault.reconciler}" if fault.reconciler else ""), flush=True)


def request_of(request_type: str, name: str, response_time: float, response: Any, context: dict[str, Any],
               start_time: float, **_: Any) -> Request:
    status = int(getattr(response, "status_code", 0) or 0)
    code = retryable = None
    message = ""
    if status >= 400:
        try:
            error = response.json().get("error", {})
            code, retryable, message = error.get("code"), error.get("retryable"), str(error.get("message", ""))
        except (ValueError, AttributeError):
            message = str(getattr(response, "text", ""))[:200]
    elif not status:
        message = str(getattr(response, "error", ""))[:200]
    return Request(name, start_time, start_time + response_time / 1000, status, code, retryable,
                   {k: v for k, v in context.items() if k in ("clarification_id", "marker")}, message,
                   str(getattr(getattr(response, "request", None), "path_url", "")))


def bare_getitems(stack: LoadStack, n: int) -> list[float]:
    client, table, key = _meta(stack)
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        client.get_item(TableName=table, Key=key, ConsistentRead=True)
        samples.append(time.perf_counter() - t)
    return samples


def probe(stack: LoadStack, journal: Journal, until: float) -> None:
    client, table, key = _meta(stack)
    while time.time() < until:
        t, start = time.perf_counter(), time.time()
        client.get_item(TableName=table, Key=key, ConsistentRead=True)
        journal.requests.append(Request("GetItem (bare, during the load)", start,
                                        start + time.perf_counter() - t, 200))
        gevent.sleep(PROBE_EVERY)


def _meta(stack: LoadStack) -> tuple[Any, str, dict[str, Any]]:
    from chalicelib.store.models import MetaRecord
    client = stack.dynamodb()
    table = str(MetaRecord.Meta.table_name)
    client.put_item(TableName=table, Item={"key": {"S": "load-probe"}, "value": {"S": "x"},
                                           "updated_at": {"S": "now"}})
    return client, table, {"key": {"S": "load-probe"}}


# ------------------------------------------------------------------ the stored data
def stored_sessions(stack: LoadStack) -> dict[str, Session]:
    from chalicelib.store.models import SessionRecord
    pages = stack.dynamodb().get_paginator("scan").paginate(TableName=str(SessionRecord.Meta.table_name),
                                                            ConsistentRead=True)
    items = [codec.session_from_item(codec.from_attrs(i)) for page in pages for i in page["Items"]]
    deps = bootstrap.deps()  # a question respond can no longer answer lives in its history record: read it there
    return {s.id: archive.with_archived(deps, s) for s in items}


def stored_tasks(journal: Journal) -> list[Task]:
    store = bootstrap.deps().store
    return [t for ws in range(Person.workspaces) for t in store.list_tasks(f"ws-load-{ws}")]


def ask_again(stack: LoadStack, op: AnswerOp) -> int:
    """Send a message again exactly as the user did: what a client learns when it asks what became of it."""
    session = bootstrap.deps().store.get_session(op.session_id)
    if session is None or op.body is None:
        return 0
    token = mint(bootstrap.auth_secret(), sub=f"check-{uuid.uuid4().hex[:6]}", role="user",
                 workspace_id=session.workspace_id)
    resp = requests.post(f"{stack.api_url}/api/v1/sessions/{op.session_id}/messages", json=op.body, timeout=30,
                         headers={"Authorization": f"Bearer {token}"})
    return resp.status_code


# ------------------------------------------------------------------ the report
class Report:
    def __init__(self, args: argparse.Namespace, seed: int, journal: Journal, verdict: Verdict,
                 baseline: list[float], window: tuple[float, float], settled: list[dict[str, Any]],
                 logged: dict[str, int]) -> None:
        self.args, self.seed, self.journal, self.verdict = args, seed, journal, verdict
        self.unit = statistics.median(baseline)
        self.baseline = baseline
        self.window = window
        self.settled = settled
        self.logged = logged

    def faults(self) -> dict[str, int]:
        return {t: sum(1 for f in self.journal.faults if f.target == t) for t in TARGETS}

    def operations(self) -> list[dict[str, Any]]:
        seconds = self.window[1] - self.window[0]
        by_op: dict[str, list[Request]] = {}
        for r in self.journal.requests:
            by_op.setdefault(r.op, []).append(r)
        rows = [self._row("GetItem (bare, idle, the unit)", self.baseline, seconds, len(self.baseline), 0)]
        for op, reqs in sorted(by_op.items()):
            # Served by the application: not the gate's 503 while restarting, not a dead connection.
            served = [r.end - r.start for r in reqs if 0 < r.status < 500 or r.code not in (None, "not_ready")]
            rows.append(self._row(op, served, seconds, len(reqs), sum(1 for r in reqs if r.status >= 400 or
                                                                      not r.status)))
        return rows

    def _row(self, op: str, samples: list[float], seconds: float, calls: int, failed: int) -> dict[str, Any]:
        ordered = sorted(samples) or [0.0]
        p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
        return {"operation": op, "calls": calls, "not_2xx": failed, "served": len(samples),
                "per_second": len(samples) / seconds,
                "p50": statistics.median(ordered) / self.unit, "p99": p99 / self.unit}

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {"clean": v.clean, "counts": v.counts(), "findings": [f.__dict__ for f in v.findings],
                "faults": self.faults(), "expected": v.expected, "ambiguous": v.ambiguous, "fates": v.fates,
                "checked": v.checked, "scenarios": self.journal.scenarios, "outcomes": self.journal.outcomes,
                "duration": self.window[1] - self.window[0], "users": self.args.users, "seed": self.seed,
                "getitem_ms": self.unit * 1000, "operations": self.operations(), "settling": self.settled,
                "machine": machine(), "logged": self.logged, "races": races(self.journal),
                "refusals": refusals(self.journal),
                "fault_log": [{**f.__dict__, "down_s": f.back - f.killed} for f in self.journal.faults]}

    def markdown(self) -> str:
        v, faults = self.verdict, self.faults()
        lines = [f"Load verdict: {self.args.users} users, {self.window[1] - self.window[0]:.0f} s of load "
                 f"(seed {self.seed}) on {machine()}", "",
                 "| invariant | count |", "|---|---|"]
        lines += [f"| {name} | {n} |" for name, n in v.counts().items()]
        lines += ["", f"Faults injected (kill -9, each restarted by the run): API {faults['api']}, stream pump "
                  f"(worker) {faults['worker']}, simulated agent {faults['agent']}."]
        if v.expected:
            lines.append("Expected outcomes of those faults: " + "; ".join(
                f"{why} × {n}" for why, n in sorted(v.expected.items())) + ".")
        if v.ambiguous:
            lines.append(f"Left at the at-most-once boundary (ambiguous, never sent again): {len(v.ambiguous)}.")
        lines.append("Checked: " + ", ".join(f"{k} {n}" for k, n in sorted(v.checked.items())) + ".")
        lines.append("Two-device races: " + (", ".join(f"{k}: {n}" for k, n in sorted(races(self.journal).items()))
                                              or "none") + ".")
        lines.append("Logged by the stack: " + ", ".join(f"{k} {n}" for k, n in self.logged.items()) + ".")
        lines += ["", "Per operation: every call; those the application served (not the 503 of a restarting API, "
                  "not a dead connection) give the throughput and the latencies.", "",
                  "| operation | calls | not 2xx | served per second | p50 (× GetItem) | p99 (× GetItem) |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['operation']} | {r['calls']} | {r['not_2xx']} | {r['per_second']:.2f} | {r['p50']:.1f} | "
                  f"{r['p99']:.1f} |" for r in self.operations()]
        lines.append(f"\nBare GetItem on the idle emulator in this run (the unit): {self.unit * 1000:.2f} ms.")
        for f in v.findings:
            lines.append(f"- {f.invariant}: {f.subject}: {f.detail}")
        lines.append("\nverdict: " + ("clean" if v.clean else "NOT CLEAN"))
        return "\n".join(lines)


LOGGED = {"unhandled API error": "unhandled error", "stream record retried": "stream record",
          "scheduled run failed": "scheduled function", "reconciler item failed": "reconciling session"}


def logged(workdir: Path) -> dict[str, int]:
    """Errors the stack's processes logged (a failed stream record is retried by design: informational)."""
    text = "\n".join(p.read_text(errors="replace") for p in workdir.glob("*.log"))
    return {name: text.count(needle) for name, needle in LOGGED.items()}


def refusals(journal: Journal) -> dict[str, int]:
    """Every 4xx by operation, code and message: what the users were refused, for reading, not judging."""
    out: dict[str, int] = {}
    for r in journal.requests:
        if 400 <= r.status < 500:
            key = f"{r.op}: {r.status} {r.code} ({r.message})"
            out[key] = out.get(key, 0) + 1
    return out


def races(journal: Journal) -> dict[str, int]:
    """Two-device races by how many of the two were told they won (never 2)."""
    groups: dict[str, list[AnswerOp]] = {}
    for op in journal.answers:
        if op.race:
            groups.setdefault(op.race, []).append(op)
    out: dict[str, int] = {}
    for ops in groups.values():
        won = sum(1 for op in ops if op.final is not None and op.final.status == 200)
        out[f"{won} told they won"] = out.get(f"{won} told they won", 0) + 1
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os
    return f"{os.cpu_count()} × {cpu}, Python {platform.python_version()}, {platform.system()}"


if __name__ == "__main__":
    sys.exit(main())
