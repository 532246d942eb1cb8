"""The traffic flag: the API serves only after the reconciler succeeded for this deployment."""
from __future__ import annotations

from .deps import Deps

_ready_cache: set[str] = set()


def _key(deps: Deps) -> str:
    return f"ready#{deps.settings.deployment_id}"


def is_ready(deps: Deps) -> bool:
    """Once true for a deployment it stays true, so a warm function reads the flag only once."""
    key = _key(deps)
    if key in _ready_cache:
        return True
    if deps.store.get_meta(key) == "true":
        _ready_cache.add(key)
        return True
    return False


def mark_ready(deps: Deps) -> None:
    deps.store.set_meta(_key(deps), "true", deps.now())


def forget() -> None:
    """For tests that restart a deployment in one process."""
    _ready_cache.clear()
