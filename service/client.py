"""What `ckl teach`, `ckl status` and `ckl generate --url` ask a running server over HTTP (benchmarks and tests too)."""
from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from core.lifecycle import FINAL


class Refused(Exception):
    """The server answered with an error; the message is its JSON body."""

    def __init__(self, body: Any) -> None:
        super().__init__(json.dumps(body, indent=2))
        self.body = body


def _headers() -> dict[str, str]:
    """The key in CKL_API_KEY, for a server that has keys configured."""
    key = os.environ.get("CKL_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def _json(response: httpx.Response, expected: int) -> dict[str, Any]:
    body = response.json()
    if response.status_code != expected:
        raise Refused(body)
    return body


def generate(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST /generate: the completion and its counts."""
    return _json(httpx.post(f"{url}/generate", json=body, headers=_headers(), timeout=600), 200)


def teach(url: str, text: str, probes: list[dict[str, str]], method: str | None = None) -> dict[str, Any]:
    """POST /documents: the accepted document (its id and status URL); method None: the server's default."""
    body = {"text": text, "probes": probes, **({"method": method} if method else {})}
    return _json(httpx.post(f"{url}/documents", json=body, headers=_headers(), timeout=60), 202)


def wait_for_document(url: str, document_id: str, show: bool = False, timeout_s: float = 3600) -> dict[str, Any]:
    """Poll the document until its status is final; with `show`, print each new status and step."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        record = httpx.get(f"{url}/documents/{document_id}", headers=_headers(), timeout=30).json()
        line = f"{record['status']} step {record['progress']['step']}/{record['progress']['steps']}"
        if show and line != last:
            print(line, flush=True)
            last = line
        if record["status"] in FINAL:
            return record
        time.sleep(0.5)
    raise TimeoutError(f"document {document_id} did not finish in {timeout_s} s")


def status(url: str) -> dict[str, Any]:
    """The current version, retention, and how many documents are in each status."""
    report = _json(httpx.get(f"{url}/health/forgetting", headers=_headers(), timeout=30), 200)  # admin scope
    docs = _json(httpx.get(f"{url}/documents", params={"limit": 500}, headers=_headers(), timeout=30), 200)
    counts: dict[str, int] = {}
    for item in docs["items"]:
        counts[item["status"]] = counts.get(item["status"], 0) + 1
    return {"current_version": report["current_version"], "not_to_forget": report["not_to_forget"],
            "learned": report["learned"], "documents": counts}
