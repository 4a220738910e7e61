"""Namespaces: whose knowledge answers whom. Pure functions.

A key may belong to a namespace (a tenant). A document is taught into its key's namespace, and a prompt asked with
a key is routed to the documents of the key's namespace and of the shared one, never to another tenant's. The
shared namespace holds what admin keys and keys without a namespace teach (a deployment with one tenant needs no
namespaces at all). Only a per-document method keeps a document to its namespace (core/routing/); a tenant teaches
with one alone.
"""
from __future__ import annotations

from typing import Any

SHARED = ""  # the namespace of documents every key's prompts may reach


def namespace_of(record: dict[str, Any]) -> str:
    """A record's or a manifest's namespace (those from before namespaces are shared)."""
    return record.get("namespace") or SHARED


def asked_in(namespace: str | None) -> frozenset[str]:
    """The namespaces whose documents a prompt asked with a key of `namespace` may reach."""
    return frozenset({SHARED, namespace or SHARED})


def reach(namespace: str) -> frozenset[str] | None:
    """The namespaces whose prompts a document of `namespace` can change (None: every one): a tenant's document
    moves only what its own keys are answered; a shared one, what everyone is. Its gate checks those alone."""
    return None if namespace == SHARED else asked_in(namespace)


def routed_for(namespace: str, run_reach: frozenset[str] | None) -> frozenset[str]:
    """The namespaces whose documents a probe asked in `namespace` is routed to while a document that can change
    `run_reach` (`reach`) is gated. A tenant's document changes only its tenant's answers: every probe as that
    tenant's keys are answered. A shared one changes everyone's: each probe as it is asked, a tenant's fact as that
    tenant's keys are answered, any other as keys without a namespace are."""
    return run_reach if run_reach is not None else asked_in(namespace)


def within(namespace: str, namespaces: frozenset[str] | None) -> bool:
    return namespaces is None or namespace in namespaces
