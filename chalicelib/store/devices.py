"""Push devices and push markers (the `devices` table), in DynamoDB and in memory with the same contract.

A device is `device#<id>` in its workspace's partition; the id derives from the endpoint, so registering the
same subscription again is the same item. A push marker `push#<clarification>#<device>` is claimed with one
conditional write before a message is sent: a redelivered event finds it and sends nothing.
"""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Protocol

from ..domain.devices import Device
from ..domain.errors import ConditionFailed
from .codec import from_attrs
from .errors import guarded
from .expr import to_attr
from .models import DeviceRecord
from .records import query_all

DEVICE, MARKER = "device#", "push#"
SENDING, SENT = "sending", "sent"


class DeviceStore(Protocol):
    def register(self, device: Device) -> Device | None:
        """Create the device, or take over the one with its id (same endpoint): its keys, label and owner become
        `device`'s, its creation time stays. Returns the device as it was before (None: it is new)."""
        ...

    def list_devices(self, workspace_id: str) -> list[Device]: ...

    def delete_device(self, workspace_id: str, device_id: str, *, user: str | None = None) -> bool:
        """Remove it (only when `user` owns it, if given); False when there was none to remove."""
        ...

    def claim_push(self, workspace_id: str, clarification_id: str, device_id: str, *, now: str, until: str,
                   expires_at: int) -> bool:
        """Mark the push as being sent until `until`. False when it was sent, or is being sent by an invocation
        whose deadline has not passed."""
        ...

    def finish_push(self, workspace_id: str, clarification_id: str, device_id: str, *, sent: bool) -> None:
        """Sent: the marker stays (until its TTL). Not sent: it goes, so a redelivery may try again."""
        ...


def marker_key(clarification_id: str, device_id: str) -> str:
    return f"{MARKER}{clarification_id}#{device_id}"


def _device_item(device: Device) -> dict[str, Any]:
    return {"workspace_id": device.workspace_id, "sk": DEVICE + device.id, "device_id": device.id,
            "user": device.user, "endpoint": device.endpoint, "p256dh": device.p256dh, "auth": device.auth,
            "label": device.label, "created_at": device.created_at}


def _device(item: dict[str, Any]) -> Device:
    return Device(id=item["device_id"], workspace_id=item["workspace_id"], user=item["user"],
                  endpoint=item["endpoint"], p256dh=item["p256dh"], auth=item["auth"], label=item.get("label", ""),
                  created_at=item["created_at"])


