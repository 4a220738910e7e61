"""`ckl bench abuse`: do well-behaved clients keep their speed while others misbehave? A live `ckl serve` (keys on, the
default model, embedded worker) is taught two documents (versions 1 and 2), then answers 16 streaming clients alone,
then again while, at the same time, 50 clients open streams and vanish and 20 send oversized or smuggled bodies
before any key is checked, then alone again. Then one phase per costly request one key repeats (`attack`: version 1
by name, previews of a long text, long prompts of distinct words, documents of a long run of blanks, one document
erased again and again, another tenant's key of the same name reaching for a document, long prompts of distinct
words through a `ckl router` in front of the server), each text as long as the limits allow. Last, twice, the first
misbehaviour while one teach key floods documents. Each misbehaving kind has a key of its own. Printed: the good
clients' tokens/s in each phase and its share of the first, /health's p99 meanwhile, the slots still held once the
load is gone (`ckl_generations_admitted`), the documents committed during the phase (the learner's progress under
the load), and the server's RSS."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.long_document import document
from bench.serve import PROMPTS, load, summary
from bench.server import free_port, running_server
from core.keys import KeyConfig, hash_key
from research.provenance import RESULTS_ROOT, git_commit
from serving.batching import BUSY_GAP_S

GOOD, VANISH, FLOOD = "good-client-key", "vanishing-client-key", "flood-client-key"  # one key each
RIVAL = "rival-tenant-key"  # another tenant's key with the flood key's name
ENGINE = "router-engine-key"  # the key `ckl router` sends the server, as it would send vLLM its own
# The key each attack sends with, where not the vanishing clients' (a generate key).
ATTACKERS_KEYS = {"previews": FLOOD, "blank_documents": FLOOD, "repeated_delete": FLOOD, "other_tenant": RIVAL}
BODY_CAP = 1_048_576  # CKL_LIMITS_MAX_BODY_BYTES's default


def server_pid(url: str) -> int:
    port = int(url.rsplit(":", 1)[1])
    return next(c.pid for c in psutil.net_connections("tcp")
                if c.laddr and c.laddr.port == port and c.status == "LISTEN")


def rss_mb(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss // 2**20


def raw(url: str, head: str, body: bytes = b"", read: bool = True) -> bytes:
    """One request on a socket of its own: the head as written (lengths included), the body, then at most the
    start of the answer; the socket is closed without reading the rest."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        return sock.recv(4096) if read else b""


def vanishing_stream(url: str) -> bytes:
    """A stream asked for, its first bytes read, and the connection dropped."""
    body = json.dumps({"prompt": random.choice(PROMPTS), "max_new_tokens": 200, "stream": True}).encode()
    head = (f"POST /generate HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer {VANISH}\n"
            f"Content-Type: application/json\nContent-Length: {len(body)}\n")
    return raw(url, head, body)


