"""The emulator's identity: the user pool and web client as infra/identity.py defines them, the agent keyring
secret, and users in workspaces (also how `scripts/clarify-ops user add` adds one in AWS)."""
from __future__ import annotations

import secrets
import string
from typing import Any

from chalicelib import aws
from chalicelib.auth.agent_keys import new_keyring
from chalicelib.auth.pool import WORKSPACE_GROUP
from infra.identity import EMPTY_VAPID_SECRET, ENABLED_MFAS, POOL_NAME, client_properties, pool_properties


def create_pool(cognito: Any, name: str) -> tuple[str, str]:
    """A user pool and its web client from the template's own properties; returns (pool id, client id)."""
    props = pool_properties(name)
    mfas = props.pop(ENABLED_MFAS)
    pool_id = cognito.create_user_pool(PoolName=props.pop(POOL_NAME), **props)["UserPool"]["Id"]
    cognito.set_user_pool_mfa_config(UserPoolId=pool_id, MfaConfiguration=props["MfaConfiguration"],
                                     SoftwareTokenMfaConfiguration={"Enabled": "SOFTWARE_TOKEN_MFA" in mfas})
    client_id = cognito.create_user_pool_client(UserPoolId=pool_id, **client_properties())["UserPoolClient"]["ClientId"]
    return pool_id, client_id


def find_pool(cognito: Any, name: str) -> tuple[str, str] | None:
    for page in cognito.get_paginator("list_user_pools").paginate(MaxResults=60):
        for pool in page["UserPools"]:
            if pool["Name"] == name:
                clients = cognito.list_user_pool_clients(UserPoolId=pool["Id"], MaxResults=60)["UserPoolClients"]
                web = [c["ClientId"] for c in clients if c["ClientName"] == client_properties()["ClientName"]]
                if web:
                    return pool["Id"], web[0]
    return None


def ensure_keyring(secrets_manager: Any, name: str) -> None:
    try:
        secrets_manager.create_secret(Name=name, SecretString=new_keyring().dumps())
    except secrets_manager.exceptions.ResourceExistsException:
        pass


def ensure_vapid_secret(secrets_manager: Any, name: str) -> None:
    """Created empty, as the template creates it: the first push function makes the key (chalicelib/push/vapid.py)."""
    try:
        secrets_manager.create_secret(Name=name, SecretString=EMPTY_VAPID_SECRET)
    except secrets_manager.exceptions.ResourceExistsException:
        pass


def ensure_identity(endpoint: str, prefix: str) -> dict[str, str]:
    """The pool, its client, the keyring and the VAPID secret for the stack named by `prefix`; returns the
    environment naming them (CLARIFY_USER_POOL_ID, CLARIFY_USER_POOL_CLIENT_ID, CLARIFY_AGENT_KEYS_SECRET,
    CLARIFY_VAPID_SECRET)."""
    cognito = aws.client("cognito-idp", endpoint_url=endpoint)
    name = f"{prefix}users"
    pool_id, client_id = find_pool(cognito, name) or create_pool(cognito, name)
    keyring = f"{prefix}agent-keys"
    ensure_keyring(aws.client("secretsmanager", endpoint_url=endpoint), keyring)
    vapid = f"{prefix}vapid"
    ensure_vapid_secret(aws.client("secretsmanager", endpoint_url=endpoint), vapid)
    return {"CLARIFY_USER_POOL_ID": pool_id, "CLARIFY_USER_POOL_CLIENT_ID": client_id,
            "CLARIFY_AGENT_KEYS_SECRET": keyring, "CLARIFY_VAPID_SECRET": vapid}


def new_password() -> str:
    """Random and within the pool's password policy (12+ characters, every character class)."""
    picks = [secrets.choice(chars) for chars in (string.ascii_lowercase, string.ascii_uppercase, string.digits, "!#%+")]
    return "".join(picks) + secrets.token_urlsafe(12)


def add_user(cognito: Any, pool_id: str, email: str, workspace: str, *, password: str | None = None,
             move: bool = False) -> str:
    """Create the user (unless it exists) and put it in `workspace`'s group. With `password` the password is
    set permanently (locally, tests); without, Cognito emails a temporary one to be changed at first sign-in.
    A user already in another workspace is refused (ValueError), or with `move` taken out of it: a user belongs
    to one workspace."""
    group = WORKSPACE_GROUP + workspace
    try:
        cognito.admin_create_user(
            UserPoolId=pool_id, Username=email, DesiredDeliveryMediums=["EMAIL"],
            UserAttributes=[{"Name": "email", "Value": email}, {"Name": "email_verified", "Value": "true"}],
            **({"MessageAction": "SUPPRESS"} if password else {}))
    except cognito.exceptions.UsernameExistsException:
        pass
    if password:
        cognito.admin_set_user_password(UserPoolId=pool_id, Username=email, Password=password, Permanent=True)
    groups = [g["GroupName"] for g in cognito.admin_list_groups_for_user(UserPoolId=pool_id, Username=email)["Groups"]]
    others = [g for g in groups if g.startswith(WORKSPACE_GROUP) and g != group]
    if others and not move:
        raise ValueError(f"{email} is already in workspace {others[0][len(WORKSPACE_GROUP):]!r}")
    for other in others:
        cognito.admin_remove_user_from_group(UserPoolId=pool_id, Username=email, GroupName=other)
    try:
        cognito.create_group(UserPoolId=pool_id, GroupName=group, Description=f"Clarify workspace {workspace}")
    except cognito.exceptions.GroupExistsException:
        pass
    cognito.admin_add_user_to_group(UserPoolId=pool_id, Username=email, GroupName=group)
    return email


def sign_in(cognito: Any, client_id: str, email: str, password: str) -> dict[str, Any]:
    """The web client's own flow: USER_PASSWORD_AUTH; returns the AuthenticationResult (access, ID, refresh)."""
    result = cognito.initiate_auth(ClientId=client_id, AuthFlow="USER_PASSWORD_AUTH",
                                   AuthParameters={"USERNAME": email, "PASSWORD": password})
    return dict(result["AuthenticationResult"])
