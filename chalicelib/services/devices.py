"""The caller's push devices: the deployment's VAPID public key, register, list and remove (own devices only)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..auth.tokens import Caller
from ..domain import devices as d
from ..domain.errors import NotFound
from .deps import Deps


def _configured(deps: Deps, caller: Caller) -> tuple[Any, Any]:
    caller.require_user()
    if deps.devices is None or deps.pusher is None:
        raise NotFound("this deployment sends no Web Push")
    return deps.devices, deps.pusher


def push_config(deps: Deps, caller: Caller) -> dict[str, Any]:
    _, pusher = _configured(deps, caller)
    return {"vapid_public_key": pusher.vapid().public_key}


def register(deps: Deps, caller: Caller, body: Any, *, local: bool) -> tuple[dict[str, Any], bool]:
    """Registers the caller's browser subscription; (its device view, whether it is new to the caller)."""
    store, _ = _configured(deps, caller)
    sub = d.subscription(body, local=local)
    device = d.Device(id=d.device_id(sub.endpoint), workspace_id=caller.workspace_id, user=caller.sub,
                      endpoint=sub.endpoint, p256dh=sub.p256dh, auth=sub.auth, label=sub.label,
                      created_at=deps.now())
    old = store.register(device)
    if old is None or old.user != caller.sub:
        return device_view(device), True
    return device_view(replace(device, created_at=old.created_at)), False


def list_devices(deps: Deps, caller: Caller) -> list[dict[str, Any]]:
    store, _ = _configured(deps, caller)
    return [device_view(x) for x in store.list_devices(caller.workspace_id) if x.user == caller.sub]


def delete(deps: Deps, caller: Caller, device_id: str) -> None:
    store, _ = _configured(deps, caller)
    if not store.delete_device(caller.workspace_id, device_id, user=caller.sub):
        raise NotFound("device not found")


def device_view(device: d.Device) -> dict[str, Any]:
    """What a client sees of a device: never its keys."""
    return {"device_id": device.id, "label": device.label, "endpoint_origin": _origin(device.endpoint),
            "created_at": device.created_at}


def _origin(endpoint: str) -> str:
    scheme, _, rest = endpoint.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"
