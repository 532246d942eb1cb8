"""The one place boto3 clients are built.

On AWS nothing names an endpoint and clients use the default chain. Locally the endpoint comes from
localstack-client's rule (AWS_ENDPOINT_URL, else LOCALSTACK_HOST as host:port, else localhost:4566; USE_SSL
picks https), so the bundled moto server and a LocalStack on the same edge port are interchangeable.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.config import Config

DEFAULT_REGION = "us-east-1"


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def emulator_endpoint() -> str | None:
    """The emulator's URL when the environment names one (AWS_ENDPOINT_URL or LOCALSTACK_HOST), else None."""
    if not (os.environ.get("AWS_ENDPOINT_URL", "").strip() or os.environ.get("LOCALSTACK_HOST", "").strip()):
        return None
    return local_endpoint()


def local_endpoint() -> str:
    """Where localstack-client looks for the emulator (its default, localhost:4566, when nothing is set)."""
    # Imported here: on AWS the module is never needed, and the cold start stays as it was.
    from localstack_client import config

    # Every service answers on the one edge port, so any service name resolves to the same URL.
    return str(config.get_service_endpoint("dynamodb"))


def client(service: str, *, endpoint_url: str | None = None, region_name: str | None = None,
           config: Config | None = None) -> Any:
    """A boto3 client: against `endpoint_url` (a specific emulator), the environment's emulator, or AWS."""
    # Imported here, by the first client: boto3 is most of a cold start, and the authorizer never needs it.
    import boto3

    endpoint = endpoint_url or emulator_endpoint()
    if endpoint is None:
        return boto3.client(service, region_name=region_name or region(), config=config)
    # Emulators accept any credentials; LocalStack's convention is "test" when none are set.
    return boto3.client(service, region_name=region_name or region(), endpoint_url=endpoint, config=config,
                        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID") or "test",
                        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY") or "test")
