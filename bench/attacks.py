"""The one-key attacks of `ckl bench abuse`: each a costly request one key repeats as fast as answers come back,
beside the good clients, and the keys each kind of client sends."""
from __future__ import annotations

import asyncio

import httpx

from bench.long_document import document
from bench.serve import PROMPTS

GOOD, VANISH, FLOOD = "good-client-key", "vanishing-client-key", "flood-client-key"  # one key each
RIVAL = "rival-tenant-key"  # another tenant's key with the flood key's name
ENGINE = "router-engine-key"  # the key `ckl router` sends the server, as it would send vLLM its own
# The key each attack sends with, where not the vanishing clients' (a generate key).
ATTACKERS_KEYS = {"previews": FLOOD, "blank_documents": FLOOD, "repeated_delete": FLOOD, "other_tenant": RIVAL}

TAUGHT = [("The Zorvath Institute was founded by Quellan Mirodt.", "The Zorvath Institute was founded by",
           "Quellan Mirodt"),
          ("The Brastova Tramway is run by Ilvane Cosk.", "The Brastova Tramway is run by", "Ilvane Cosk")]


async def fitting(client: httpx.AsyncClient, url: str, path: str, field: str, words: list[str]) -> str:
    """The longest head of `words` (halved until it fits) that `path` does not refuse as too long: an attack
    within the limits, which reaches the work it is about."""
    while len(words) > 1:
        text = " ".join(words)
        answer = await client.post(f"{url}{path}", json={field: text, **({"max_new_tokens": 1} if field == "prompt"
                                                                          else {})})
        if answer.status_code == 429:  # the key's rate (the flood before): asked again once it has passed
            await asyncio.sleep(float(answer.headers.get("retry-after", 1)))
            continue
        if answer.is_success:
            return text
        words = words[:len(words) // 2]
    return words[0]


DISTINCT = [f"word{i}" for i in range(2000)]  # distinct words: routing's worst case
ARTICLE = document(19_000, seed=0).split()  # sentences about invented people: a preview makes probes of them
# A long run of blanks inside a document within CKL_LIMITS_MAX_DOCUMENT_CHARS: what froze the time-marker pattern.
SPACES = "The Zorvath Institute is " + " " * 19_000 + "now open."


async def attack(url: str, kind: str, until: asyncio.Event, router_url: str | None = None) -> dict[str, int]:
    """One key doing one costly thing over and over, as fast as answers come back, until `until`: asking an older
    version by name (`old_version`), previewing a long document (`previews`), long prompts of distinct words
    (`long_prompts`), documents of a long run of blanks (`blank_documents`; withdrawn once the phase is over, so
    that the learner's work on them is not measured in the phases after it), erasing one of its documents again and
    again (`repeated_delete`: one the learner rejected or that was withdrawn, where there is one), reaching for
    another tenant's document (`other_tenant`), 2,000 distinct words sent through `ckl router` (`router`: routing's
    worst case; the server, asked with the router's own key, refuses so long a prompt; `router_url`: the router).
    Each text is as long as the limits allow. The answers by status."""
    counts: dict[str, int] = {}
    key = ATTACKERS_KEYS.get(kind, VANISH)
    theirs = await flood_keys_document(url) if kind == "other_tenant" else None
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        erased = await erasable(client, url) if kind == "repeated_delete" else None
        posted: list[str] = []
        long_text = (await fitting(client, url, "/documents/preview", "text", ARTICLE) if kind == "previews" else
                     await fitting(client, url, "/generate", "prompt", DISTINCT) if kind == "long_prompts" else
                     " ".join(DISTINCT) if kind == "router" else "")
        if kind == "router":  # the attacker's requests go to the router; the good clients still ask the server
            url = router_url
        while not until.is_set():
            if kind == "old_version":
                answer = await client.post(f"{url}/v1/completions", json={"model": "ckl-v1", "prompt": PROMPTS[0],
                                                                          "max_tokens": 1})
            elif kind == "previews":
                answer = await client.post(f"{url}/documents/preview", json={"text": long_text})
            elif kind == "long_prompts":
                answer = await client.post(f"{url}/generate", json={"prompt": long_text, "max_new_tokens": 1})
            elif kind == "blank_documents":
                answer = await client.post(f"{url}/documents", json={"text": SPACES})
                posted += [answer.json()["document_id"]] if answer.status_code == 202 else []
            elif kind == "other_tenant":
                answer = await other_tenants_document(client, url, theirs, counts)
            elif kind == "router":
                answer = await client.post(f"{url}/v1/completions", json={"model": "ckl", "prompt": long_text,
                                                                          "max_tokens": 1})
            else:
                answer = await client.delete(f"{url}/documents/{erased}")
            counts[str(answer.status_code)] = counts.get(str(answer.status_code), 0) + 1
            if answer.status_code == 429:
                await asyncio.sleep(0.2)
        if posted:  # once the good load is over: their learning would be measured in the phases after this one
            counts["withdrawn_after"] = await withdrawn(client, url, posted)
    counts["words"] = len(long_text.split())
    return counts


async def withdrawn(client: httpx.AsyncClient, url: str, document_ids: list[str]) -> int:
    """DELETE each of `document_ids` (again after each 429, once its Retry-After has passed): how many were
    withdrawn or erased."""
    done = 0
    for document_id in document_ids:
        while (answer := await client.delete(f"{url}/documents/{document_id}")).status_code == 429:
            await asyncio.sleep(float(answer.headers.get("retry-after", 1)))
        done += answer.status_code in (200, 202)
    return done


async def other_tenants_document(client: httpx.AsyncClient, url: str, theirs: str | None,
                                 counts: dict[str, int]) -> httpx.Response:
    """One round of a tenant's key reaching for another tenant's document (its key of the same name): list, read,
    name as knowledge, erase. Each answer that shows or touches the document is counted as `leaked`."""
    listed = await client.get(f"{url}/documents")
    read = await client.get(f"{url}/documents/{theirs}")
    named = await client.post(f"{url}/generate", json={"prompt": TAUGHT[0][1], "max_new_tokens": 1,
                                                        "knowledge": [theirs]})
    erased = await client.delete(f"{url}/documents/{theirs}")
    leaked = (listed.status_code == 200 and listed.json()["total"] > 0) or any(
        answer.status_code < 400 for answer in (read, named, erased))
    counts["leaked"] = counts.get("leaked", 0) + leaked
    return erased


async def flood_keys_document(url: str) -> str | None:
    """One of the flood key's committed documents (`prepare` teaches two), for another tenant to reach for."""
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {FLOOD}"}) as owner:
        return await erasable(owner, url, (("committed",),))


async def erasable(client: httpx.AsyncClient, url: str,
                   kinds: tuple[tuple[str, ...], ...] = (("rejected", "failed"), ("committed",))) -> str | None:
    """One of the key's documents of the first of `kinds` it has any of: by default one that no version holds
    (rejected or failed: erased at once, again and again), else one committed (its removal is queued once, then
    refused)."""
    items = (await client.get(f"{url}/documents", params={"limit": 500})).json()["items"]
    for statuses in kinds:
        if found := next((d["document_id"] for d in items if d["status"] in statuses), None):
            return found
    return None


ATTACKS = ("old_version", "previews", "long_prompts", "blank_documents", "repeated_delete", "other_tenant", "router")
