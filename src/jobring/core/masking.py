"""Secrets inside values that are shown or recorded: one masking walk for the management
API's answers and the audit log.

A secret is the value of a secret-named key (``password``, ``token``, ``secret``, ``*_token``,
``*_secret``, ``*_password``, ``*_hash``, ...) at any depth of nested mappings and lists,
and the credential part of a URL under a URL key (``url``, ``*_url``): a chat robot's URL
*is* its credential (Slack and Feishu in the path, DingTalk ``access_token`` and WeCom
``key`` in the query), so a masked URL keeps only its scheme, host, port and query names.
Masking is idempotent: a masked value masks to itself, which lets an update that sends a
masked value back keep the stored one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

MASK = "******"
_NOT_SECRET = frozenset({"must_change_password"})
_SECRET_NAMES = frozenset({"password", "passwd", "token", "secret", "api_key", "apikey", "key", "sign",
                           "signature", "credentials", "authorization"})
_SECRET_ENDINGS = ("password", "_token", "_secret", "_hash", "_key")
_QUERY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


def is_secret_key(key: str) -> bool:
    """Whether the value under ``key`` is a secret (the name says so)."""
    name = key.lower()
    if name in _NOT_SECRET:
        return False
    return name in _SECRET_NAMES or name.endswith(_SECRET_ENDINGS)


def is_url_key(key: str) -> bool:
    """Whether the value under ``key`` is a URL whose path and query may be a credential."""
    name = key.lower()
    return name == "url" or name.endswith("_url")


def mask_url(url: str) -> str:
    """``url`` with user info, path and query values masked: ``https://host[:port]/******
    ?name=******``. Anything that is not an http(s) URL with a host is masked whole."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return MASK
    host = parts.netloc.rpartition("@")[2]
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in host):
        return MASK
    out = f"{parts.scheme}://{host}"
    if parts.path not in ("", "/"):
        out += "/" + MASK
    if parts.query:
        names = []
        for pair in parts.query.split("&"):
            name, equals, _ = pair.partition("=")
            names.append(f"{name}={MASK}" if equals and _QUERY_NAME.fullmatch(name) else MASK)
        out += "?" + "&".join(names)
    return out


def masked(value: Any, *, urls: bool = True) -> Any:
    """``value`` with every secret replaced by :data:`MASK` and, when ``urls``, every URL
    under a URL key masked by :func:`mask_url`, at any depth."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            if is_secret_key(name):
                out[name] = MASK
            elif urls and is_url_key(name) and isinstance(item, str):
                out[name] = mask_url(item)
            else:
                out[name] = masked(item, urls=urls)
        return out
    if isinstance(value, list | tuple):
        return [masked(item, urls=urls) for item in value]
    return value
