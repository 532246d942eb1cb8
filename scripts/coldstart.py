"""Cold start, measured as Lambda pays it: whole processes importing the deployment package's `app`.

The package `scripts/package` builds (offline) is unpacked into a temporary directory, and a bare interpreter
(no site-packages: `-S -s -E`, so only the package's own vendored dependencies are importable, as in
/var/task) runs `import app` and `import boto3` in alternating pairs. Reported: medians of wall and CPU
time (the CPU time of the child, from wait4, is less disturbed by other work on a shared machine) and the
median of the per-pair ratios. `--importtime` prints the heaviest modules of `import app` instead.

`--first-request` measures what a user pays instead: a fresh interpreter imports the app and answers its first
authenticated request (GET /api/v1/tasks/{id}, an API Gateway event with the authorizer's context, as the
API function receives it: the readiness flag and the task, two GetItems against the emulator), with Powertools
(as shipped, the Tracer on as under Active tracing) and without it (the same package with the hand-written
logging/EMF module Clarify had before, and no Powertools or X-Ray SDK in it), each as a ratio to a bare boto3
function doing the same two reads.

    python -m scripts.coldstart [--pairs N] [--bytecode] [--python PATH] [--importtime | --first-request]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The interpreter the measured processes run (`--python`: another runtime version; the package is pure Python).
PYTHON = [sys.executable]
# What the API function's first request imports beyond `import app` (chalicelib.bootstrap.build).
FIRST_REQUEST = ("chalicelib.store.dynamo", "chalicelib.store.feed_index", "chalicelib.bus.eventbridge",
                 "chalicelib.agentctl.client")
DEPENDENCIES = ("boto3", "chalice.app", "jwt", "pynamodb.models")


@dataclass(frozen=True)
class Timing:
    statement: str
    wall: float  # median seconds
    cpu: float
    wall_ratio: float  # median of the per-pair ratios to the baseline
    cpu_ratio: float


def unpack(into: Path, *, bytecode: bool) -> Path:
    """Build the deployment package into `into` and unpack it; returns the unpacked root (like /var/task).

    With `bytecode`, every module is compiled once beforehand (a package that ships its .pyc); without it,
    each run compiles what it imports, as Lambda does with a package that ships none (/var/task is
    read-only, so nothing is cached between cold starts)."""
    sys.path.insert(0, str(ROOT))
    from infra.package import package

    out = into / "package"
    package(out, stage="prod", deploy_id="coldstart")
    task = into / "task"
    with zipfile.ZipFile(out / "deployment.zip") as zf:
        zf.extractall(task)
    if bytecode:
        subprocess.run([PYTHON[0], "-S", "-m", "compileall", "-q", str(task)], check=True,
                       stdout=subprocess.DEVNULL)
    return task


def _env(bytecode: bool) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_LAMBDA_FUNCTION_NAME": "clarify-prod"}
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(task: Path, statement: str, env: dict[str, str]) -> tuple[float, float]:
    started = time.perf_counter()
    # -S -s -E: no site-packages, no user site, no PYTHON* variables: only the package is importable.
    proc = subprocess.Popen([PYTHON[0], "-S", "-s", "-E", "-c", statement], cwd=task, env=env,
                            stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise RuntimeError(f"`{statement}` failed in the package (exit status {status})")
    return wall, usage.ru_utime + usage.ru_stime


def measure(task: Path, statements: list[str], *, pairs: int, bytecode: bool) -> list[Timing]:
    """Each round runs every statement once (the baseline last, the order rotating); ratios are per round."""
    env = _env(bytecode)
    for statement in statements:  # warm the file cache (and check every statement works)
        _run(task, statement, env)
    samples: dict[str, list[tuple[float, float]]] = {s: [] for s in statements}
    for i in range(pairs):
        shift = i % len(statements)
        for statement in statements[shift:] + statements[:shift]:
            samples[statement].append(_run(task, statement, env))
    base = samples[statements[-1]]
    out = []
    for statement in statements:
        runs = samples[statement]
        out.append(Timing(statement, statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs),
                          statistics.median(a[0] / b[0] for a, b in zip(runs, base, strict=True)),
                          statistics.median(a[1] / b[1] for a, b in zip(runs, base, strict=True))))
    return out


def statements() -> list[str]:
    """app, app plus the first request's imports, the dependencies alone, and the baseline last."""
    return ["import app", "import app, " + ", ".join(FIRST_REQUEST), "import " + ", ".join(DEPENDENCIES),
            "import boto3"]


