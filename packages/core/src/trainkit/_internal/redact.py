"""Credentials never leave the process: user info and signed query parameters are masked in any
URI trainkit prints, raises or writes."""

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
