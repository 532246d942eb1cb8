"""Cold start, measured as Lambda pays it: whole processes importing the deployment package's `app`.

The package `scripts/package` builds (offline) is unpacked into a temporary directory, and a bare interpreter
(no site-packages: `-S -s -E`, so only the package's own vendored dependencies are importable, as in
/var/task) runs `import app` and `import boto3` in alternating pairs. Reported: medians of wall and CPU
time (the CPU time of the child, from wait4, is less disturbed by other work on a shared machine) and the
median of the per-pair ratios. `--importtime` prints the heaviest modules of `import app` instead.

    python -m scripts.coldstart [--pairs N] [--bytecode] [--importtime]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
        subprocess.run([sys.executable, "-S", "-m", "compileall", "-q", str(task)], check=True,
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
    proc = subprocess.Popen([sys.executable, "-S", "-s", "-E", "-c", statement], cwd=task, env=env,
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
    done = subprocess.run([sys.executable, "-S", "-s", "-E", "-X", "importtime", "-c", "import app"], cwd=task,
                          env=_env(bytecode), capture_output=True, text=True, check=True)
    per: dict[str, float] = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if m:
            name = m.group(2)
            key = name if name.startswith("chalicelib") else name.split(".")[0]
            per[key] = per.get(key, 0.0) + int(m.group(1)) / 1000
    return sorted(per.items(), key=lambda kv: -kv[1])[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--bytecode", action="store_true", help="compile the package first (ships .pyc)")
    parser.add_argument("--importtime", action="store_true", help="the heaviest modules of `import app`")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="clarify-coldstart-") as tmp:
        task = unpack(Path(tmp), bytecode=args.bytecode)
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