def heaviest(task: Path, *, bytecode: bool, top: int = 25) -> list[tuple[str, float]]:
    """`python -X importtime -c "import app"` in the package: self time per top-level package, in ms."""
    done = subprocess.run([PYTHON[0], "-S", "-s", "-E", "-X", "importtime", "-c", "import app"], cwd=task,
                          env=_env(bytecode), capture_output=True, text=True, check=True)
    per: dict[str, float] = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if m:
            name = m.group(2)
            key = name if name.startswith("chalicelib") else name.split(".")[0]
            per[key] = per.get(key, 0.0) + int(m.group(1)) / 1000
    return sorted(per.items(), key=lambda kv: -kv[1])[:top]


# ------------------------------------------------------------------ the first request, as a user pays it
BEFORE_POWERTOOLS = "ec5e2b7"  # main before Powertools: the hand-written logging/EMF module
WITHOUT_POWERTOOLS = ("aws_lambda_powertools", "aws_xray_sdk", "wrapt")
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
APP_REQUEST = """
import json, os, types
import app
context = types.SimpleNamespace(aws_request_id="coldstart", function_name="clarify-prod")
response = app.app(json.loads(os.environ["COLDSTART_EVENT"]), context)
assert response["statusCode"] == 200, response
"""
BARE_REQUEST = """
import json, os
import boto3
client = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
for table, key in json.loads(os.environ["COLDSTART_READS"]):
    assert "Item" in client.get_item(TableName=table, Key=key, ConsistentRead=True)
"""


