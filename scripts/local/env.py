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
    """Set the variables in this process; AWS_ENDPOINT_URL from the caller's environment wins."""
    for key, value in env.items():
        if key == "AWS_ENDPOINT_URL" and os.environ.get(key):
            continue
        os.environ[key] = value
