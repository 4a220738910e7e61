"""`ckl bench abuse`: do well-behaved clients keep their speed while others misbehave? A live `ckl serve` (keys on, the
default model, embedded worker) is taught two documents (versions 1 and 2), then answers 16 streaming clients alone,
then again while, at the same time, 50 clients open streams and vanish and 20 send oversized or smuggled bodies
before any key is checked, then alone again. Then one phase per costly request one key repeats (`attack`: version 1
by name, previews of a long text, long prompts of distinct words, documents of a long run of blanks (withdrawn after
their phase), one document erased again and again, another tenant's key of the same name reaching for a document,
long prompts of distinct words through a `ckl router` in front of the server), each text as long as the limits
allow. Last, twice, the first
misbehaviour while one teach key floods documents. Each misbehaving kind has a key of its own. Printed: the good
clients' tokens/s in each phase and its share of the quiet speed (the mean of the two quiet phases), /health's p99
meanwhile, the slots still held once the load is gone (`ckl_generations_admitted`), the documents committed during
the phase (the learner's progress under the load), and the server's RSS."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.attacks import ATTACKS, ENGINE, FLOOD, GOOD, RIVAL, TAUGHT, VANISH, attack
from bench.serve import PROMPTS, load, summary
from bench.server import exported_router, running_server
from core.keys import KeyConfig, hash_key
from research.provenance import RESULTS_ROOT, git_commit
from serving.batching import BUSY_GAP_S

BODY_CAP = 1_048_576  # CKL_LIMITS_MAX_BODY_BYTES's default


def server_pid(url: str) -> int:
    port = int(url.rsplit(":", 1)[1])
    return next(c.pid for c in psutil.net_connections("tcp")
                if c.laddr and c.laddr.port == port and c.status == "LISTEN")


def rss_mb(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss // 2**20


def cpu_s(pids: dict[str, int]) -> dict[str, float]:
    """The CPU seconds (user and system) each process has spent so far, by name: taken before and after a phase,
    which of the server, the router and the clients (this process, the attacker's among them) an attack costs, on
    the cores the decoder needs."""
    return {name: sum(psutil.Process(pid).cpu_times()[:2]) for name, pid in pids.items()}


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


async def together(good: Awaitable, extra: list[Awaitable], done: asyncio.Event) -> list:
    """The good load and the misbehaviour at once; the flood stops when the good load ends."""
    async def good_then_stop() -> Any:
        try:
            return await good
        finally:
            done.set()
    return await asyncio.gather(good_then_stop(), *extra)


async def phase(url: str, clients: int, requests: int, max_new_tokens: int, vanishing: int, bad: int,
                flooding: bool, attacking: str | None = None, router_url: str | None = None) -> dict[str, Any]:
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
        extra.append(attack(url, attacking, done, router_url))
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {GOOD}"}) as client:
        committed = await gauge(url, client, COMMITTED)
        (answers, wall_s), health, *rest = await together(good, extra, done)
        committed = await gauge(url, client, COMMITTED) - committed  # the learner's progress under the load
        deadline = time.monotonic() + 30
        while (held := await gauge(url, client, SLOTS)) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
    return {**summary(answers, wall_s), **health, "slots_held_after": held, "committed_during": committed,
            "misbehaviour": rest}


QUIET = ("alone", "alone again")  # the phases without misbehaviour: the same load, twice


def quiet_speed(results: dict[str, Any]) -> float:
    """The good clients' tokens/s without misbehaviour: the mean of the quiet phases, since two runs of the same load
    differ by a few percent here and one of them alone would move every share by as much."""
    return sum(results[name]["tokens_per_s"] for name in QUIET) / len(QUIET)


def print_table(results: dict[str, Any]) -> None:
    """Each phase's row: the good clients' speed and its share of the quiet speed, and what the attacker got."""
    alone = quiet_speed(results)
    print(f"{'phase':<24} {'tok/s':>7} {'share':>6} {'failed':>6} {'1st p50':>8} {'health p99':>10} "
          f"{'slots after':>11} {'committed':>9} {'RSS MB':>12}  CPU s")
    for name, r in results.items():
        print(f"{name:<24} {r['tokens_per_s']:>7} {r['tokens_per_s'] / alone:>6.2f} {r['failed']:>6} "
              f"{r['first_token_s']['p50'] or 0:>8.2f} {r['health_p99_ms']:>8.1f}ms {r['slots_held_after']:>11.0f} "
              f"{r['committed_during']:>9.0f} {r['rss_before_mb']:>5}->{r['rss_after_mb']:<5}  "
              + " ".join(f"{k} {v}" for k, v in r.get("cpu_s", {}).items()))
        for part in r["misbehaviour"]:
            print(f"{'':<20} {part}")


def server_env(clients: int) -> dict[str, str]:
    """The server's settings: a key for each kind of client, as many generation places as good clients."""
    keys = [KeyConfig(name="good", sha256=hash_key(GOOD), scopes=["generate", "metrics"]),
            KeyConfig(name="vanishing", sha256=hash_key(VANISH), scopes=["generate"]),
            KeyConfig(name="flood", sha256=hash_key(FLOOD), scopes=["teach", "generate"]),
            KeyConfig(name="flood", sha256=hash_key(RIVAL), scopes=["teach", "generate"], namespace="rival"),
            KeyConfig(name="router", sha256=hash_key(ENGINE), scopes=["generate"])]
    return {"CKL_API_KEYS": json.dumps([k.model_dump(exclude_none=True) for k in keys]),
            "CKL_LIMITS_MAX_CONCURRENT_GENERATIONS": str(clients)}


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
    env = server_env(args.clients)
    attacks = [name for name in args.attacks.split(",") if name]
    data: list[Path] = []  # the server's data folder, for `ckl export`

    async def measure(url: str, pid: int, exports: Path) -> dict[str, Any]:
        pids = {"server": pid, "bench": os.getpid()}  # the bench's clients, the attacker's too, share the cores
        await load(url, 1, list(PROMPTS), 1, 4, headers={"Authorization": f"Bearer {GOOD}"})  # warm-up
        await prepare(url)
        router_url = None
        if "router" in attacks:
            router, router_url = exported_router(url, data[0], 2, Settings().models_dir, exports,
                                                 {**env, "CKL_ROUTER_ENGINE_KEY": ENGINE})  # `prepare`'s version 2
            routers.append(router)
            pids["router"] = router.pid
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
            before, cpu_before = rss_mb(pid), cpu_s(pids)
            results[name] = await phase(url, args.clients, args.requests, args.max_new_tokens, vanishing, bad,
                                        flooding, name if name in ATTACKS else None, router_url)
            results[name]["cpu_s"] = {k: round(v - cpu_before[k], 1) for k, v in cpu_s(pids).items()}
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
    print_table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"command": "ckl bench abuse " + " ".join(argv),
                                                       "git_commit": git_commit(), "results": results}, indent=2))
    print(f"written to {args.out}")