def without_powertools(task: Path, into: Path) -> Path:
    """The package with the module Clarify had before Powertools (no tracing) and neither library in it."""
    shutil.copytree(task, into)
    old = subprocess.run(["git", "show", f"{BEFORE_POWERTOOLS}:chalicelib/observability.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    shim = ("\n\nfrom contextlib import nullcontext as _nullcontext\n\n\n"
            "def traced(name: str) -> Any:\n    return _nullcontext()\n")
    (into / "chalicelib" / "observability.py").write_text(old + shim)
    for name in WITHOUT_POWERTOOLS:
        shutil.rmtree(into / name)
        for info in into.glob(f"{name}-*.dist-info"):
            shutil.rmtree(info)
    return into


def first_request_env(endpoint: str) -> dict[str, str]:
    """Tables, a task and the readiness flag on the emulator; returns the child's environment."""
    sys.path.insert(0, str(ROOT))
    from chalicelib import aws
    from chalicelib.auth.tokens import Caller
    from chalicelib.bootstrap import deps
    from chalicelib.domain import commands
    from chalicelib.services import readiness, tasks
    from chalicelib.store import models
    from chalicelib.store.models import MetaRecord, TaskRecord
    from chalicelib.store.tables import create_tables

    prefix, deployment = "coldstart-", "coldstart"
    settings = {"AWS_ENDPOINT_URL": endpoint, "CLARIFY_TABLE_PREFIX": prefix, "CLARIFY_DEPLOYMENT_ID": deployment,
                "CLARIFY_AUTH_SECRET": "coldstart-secret-of-at-least-32-characters",
                "CLARIFY_AGENTCTL_URL": "http://127.0.0.1:9", "CLARIFY_EVENT_BUS": f"{prefix}events",
                "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    os.environ.update(settings)
    models.configure(prefix=prefix, host=endpoint, region="us-east-1")
    create_tables(aws.client("dynamodb", endpoint_url=endpoint))
    d = deps()
    caller = Caller(sub="user-1", role="user", workspace_id="ws-coldstart", session_id=None)
    task = tasks.create_task(d, caller, commands.create_task({"title": "cold start"}))
    readiness.mark_ready(d)
    path = f"/api/v1/tasks/{task.id}"
    event = {"resource": "/api/v1/tasks/{task_id}", "path": path, "httpMethod": "GET",
             "headers": {"Authorization": "Bearer (verified by the authorizer)"},
             "multiValueHeaders": {"Authorization": ["Bearer (verified by the authorizer)"]},
             "queryStringParameters": None, "multiValueQueryStringParameters": None,
             "pathParameters": {"task_id": task.id}, "stageVariables": None, "body": None, "isBase64Encoded": False,
             "requestContext": {"resourcePath": "/api/v1/tasks/{task_id}", "httpMethod": "GET", "path": path,
                                "requestId": "coldstart-request", "stage": "api",
                                "authorizer": {"principalId": caller.sub, **caller.as_context()}}}
    reads = [[str(MetaRecord.Meta.table_name), {"key": {"S": f"ready#{deployment}"}}],
             [str(TaskRecord.Meta.table_name), {"task_id": {"S": task.id}}]]
    return {**settings, "COLDSTART_EVENT": json.dumps(event), "COLDSTART_READS": json.dumps(reads),
            "_X_AMZN_TRACE_ID": TRACE_HEADER, "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
            "LAMBDA_TASK_ROOT": "/var/task"}


def first_request(task: Path, tmp: Path, *, pairs: int, bytecode: bool) -> list[tuple[str, Timing]]:
    """(variant, timing) for the app with and without Powertools and the bare boto3 baseline (ratio 1)."""
    sys.path.insert(0, str(ROOT))
    from scripts.local.emulator import EmulatorThread

    emulator = EmulatorThread().start()
    try:
        extra = first_request_env(emulator.url)
        plain = without_powertools(task, tmp / "without-powertools")
        variants = [("app, Powertools", task, APP_REQUEST), ("app, no Powertools", plain, APP_REQUEST),
                    ("bare boto3", task, BARE_REQUEST)]
        env = {**_env(bytecode), **extra}
        for _, where, code in variants:  # warm the file cache, and check each one answers
            _run(where, code, env)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in variants}
        for i in range(pairs):
            shift = i % len(variants)
            for name, where, code in variants[shift:] + variants[:shift]:
                samples[name].append(_run(where, code, env))
    finally:
        emulator.stop()
    base = samples["bare boto3"]
    return [(name, Timing(name, statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs),
                          statistics.median(a[0] / b[0] for a, b in zip(runs, base, strict=True)),
                          statistics.median(a[1] / b[1] for a, b in zip(runs, base, strict=True))))
            for name, runs in samples.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--bytecode", action="store_true", help="compile the package first (ships .pyc)")
    parser.add_argument("--importtime", action="store_true", help="the heaviest modules of `import app`")
    parser.add_argument("--first-request", action="store_true",
                        help="import and answer the first authenticated request, with and without Powertools")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter of the measured processes (e.g. a newer Lambda runtime's version)")
    args = parser.parse_args(argv)
    PYTHON[0] = args.python
    with tempfile.TemporaryDirectory(prefix="clarify-coldstart-") as tmp:
        task = unpack(Path(tmp), bytecode=args.bytecode)
        if args.first_request:
            for name, t in first_request(task, Path(tmp), pairs=args.pairs, bytecode=args.bytecode):
                print(f"{name:20s} wall {t.wall * 1000:6.0f} ms ({t.wall_ratio:.2f}×)  "
                      f"cpu {t.cpu * 1000:6.0f} ms ({t.cpu_ratio:.2f}×)")
            return 0
        if args.importtime:
            for name, ms in heaviest(task, bytecode=args.bytecode):
                print(f"{ms:8.1f} ms  {name}")
            return 0
        for t in measure(task, statements(), pairs=args.pairs, bytecode=args.bytecode):
            print(f"{t.statement:100.100s} wall {t.wall * 1000:6.0f} ms ({t.wall_ratio:.2f}×)  "
                  f"cpu {t.cpu * 1000:6.0f} ms ({t.cpu_ratio:.2f}×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
