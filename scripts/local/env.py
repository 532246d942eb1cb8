"""The local stage's environment, read from .chalice/config.json (the one place it is written down)."""
from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def local_env(**overrides: str) -> dict[str, str]:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    env = dict(config["stages"]["local"]["environment_variables"])
    env.update({k: v for k, v in overrides.items() if v is not None})
    return env


def apply(env: dict[str, str]) -> None:
    """Set the variables in this process; an emulator the caller named (AWS_ENDPOINT_URL, or LOCALSTACK_HOST
    as localstack-client reads it) wins over the configured one."""
    for key, value in env.items():
        if key == "AWS_ENDPOINT_URL" and (os.environ.get(key) or os.environ.get("LOCALSTACK_HOST")):
            continue
        os.environ[key] = value