class DynamoDevices:
    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def table(self) -> str:
        return str(DeviceRecord.Meta.table_name)

    def register(self, device: Device) -> Device | None:
        key = {"workspace_id": {"S": device.workspace_id}, "sk": {"S": DEVICE + device.id}}
        item = _device_item(device)
        changed = {k: item[k] for k in ("user", "endpoint", "p256dh", "auth", "label")}
        names = {f"#{k}": k for k in changed} | {"#c": "created_at", "#d": "device_id"}
        values = {f":{k}": to_attr(v) for k, v in changed.items()} | {
            ":c": to_attr(device.created_at), ":d": to_attr(device.id)}
        update = "SET " + ", ".join(f"#{k} = :{k}" for k in changed) + \
            ", #c = if_not_exists(#c, :c), #d = :d"
        resp = guarded(lambda: self.client.update_item(
            TableName=self.table, Key=key, UpdateExpression=update, ExpressionAttributeNames=names,
            ExpressionAttributeValues=values, ReturnValues="ALL_OLD"))
        return _device(from_attrs(resp["Attributes"])) if resp.get("Attributes") else None

    def list_devices(self, workspace_id: str) -> list[Device]:
        return query_all(self.client, lambda i: _device(from_attrs(i)), TableName=self.table, ConsistentRead=True,
                         KeyConditionExpression="workspace_id = :w AND begins_with(sk, :d)",
                         ExpressionAttributeValues={":w": {"S": workspace_id}, ":d": {"S": DEVICE}})

    def delete_device(self, workspace_id: str, device_id: str, *, user: str | None = None) -> bool:
        # exists: a missing device is reported, not silently "deleted"; owner: a user removes only their own.
        condition, values = "attribute_exists(sk)", {}
        if user is not None:
            condition, values = condition + " AND #u = :u", {":u": {"S": user}}
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": {"#u": "user"}} if user is not None else {}
        if values:
            kwargs["ExpressionAttributeValues"] = values
        try:
            guarded(lambda: self.client.delete_item(
                TableName=self.table, ConditionExpression=condition,
                Key={"workspace_id": {"S": workspace_id}, "sk": {"S": DEVICE + device_id}}, **kwargs))
            return True
        except ConditionFailed:
            return False

    def claim_push(self, workspace_id: str, clarification_id: str, device_id: str, *, now: str, until: str,
                   expires_at: int) -> bool:
        # new: nobody pushed this question to this device yet; lapsed: an invocation died while sending (its
        # deadline passed), so this one sends instead.
        new = "attribute_not_exists(sk)"
        lapsed = "(#s = :sending AND #until < :now)"
        try:
            guarded(lambda: self.client.put_item(
                TableName=self.table,
                Item={"workspace_id": {"S": workspace_id}, "sk": {"S": marker_key(clarification_id, device_id)},
                      "state": {"S": SENDING}, "until": {"S": until}, "expires_at": {"N": str(expires_at)}},
                ConditionExpression=f"{new} OR {lapsed}",
                ExpressionAttributeNames={"#s": "state", "#until": "until"},
                ExpressionAttributeValues={":sending": {"S": SENDING}, ":now": {"S": now}}))
            return True
        except ConditionFailed:
            return False

    def finish_push(self, workspace_id: str, clarification_id: str, device_id: str, *, sent: bool) -> None:
        key = {"workspace_id": {"S": workspace_id}, "sk": {"S": marker_key(clarification_id, device_id)}}
        if sent:
            guarded(lambda: self.client.update_item(
                TableName=self.table, Key=key, UpdateExpression="SET #s = :sent REMOVE #until",
                ExpressionAttributeNames={"#s": "state", "#until": "until"},
                ExpressionAttributeValues={":sent": {"S": SENT}}))
        else:
            guarded(lambda: self.client.delete_item(TableName=self.table, Key=key))


class MemoryDevices:
    """The same contract in memory, for service tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.devices: dict[tuple[str, str], Device] = {}
        self.markers: dict[tuple[str, str], tuple[str, str]] = {}  # (workspace, key) -> (state, until)

    def register(self, device: Device) -> Device | None:
        with self._lock:
            old = self.devices.get((device.workspace_id, device.id))
            self.devices[(device.workspace_id, device.id)] = \
                device if old is None else replace(device, created_at=old.created_at)
            return old

    def list_devices(self, workspace_id: str) -> list[Device]:
        with self._lock:
            return sorted((d for (w, _), d in self.devices.items() if w == workspace_id), key=lambda d: d.id)

    def delete_device(self, workspace_id: str, device_id: str, *, user: str | None = None) -> bool:
        with self._lock:
            device = self.devices.get((workspace_id, device_id))
            if device is None or (user is not None and device.user != user):
                return False
            del self.devices[(workspace_id, device_id)]
            return True

    def claim_push(self, workspace_id: str, clarification_id: str, device_id: str, *, now: str, until: str,
                   expires_at: int) -> bool:
        key = (workspace_id, marker_key(clarification_id, device_id))
        with self._lock:
            old = self.markers.get(key)
            if old is not None and not (old[0] == SENDING and old[1] < now):
                return False
            self.markers[key] = (SENDING, until)
            return True

    def finish_push(self, workspace_id: str, clarification_id: str, device_id: str, *, sent: bool) -> None:
        key = (workspace_id, marker_key(clarification_id, device_id))
        with self._lock:
            if sent:
                self.markers[key] = (SENT, "")
            else:
                self.markers.pop(key, None)
