"""Credentials never leave the process: user info and signed query parameters are masked in any
URI trainkit prints, raises or writes, and so are the values of settings known to hold secrets."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")
_SECRET_PARAM = re.compile(
    r"(?i)(?P<key>[?&](?:x-amz-[a-z-]*|signature|sig|token|access_key|secret_key|secret|password|"
    r"session_token|credential|key)=)[^&\s]*")


def redact(text: str) -> str:
    """``s3://AKIA:SECRET@host/b?X-Amz-Signature=abc`` -> ``s3://***@host/b?X-Amz-Signature=***``."""
    text = _USERINFO.sub(r"\g<scheme>***@", text)
    return _SECRET_PARAM.sub(r"\g<key>***", text)


# Settings that hold a credential (transformers' ``hub_token``, boto's ``aws_secret_access_key``,
# ...), matched whole: ``tokens_per_second`` or ``num_input_tokens_seen`` are metrics, not secrets.
SECRET_SETTINGS = frozenset({
    "access_key", "access_token", "api_key", "apikey", "auth_token", "aws_access_key_id",
    "aws_secret_access_key", "aws_session_token", "client_secret", "hf_token", "hub_token", "passwd",
    "password", "private_key", "push_to_hub_token", "secret", "secret_key", "session_token", "token",
    "wandb_api_key",
})


def is_secret_setting(name: str) -> bool:
    """True for a setting name that holds a credential: ``"hub_token"``, ``"API_KEY"``."""
    return name.lower().replace("-", "_") in SECRET_SETTINGS
