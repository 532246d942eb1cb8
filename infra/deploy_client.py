"""scripts/deploy-client: upload the web client to the stack's bucket, each object with its Content-Type
and Cache-Control (chalicelib/hosting.py). Run after the stack deploy; nothing needs invalidating, since the
entry points are revalidated on every load and every other file has a new URL when it changes.

The versioned assets go first and the entry points last, so no one loads an index.html whose files are
not there yet; the previous versions stay, so a tab opened before the deploy keeps loading its own.
"""
from __future__ import annotations

import argparse
from typing import Any

from chalicelib import aws, hosting


def stack_bucket(cloudformation: Any, stack: str) -> str:
    """The stack's ClientBucketName output (infra/hosting.py)."""
    outputs = cloudformation.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    for output in outputs:
        if output["OutputKey"] == "ClientBucketName":
            return str(output["OutputValue"])
    raise SystemExit(f"stack {stack} has no ClientBucketName output: deploy the packaged template first")


def upload(s3: Any, bucket: str) -> list[hosting.ClientObject]:
    uploaded = hosting.objects()
    for obj in uploaded:
        s3.put_object(Bucket=bucket, Key=obj.key, Body=obj.body, ContentType=obj.content_type,
                      CacheControl=obj.cache_control)
    return uploaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Upload the web client to the stack's bucket")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", help="the CloudFormation stack (its ClientBucketName output)")
    where.add_argument("--bucket", help="the bucket itself")
    args = parser.parse_args(argv)
    bucket = args.bucket or stack_bucket(aws.client("cloudformation"), args.stack)
    uploaded = upload(aws.client("s3"), bucket)
    print(f"uploaded {len(uploaded)} files to s3://{bucket} (client version {hosting.version()})")
    return 0