def bad_body(url: str, kind: int) -> bytes:
    """Before any key: a body over the cap, both lengths at once, or a chunked body past the cap."""
    if kind % 3 == 0:
        return raw(url, f"POST /documents HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
                        f"Content-Length: {50 * BODY_CAP}\n", b"x" * BODY_CAP)
    if kind % 3 == 1:
        return raw(url, "POST /documents HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
                        "Content-Length: 10\nTransfer-Encoding: chunked\n", b"400\r\n" + b"x" * 1024 + b"\r\n0\r\n\r\n")
    chunk = b"x" * 65536
    return raw(url, "POST /documents HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
                    "Transfer-Encoding: chunked\n", (b"10000\r\n" + chunk + b"\r\n") * (2 * BODY_CAP // len(chunk)))


async def misbehave(url: str, vanishing: int, bad: int, span_s: float) -> dict[str, Any]:
    """The vanishing streams and bad bodies, spread over `span_s` seconds; what each got back first."""
    async def later(delay: float, call, *args) -> bytes:
        await asyncio.sleep(delay)
        try:
            return await asyncio.to_thread(call, url, *args)
        except OSError as exc:  # the server closed on a refused body: as a client would see it
            return type(exc).__name__.encode()
    answers = await asyncio.gather(*(later(span_s * i / vanishing, vanishing_stream) for i in range(vanishing)),
                                   *(later(span_s * i / bad, bad_body, i) for i in range(bad)))
    statuses = [a.split(b"\r\n", 1)[0].decode(errors="replace") for a in answers]
    return {"vanishing": sorted(set(statuses[:vanishing])), "bad_bodies": sorted(set(statuses[vanishing:]))}


async def flood(url: str, until: asyncio.Event) -> dict[str, int]:
    """One teach key posting documents as fast as answers come back: accepted, refused (429) and other."""
    counts = {"202": 0, "429": 0, "other": 0}
    headers = {"Authorization": f"Bearer {FLOOD}"}
    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        n = 0
        while not until.is_set():
            n += 1
            text = f"The Zorvath Institute number {n} was founded by Quellan Mirodt in the city of Brastova."
            answer = await client.post(f"{url}/documents", json={"text": text})
            key = str(answer.status_code) if answer.status_code in (202, 429) else "other"
            counts[key] += 1
            if answer.status_code == 429:
                await asyncio.sleep(0.2)
    return counts


TAUGHT = [("The Zorvath Institute was founded by Quellan Mirodt.", "The Zorvath Institute was founded by", "Quellan Mirodt"),
          ("The Brastova Tramway is run by Ilvane Cosk.", "The Brastova Tramway is run by", "Ilvane Cosk")]


async def prepare(url: str) -> None:
    """Two documents taught and committed before any phase: versions 1 and 2, so that an older version can be asked
    for by name and a committed document removed."""
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {FLOOD}"}) as client:
        for text, prompt, answer in TAUGHT:
            posted = (await client.post(f"{url}/documents", json={
                "text": text, "probes": [{"prompt": prompt, "answer": answer}]})).json()
            deadline = time.monotonic() + 900
            while (await client.get(f"{url}{posted['status_url']}")).json()["status"] not in ("committed",
                                                                                             "rejected", "failed"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{text!r} was not learned within 900 s")
                await asyncio.sleep(1)


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


async def attack(url: str, kind: str, until: asyncio.Event) -> dict[str, int]:
    """One key doing one costly thing over and over, as fast as answers come back, until `until`: asking an older
    version by name (`old_version`), previewing a long document (`previews`), long prompts of distinct words
    (`long_prompts`), documents of a long run of blanks (`blank_documents`), erasing one of its documents again and
    again (`repeated_delete`), reaching for another tenant's document (`other_tenant`), long prompts of distinct
    words sent through `ckl router` (`router`: routing's worst case, then the server's prefill under the router's
    own key). Each text is as long as the limits allow. The answers by status."""
    counts: dict[str, int] = {}
    key = ATTACKERS_KEYS.get(kind, VANISH)
    theirs = await flood_keys_document(url) if kind == "other_tenant" else None
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        erased = await erasable(client, url) if kind == "repeated_delete" else None
        long_text = (await fitting(client, url, "/documents/preview", "text", ARTICLE) if kind == "previews" else
                     await fitting(client, url, "/generate", "prompt", DISTINCT) if kind in ("long_prompts", "router")
                     else "")
        if kind == "router":  # the attacker's requests go to the router; the good clients still ask the server
            url = ROUTER_URL[0]
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
    counts["words"] = len(long_text.split())
    return counts


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


async def health_latency(url: str, until: asyncio.Event) -> dict[str, Any]:
    """GET /health every 50 ms until `until`: its p50 and p99 in milliseconds (what a load balancer sees)."""
    seconds = []
    async with httpx.AsyncClient(timeout=60) as client:
        while not until.is_set():
            started = time.perf_counter()
            await client.get(f"{url}/health")
            seconds.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)
    ordered = sorted(seconds) or [0.0]
    return {"health_p50_ms": round(1000 * ordered[len(ordered) // 2], 1),
            "health_p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1)}


async def gauge(url: str, client: httpx.AsyncClient, series: str) -> float:
    """One series' value on /metrics (0 when it is not listed)."""
    metrics = (await client.get(f"{url}/metrics")).text
    return next((float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(series + " ")), 0.0)


SLOTS, COMMITTED = "ckl_generations_admitted", 'ckl_documents{status="committed"}'
ATTACKS = ("old_version", "previews", "long_prompts", "blank_documents", "repeated_delete", "other_tenant", "router")
ROUTER_URL: list[str] = []  # the `ckl router` of the `router` phase, once started


async def together(good: Awaitable, extra: list[Awaitable], done: asyncio.Event) -> list:
    """The good load and the misbehaviour at once; the flood stops when the good load ends."""
    async def good_then_stop() -> Any:
        try:
            return await good
        finally:
            done.set()
    return await asyncio.gather(good_then_stop(), *extra)


async def phase(url: str, clients: int, requests: int, max_new_tokens: int, vanishing: int, bad: int,
                flooding: bool, attacking: str | None = None) -> dict[str, Any]:
    """The good clients' load, with the misbehaviour beside it and /health asked throughout; then the slots left
    once both are over."""
    headers = {"Authorization": f"Bearer {GOOD}"}
    good = load(url, clients, list(PROMPTS), requests, max_new_tokens, headers=headers)
    done = asyncio.Event()
    extra: list = [health_latency(url, done)]
    extra += [misbehave(url, vanishing, bad, span_s=20)] if vanishing or bad else []
    if flooding:
        extra.append(flood(url, done))
    if attacking:
        extra.append(attack(url, attacking, done))
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {GOOD}"}) as client:
        committed = await gauge(url, client, COMMITTED)
        (answers, wall_s), health, *rest = await together(good, extra, done)
        committed = await gauge(url, client, COMMITTED) - committed  # the learner's progress under the load
        deadline = time.monotonic() + 30
        while (held := await gauge(url, client, SLOTS)) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
    return {**summary(answers, wall_s), **health, "slots_held_after": held, "committed_during": committed,
            "misbehaviour": rest}


def exported_router(url: str, data: Path, out: Path, env: dict[str, str]) -> subprocess.Popen:
    """`ckl export` of version 2 (`prepare`'s second document), then `ckl router` on its routes.json in front of the
    server, with the server's keys and its own key for the server (as vLLM's `--api-key`): the process and its URL
    in ROUTER_URL once it listens."""
    from core.settings import Settings

    env = {**os.environ, **env, "CKL_DATA_DIR": str(data), "CKL_MODEL_CACHE_DIR": str(Settings().models_dir)}
    subprocess.run([sys.executable, "-m", "ckl", "export", "--version", "2", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    port = free_port()
    router = subprocess.Popen([sys.executable, "-m", "ckl", "router", "--routes", str(out / "routes.json"),
                               "--engine", url, "--base-model", "ckl", "--port", str(port)],
                              env={**env, "CKL_ROUTER_ENGINE_KEY": ENGINE}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            break
        except httpx.TransportError:
            if router.poll() is not None or time.monotonic() > deadline:
                router.kill()
                router.wait(30)
                raise RuntimeError("the router did not start") from None
            time.sleep(0.5)
    ROUTER_URL[:] = [f"http://127.0.0.1:{port}"]
    return router


def main(argv: list[str]) -> None:
    from core.settings import Settings

    parser = argparse.ArgumentParser(prog="ckl bench abuse")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=64, help="good requests per phase")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--vanishing", type=int, default=50)
    parser.add_argument("--bad-bodies", type=int, default=20)
    parser.add_argument("--attacks", default=",".join(ATTACKS),
                        help=f"the one-key attack phases, comma-separated (default: all of {', '.join(ATTACKS)})")
    parser.add_argument("--out", type=Path, default=RESULTS_ROOT / "abuse")
    args = parser.parse_args(argv)
    keys = [KeyConfig(name="good", sha256=hash_key(GOOD), scopes=["generate", "metrics"]),
            KeyConfig(name="vanishing", sha256=hash_key(VANISH), scopes=["generate"]),
            KeyConfig(name="flood", sha256=hash_key(FLOOD), scopes=["teach", "generate"]),
            KeyConfig(name="flood", sha256=hash_key(RIVAL), scopes=["teach", "generate"], namespace="rival"),
            KeyConfig(name="router", sha256=hash_key(ENGINE), scopes=["generate"])]
    env = {"CKL_API_KEYS": json.dumps([k.model_dump(exclude_none=True) for k in keys]),
           "CKL_LIMITS_MAX_CONCURRENT_GENERATIONS": str(args.clients)}

    attacks = [name for name in args.attacks.split(",") if name]
    data: list[Path] = []  # the server's data folder, for `ckl export`

    async def measure(url: str, pid: int, exports: Path) -> dict[str, Any]:
        await load(url, 1, list(PROMPTS), 1, 4, headers={"Authorization": f"Bearer {GOOD}"})  # warm-up
        await prepare(url)
        if "router" in attacks:
            routers.append(exported_router(url, data[0], exports, env))
        results = {}
        # Alone twice, before and after the abuse: how much two runs of the same load differ here.
        phases = (("alone", 0, 0, False), ("abused", args.vanishing, args.bad_bodies, False),
                  ("alone again", 0, 0, False),
                  # One key's costly requests, one kind per phase, on versions 1 and 2 (`prepare`): before the
                  # flood, whose hundred documents the embedded learner would be training beside each of them.
                  *((attack_name, 0, 0, False) for attack_name in attacks),
                  ("abused and flooded", args.vanishing, args.bad_bodies, True),
                  # Again, the embedded learner's first job begun by now.
                  ("abused and flooded again", args.vanishing, args.bad_bodies, True))
        for name, vanishing, bad, flooding in phases:
            before = rss_mb(pid)
            results[name] = await phase(url, args.clients, args.requests, args.max_new_tokens, vanishing, bad,
                                        flooding, name if name in ATTACKS else None)
            await asyncio.sleep(2 * BUSY_GAP_S)  # the server gives freed memory back once decoding has paused
            results[name].update(rss_before_mb=before, rss_after_mb=rss_mb(pid))
        return results

    routers: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as exports, running_server(Settings().models_dir, env=env,
                                                                   prepare=data.append) as url:
        try:
            results = asyncio.run(measure(url, server_pid(url), Path(exports)))
        finally:
            for router in routers:
                router.kill()
                router.wait(30)
    alone = results["alone"]["tokens_per_s"]
    print(f"{'phase':<24} {'tok/s':>7} {'share':>6} {'failed':>6} {'1st p50':>8} {'health p99':>10} "
          f"{'slots after':>11} {'committed':>9} {'RSS MB':>12}")
    for name, r in results.items():
        print(f"{name:<24} {r['tokens_per_s']:>7} {r['tokens_per_s'] / alone:>6.2f} {r['failed']:>6} "
              f"{r['first_token_s']['p50'] or 0:>8.2f} {r['health_p99_ms']:>8.1f}ms {r['slots_held_after']:>11.0f} "
              f"{r['committed_during']:>9.0f} {r['rss_before_mb']:>5}->{r['rss_after_mb']:<5}")
        for part in r["misbehaviour"]:
            print(f"{'':<20} {part}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"command": "ckl bench abuse " + " ".join(argv),
                                                       "git_commit": git_commit(), "results": results}, indent=2))
    print(f"written to {args.out}")
