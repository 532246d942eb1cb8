"""Who may call: the user pool and its web app client (users), and the agent-token keyring (agents).

The properties are written once, here: the template uses them as they are, and the local stack creates the
emulator's pool and client from the same dictionaries (scripts/local/identity.py).
"""
from __future__ import annotations

from typing import Any

USER_POOL = "UserPool"
USER_POOL_CLIENT = "UserPoolWebClient"
AGENT_KEYS = "AgentKeys"
VAPID_KEY = "VapidKey"
EMPTY_VAPID_SECRET = "{}"  # the push function makes the key on first use (chalicelib/push/vapid.py)
# CloudFormation-only properties of the pool: the API takes the name as PoolName and TOTP through
# SetUserPoolMfaConfig.
POOL_NAME, ENABLED_MFAS = "UserPoolName", "EnabledMfas"


def pool_properties(name: str) -> dict[str, Any]:
    return {
        POOL_NAME: name,
        # People sign in with their email address, case-insensitively; Cognito verifies it.
        "UsernameAttributes": ["email"],
        "UsernameConfiguration": {"CaseSensitive": False},
        "AutoVerifiedAttributes": ["email"],
        # Operators add users (scripts/clarify-ops user add): a self-registered user would have no workspace.
        "AdminCreateUserConfig": {"AllowAdminCreateUserOnly": True},
        "Policies": {"PasswordPolicy": {"MinimumLength": 12, "RequireLowercase": True, "RequireUppercase": True,
                                        "RequireNumbers": True, "RequireSymbols": True,
                                        "TemporaryPasswordValidityDays": 7}},
        # Each user may add an authenticator app; nobody is forced to.
        "MfaConfiguration": "OPTIONAL",
        ENABLED_MFAS: ["SOFTWARE_TOKEN_MFA"],
        "AccountRecoverySetting": {"RecoveryMechanisms": [{"Name": "verified_email", "Priority": 1}]},
    }


def client_properties() -> dict[str, Any]:
    """The web client's app client: public (no secret, it runs in a browser), the password flow over TLS and
    refresh tokens. Access tokens live an hour, refresh tokens 30 days (staying signed in on a phone)."""
    return {
        "ClientName": "web",
        "GenerateSecret": False,
        "ExplicitAuthFlows": ["ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"],
        "PreventUserExistenceErrors": "ENABLED",
        "EnableTokenRevocation": True,
        "AccessTokenValidity": 60,
        "IdTokenValidity": 60,
        "RefreshTokenValidity": 30,
        "TokenValidityUnits": {"AccessToken": "minutes", "IdToken": "minutes", "RefreshToken": "days"},
    }


def identity_resources(app_name: str, stage: str) -> dict[str, Any]:
    # Users are data: deleting the stack (or replacing the pool) must not delete them.
    keep = {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
    return {
        USER_POOL: {"Type": "AWS::Cognito::UserPool", **keep,
                    "Properties": {**pool_properties(f"{app_name}-{stage}-users"), "DeletionProtection": "ACTIVE"}},
        USER_POOL_CLIENT: {"Type": "AWS::Cognito::UserPoolClient",
                           "Properties": {"UserPoolId": {"Ref": USER_POOL}, **client_properties()}},
        # The keyring chalicelib/auth/agent_keys.py reads: {"current": "k1", "k1": <generated>}.
        AGENT_KEYS: {"Type": "AWS::SecretsManager::Secret", **keep, "Properties": {
            "Name": f"{app_name}-{stage}-agent-keys",
            "Description": "Agent-token signing keys (rotate: scripts/clarify-ops agent-keys rotate)",
            "GenerateSecretString": {"SecretStringTemplate": '{"current": "k1"}', "GenerateStringKey": "k1",
                                     "PasswordLength": 64, "ExcludePunctuation": True}}},
        # The Web Push (VAPID) key: CloudFormation cannot make a P-256 key, so the secret starts empty and the
        # first function that needs it makes and stores one. Retained: a new key would orphan every subscription.
        VAPID_KEY: {"Type": "AWS::SecretsManager::Secret", **keep, "Properties": {
            "Name": f"{app_name}-{stage}-vapid-key",
            "Description": "Web Push VAPID private key (made on first use; replacing it unsubscribes every device)",
            "SecretString": EMPTY_VAPID_SECRET}},
    }


def identity_environment() -> dict[str, Any]:
    return {"CLARIFY_USER_POOL_ID": {"Ref": USER_POOL},
            "CLARIFY_USER_POOL_CLIENT_ID": {"Ref": USER_POOL_CLIENT},
            "CLARIFY_AGENT_KEYS_SECRET": {"Ref": AGENT_KEYS},
            "CLARIFY_VAPID_SECRET": {"Ref": VAPID_KEY}}


def agent_keys_statement() -> dict[str, Any]:
    return {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": {"Ref": AGENT_KEYS}}


def vapid_key_statement() -> dict[str, Any]:
    """Read the key, and store the first one (PutSecretValue with the fixed token: it never overwrites a key)."""
    return {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"],
            "Resource": {"Ref": VAPID_KEY}}


def identity_outputs() -> dict[str, Any]:
    return {
        "UserPoolId": {"Description": "Add users: scripts/clarify-ops user add EMAIL --workspace W",
                       "Value": {"Ref": USER_POOL}},
        "UserPoolClientId": {"Description": "The web client's app client", "Value": {"Ref": USER_POOL_CLIENT}},
        "AgentKeysSecret": {"Description": "Agent-token keyring", "Value": {"Ref": AGENT_KEYS}},
    }
