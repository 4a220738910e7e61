"""Who may do what: API keys with scopes, presented as `Authorization: Bearer <key>`.

Scopes: `generate` (ask), `teach` (post and remove documents, read one's own), `metrics` (GET /metrics, for a
scraper), `admin` (everything: versions, probes, every document). A key may name a namespace (a tenant's: see
core/namespaces.py). Keys are configured by their SHA-256 (`ckl keys new` makes one), never stored in
clear. With no keys configured every request is allowed, and `ckl serve` then binds loopback only.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from pydantic import BaseModel, Field

from core.namespaces import asked_in

SCOPES = ("generate", "teach", "metrics", "admin")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class KeyConfig(BaseModel):
    """One configured key (CKL_API_KEYS is a JSON list of these)."""
    # Keys of one name in one namespace are one owner's (a key and its replacement); "/" joins a namespace to it.
    name: str = Field(min_length=1, max_length=64, pattern=r"^[^/]+$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    scopes: list[str] = Field(min_length=1)
    # A tenant's namespace (core/namespaces.py): the key teaches into it, and its prompts reach its documents and the
    # shared ones only. None: the shared namespace.
    namespace: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")

    def model_post_init(self, _context: object) -> None:
        if unknown := set(self.scopes) - set(SCOPES):
            raise ValueError(f"key {self.name!r}: unknown scopes {sorted(unknown)}; scopes are {', '.join(SCOPES)}")


@dataclass(frozen=True)
class Caller:
    """Who made a request: a configured key's name and scopes, or everyone when no keys are configured."""
    name: str | None
    scopes: frozenset[str]
    namespace: str | None = None  # None: the shared namespace

    def may(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    @property
    def owner(self) -> str | None:
        """Whose documents this caller teaches: its key's name, in its namespace (two tenants' keys both named
        "app" own nothing of each other's); None for everyone, when no keys are configured."""
        return self.name if self.name is None or self.namespace is None else f"{self.namespace}/{self.name}"

    def owns(self, record: dict) -> bool:
        """Whether this caller may see or remove a document: an admin, or a key of the owner that taught it."""
        return self.is_admin or record.get("owner") == self.owner

    def namespaces(self) -> frozenset[str]:
        """Those whose documents this caller's prompts reach."""
        return asked_in(self.namespace)


OPEN = Caller(None, frozenset(SCOPES))


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "ckl_" + secrets.token_urlsafe(32)


def find_caller(keys: list[KeyConfig], authorization: str | None) -> Caller | None:
    """The caller a request's Authorization header names; None when it names no configured key."""
    if not keys:
        return OPEN
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    digest = hash_key(token.strip())
    for key in keys:  # digests compared in constant time: timing tells nothing about a key's characters
        if hmac.compare_digest(digest, key.sha256):
            return Caller(key.name, frozenset(key.scopes), key.namespace)
    return None


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS


def binding_refusal(settings) -> str | None:
    """Why a server (`ckl serve`, `ckl router`) must not start as configured: open to everyone and reachable from
    other machines."""
    if settings.api_keys or settings.allow_unauthenticated or is_loopback(settings.host):
        return None
    return (f"refusing to listen on {settings.host} with no API keys: anyone who reaches the port could use the "
            "model. Configure CKL_API_KEYS (ckl keys new), bind 127.0.0.1, or set CKL_ALLOW_UNAUTHENTICATED=true")
