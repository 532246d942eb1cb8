"""scripts/package: `chalice package` for a stage, offline, merged with infra/ into one template.

Works on a copy of the project in a temp dir (the real tree is never touched): the runtime deps are copied
from this environment into the copy's `vendor/` and its requirements.txt is emptied, so Chalice has
nothing to download. Output: `<out>/template.json` (SAM) and `<out>/deployment.zip` next to it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .template import build
from .vendor import VendorError, vendor

ROOT = Path(__file__).resolve().parents[1]
DEPLOYED = ("app.py", "chalicelib")  # what Chalice ships besides vendor/
CLIENT_DIR = Path("chalicelib") / "web"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache")


def deployment_id(now: float | None = None) -> str:
    """A fresh id per package: UTC time plus the git commit when there is one (offline: no network)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        sha = "nogit"
    return f"{stamp}-{sha}"


def stage_project(source: Path, work: Path) -> list[str]:
    """Copy the deployable part of `source` into `work`, vendoring deps. Returns the vendored pins."""
    for name in DEPLOYED:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=IGNORED)
        else:
            shutil.copy2(src, work / name)
    # The web client is uploaded to its bucket (scripts/deploy-client); no function serves it.
    shutil.rmtree(work / CLIENT_DIR, ignore_errors=True)
    (work / ".chalice").mkdir()
    shutil.copy2(source / ".chalice" / "config.json", work / ".chalice" / "config.json")
    # Empty on purpose: the deps are in vendor/, so `chalice package` never calls pip.
    (work / "requirements.txt").write_text("# vendored by scripts/package (see vendor/)\n")
    if (source / "vendor").is_dir():  # a project's own vendor/ ships too, as with `chalice deploy`
        shutil.copytree(source / "vendor", work / "vendor", ignore=IGNORED)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return vendor(source / "requirements.txt", work / "vendor", version)


def _chalice_env() -> dict[str, str]:
    """A hermetic environment for `chalice package`: no AWS profile, credentials lookup, or pip index.

    Chalice creates boto3 clients just to read the region and partition. Without this, botocore walks the
    credential chain (instance metadata, SSO or assume-role profiles), which is network I/O.
    """
    drop = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not (k.startswith("CLARIFY_") and k.endswith("_STREAM_ARN"))}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    env.update(
        AWS_DEFAULT_REGION=region, AWS_REGION=region,  # the template itself uses ${AWS::Region}
        AWS_ACCESS_KEY_ID="offline-packaging", AWS_SECRET_ACCESS_KEY="offline-packaging",
        AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_EC2_METADATA_DISABLED="true",
        PIP_NO_INDEX="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def run_chalice(work: Path, out: Path, stage: str) -> dict[str, Any]:
    """`chalice package` in `work`; returns the generated SAM template (deployment.zip lands in `out`)."""
    chalice = Path(sys.executable).with_name("chalice")
    command = [str(chalice)] if chalice.exists() else [sys.executable, "-c", "from chalice.cli import main; main()"]
    subprocess.run([*command, "--project-dir", str(work), "package", "--stage", stage, str(out)],
                   env=_chalice_env(), check=True, capture_output=True, text=True)
    return dict(json.loads((out / "sam.json").read_text()))


def package(out: Path, *, stage: str = "prod", deploy_id: str | None = None, source: Path = ROOT) -> Path:
    """Write `<out>/template.json` and `<out>/deployment.zip`; returns the template path."""
    config = json.loads((source / ".chalice" / "config.json").read_text())
    with tempfile.TemporaryDirectory(prefix="clarify-package-") as tmp:
        work, raw = Path(tmp) / "project", Path(tmp) / "chalice-out"
        work.mkdir()
        pins = stage_project(source, work)
        chalice_template = run_chalice(work, raw, stage)
        template = build(chalice_template, deployment_id=deploy_id or deployment_id(),
                         app_name=config["app_name"], stage=stage)
        template.setdefault("Metadata", {})["Clarify"] = {"VendoredDependencies": pins}
        # Replace only our two files: `--out` may name a directory that holds other things.
        out.mkdir(parents=True, exist_ok=True)
        shutil.move(str(raw / "deployment.zip"), out / "deployment.zip")
    path = out / "template.json"
    path.write_text(json.dumps(template, indent=2, sort_keys=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/package", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="prod")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "package")
    parser.add_argument("--deployment-id", help="CLARIFY_DEPLOYMENT_ID to bake in (default: fresh)")
    args = parser.parse_args(argv)
    try:
        path = package(args.out, stage=args.stage, deploy_id=args.deployment_id)
    except (VendorError, ValueError) as exc:  # our own checks: the message says what to fix
        print(f"package: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"package: chalice package failed:\n{exc.stdout}{exc.stderr}", file=sys.stderr)
        return 1
    template = json.loads(path.read_text())
    print(f"wrote {path} and {path.with_name('deployment.zip')}")
    print(f"deployment id {template['Outputs']['DeploymentId']['Value']}; next: README.md, Deploying to AWS")
    return 0
