"""Clients find the emulator the way localstack-client does, so LocalStack on the edge port needs no code change."""
from __future__ import annotations

from urllib.parse import urlparse

import pytest

from chalicelib import aws, bootstrap
from chalicelib.store import models
from scripts.local.emulator import EmulatorThread


def test_clients__localstack_host_alone__reach_the_emulator_and_the_models_follow(
        emulator: EmulatorThread, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("LOCALSTACK_HOST", urlparse(emulator.url).netloc)

    assert aws.emulator_endpoint() == emulator.url
    for service in ("dynamodb", "events", "sqs"):
        client = aws.client(service)
        assert client.meta.endpoint_url == emulator.url
    assert "TableNames" in aws.client("dynamodb").list_tables()
    assert aws.client("events").describe_event_bus(Name="default")["Name"] == "default"
    try:
        bootstrap.configure_tables()
        assert models.SessionRecord.Meta.host == emulator.url  # type: ignore[attr-defined]
    finally:
        monkeypatch.undo()
        bootstrap.configure_tables()


def test_clients__endpoint_url_wins_over_localstack_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSTACK_HOST", "localhost:4599")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4511")
    assert aws.client("sqs").meta.endpoint_url == "http://127.0.0.1:4511"


def test_clients__no_emulator_named__aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALSTACK_HOST", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert aws.emulator_endpoint() is None
    assert aws.client("events").meta.endpoint_url == "https://events.eu-west-1.amazonaws.com"
