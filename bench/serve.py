"""`ckl bench serve`: the server under concurrent load, beside one-request-at-a-time `transformers` generate
on the same model in the same run.

An async httpx load generator runs 1, 4 and 16 clients (--clients); each client sends the next request of a
fixed prompt mix as soon as its last one is answered, streamed (`/generate` with `stream: true`, greedy,
--max-new-tokens each). Per level: aggregate generated tokens/s (all completion tokens over the level's wall
time), time to first token (the first text event) and end-to-end latency, p50 and p95, and the aggregate's
ratio to generate's single-stream tokens/s. With --teach N, the largest level runs once more while N documents
are taught and swapped in (the prompt mix then also asks the taught facts): failed requests, the longest
pause between two streamed events (training competes for the same cores) and the longest pause a swap itself
put between two decoding steps (the server's `ckl_swap_pause_seconds_max`). With --routes N, N documents are
taught first and the largest level runs twice more: every client asking the first document's probe (one route),
and each client asking another document's (N routes). Writes results.json under --out.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import torch

from bench.server import running_server
from research.provenance import RESULTS_ROOT, git_commit

FACTS = Path(__file__).with_name("facts.jsonl")
# Short and long prompts, so sequences of different lengths share a batch.
PROMPTS = (
    "The Eiffel Tower is located in the city of",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "The three primary colors are",
    "Explain in simple words why the sky is blue during the day and red at sunset.",
    "def fibonacci(n):",
    "A list of the planets of the solar system, in order from the sun:",
    "Once upon a time",
    "The most important thing to remember when learning a new language is",
)
FINAL = ("committed", "rejected", "failed")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def spread(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}


async def ask(client: httpx.AsyncClient, url: str, prompt: str, max_new_tokens: int) -> dict[str, Any]:
    """One streamed request: seconds to the first text event and to the end, event times, tokens, version."""
    started = time.perf_counter()
    events: list[float] = []
    body = {"prompt": prompt, "max_new_tokens": max_new_tokens, "stream": True}
    try:
        async with client.stream("POST", f"{url}/generate", json=body) as response:
            if response.status_code != 200:
                return {"ok": False, "status": response.status_code}
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(time.perf_counter())
                event = json.loads(line[len("data: "):])
                if event.get("done"):
                    return {"ok": True, "first_s": events[0] - started, "total_s": events[-1] - started,
                            "events": events, "tokens": event["completion_tokens"],
                            "version": event["knowledge_version"]}
    except httpx.HTTPError as exc:
        return {"ok": False, "status": type(exc).__name__}
    return {"ok": False, "status": "no done event"}


async def load(url: str, clients: int, prompts: list[str], requests: int, max_new_tokens: int,
               until: asyncio.Event | None = None,
               headers: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], float]:
    """`clients` concurrent clients working through `requests` requests of the prompt mix (and on, while `until`
    is given and not set), sending `headers`; the answers and the wall seconds."""
    answers: list[dict[str, Any]] = []
    sent = 0

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal sent
        while sent < requests or (until is not None and not until.is_set()):
            prompt = prompts[sent % len(prompts)]
            sent += 1
            answers.append(await ask(client, url, prompt, max_new_tokens))

    started = time.perf_counter()
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits, headers=headers) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    return answers, time.perf_counter() - started


def summary(answers: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    done = [a for a in answers if a["ok"]]
    tokens = sum(a["tokens"] for a in done)
    gaps = [b - a for d in done for a, b in zip(d["events"], d["events"][1:])]
    return {"requests": len(answers), "failed": len(answers) - len(done), "tokens": tokens,
            "wall_s": round(wall_s, 2), "tokens_per_s": round(tokens / wall_s, 2),
            "first_token_s": spread([a["first_s"] for a in done]), "latency_s": spread([a["total_s"] for a in done]),
            "longest_pause_s": max(gaps, default=None), "versions": sorted({a["version"] for a in done})}


async def teach(url: str, facts: list[dict], done: asyncio.Event) -> list[dict]:
    """Post the documents one after another, each once the last is final; set `done` once the server serves the
    last version committed."""
    records = []
    async with httpx.AsyncClient(timeout=60) as client:
        for fact in facts:
            posted = await client.post(f"{url}/documents", json={"text": fact["text"], "probes": [fact["probe"]]})
            document_id = posted.json()["document_id"]
            while (record := (await client.get(f"{url}/documents/{document_id}")).json())["status"] not in FINAL:
                await asyncio.sleep(0.5)
            records.append({"status": record["status"], "version": record.get("version")})
        if committed := [r["version"] for r in records if r["status"] == "committed"]:
            while (await client.get(f"{url}/ready")).json()["knowledge_version"] != committed[-1]:
                await asyncio.sleep(0.1)
    done.set()
    return records


async def taught_level(url: str, clients: int, requests: int, max_new_tokens: int, n: int) -> dict[str, Any]:
    facts = [json.loads(line) for line in FACTS.read_text().splitlines() if line.strip()][:n]
    prompts = list(PROMPTS) + [f["probe"]["prompt"] for f in facts]
    done = asyncio.Event()
    (answers, wall_s), documents = await asyncio.gather(
        load(url, clients, prompts, requests, max_new_tokens, until=done), teach(url, facts, done))
    async with httpx.AsyncClient(timeout=60) as client:
        metrics = (await client.get(f"{url}/metrics")).text
    swap_max = next(float(line.split()[1]) for line in metrics.splitlines()
                    if line.startswith("ckl_swap_pause_seconds_max "))
    return {**summary(answers, wall_s), "documents": documents, "swap_pause_max_s": swap_max}


async def routed_levels(url: str, clients: int, requests: int, max_new_tokens: int, n: int) -> dict[str, Any]:
    """The largest level on one route and on `n` routes, once `n` documents are taught (each routes its own
    probe's prompt to its delta)."""
    facts = [json.loads(line) for line in FACTS.read_text().splitlines() if line.strip()][:n]
    documents = await teach(url, facts, asyncio.Event())
    if any(d["status"] != "committed" for d in documents):
        raise SystemExit(f"ckl bench serve --routes: not every document was committed: {documents}")
    asked = [f["probe"]["prompt"] for f in facts]
    one = await load(url, clients, asked[:1], requests, max_new_tokens)
    many = await load(url, clients, asked, requests, max_new_tokens)
    return {f"{clients} clients, one route": summary(*one), f"{clients} clients, {n} routes": summary(*many)}


def plain_generate(model_dir: Path, prompts: list[str], max_new_tokens: int) -> dict[str, Any]:
    """One request at a time with `model.generate` (greedy, up to max_new_tokens, stops at end of sequence)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    seconds, tokens = [], 0
    with torch.inference_mode():
        model.generate(**tokenizer(prompts[0], return_tensors="pt"), max_new_tokens=4, do_sample=False)  # warm-up
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt")
            started = time.perf_counter()
            out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
            seconds.append(time.perf_counter() - started)
            tokens += out.shape[1] - ids["input_ids"].shape[1]
    return {"requests": len(prompts), "tokens": tokens, "tokens_per_s": round(tokens / sum(seconds), 2),
            "latency_s": spread(seconds)}


def table(baseline: dict[str, Any], levels: dict[str, dict[str, Any]]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{1000 * value:.0f}"
    lines = ["clients | requests | failed | tokens/s | x generate | TTFT p50/p95 ms | latency p50/p95 ms",
             f"generate, 1 at a time | {baseline['requests']} | 0 | {baseline['tokens_per_s']:.1f} | 1.00 | - | "
             f"{ms(baseline['latency_s']['p50'])}/{ms(baseline['latency_s']['p95'])}"]
    for name, r in levels.items():
        lines.append(f"{name} | {r['requests']} | {r['failed']} | {r['tokens_per_s']:.1f} | {r['ratio']:.2f} | "
                     f"{ms(r['first_token_s']['p50'])}/{ms(r['first_token_s']['p95'])} | "
                     f"{ms(r['latency_s']['p50'])}/{ms(r['latency_s']['p95'])}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    from core.model.loader import default_model_path
    from core.settings import Settings

    parser = argparse.ArgumentParser(prog="ckl bench serve")
    parser.add_argument("--clients", default="1,4,16", help="concurrency levels, comma-separated")
    parser.add_argument("--requests", type=int, default=32, help="requests per level")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--teach", type=int, default=0, metavar="N",
                        help="also run the largest level while N documents are taught and swapped in")
    parser.add_argument("--routes", type=int, default=0, metavar="N",
                        help="teach N documents, then run the largest level on one route and on N routes")
    parser.add_argument("--url", help="a running server (its own settings); default: start one on a fresh data folder")
    parser.add_argument("--out", type=Path, default=RESULTS_ROOT / "serve")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.clients.split(",")]
    started = time.time()
    models_dir = Settings().models_dir
    baseline = plain_generate(default_model_path(models_dir), list(PROMPTS), args.max_new_tokens)

    async def measure(url: str) -> dict[str, dict[str, Any]]:
        await load(url, 1, list(PROMPTS), 1, 4)  # warm-up
        results = {}
        for clients in levels:
            answers, wall_s = await load(url, clients, list(PROMPTS), args.requests, args.max_new_tokens)
            results[f"{clients} clients"] = summary(answers, wall_s)
        if args.routes:
            results |= await routed_levels(url, levels[-1], args.requests, args.max_new_tokens, args.routes)
        if args.teach:
            results[f"{levels[-1]} clients, teaching {args.teach}"] = await taught_level(
                url, levels[-1], args.requests, args.max_new_tokens, args.teach)
        return results

    if args.url:
        results = asyncio.run(measure(args.url))
    else:
        env = {"CKL_LIMITS_MAX_CONCURRENT_GENERATIONS": str(max(levels))}
        with running_server(models_dir, env=env) as url:
            results = asyncio.run(measure(url))
    for r in results.values():
        r["ratio"] = r["tokens_per_s"] / baseline["tokens_per_s"]
    report = {"command": "ckl bench serve " + " ".join(argv), "git_commit": git_commit(),
              "threads": torch.get_num_threads(), "max_new_tokens": args.max_new_tokens, "prompts": list(PROMPTS),
              "generate": baseline, "levels": results, "wall_s": round(time.time() - started)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2))
    print(table(baseline, results))
    if args.teach:
        taught = results[f"{levels[-1]} clients, teaching {args.teach}"]
        print(f"while teaching: {taught['failed']} failed requests, versions answered {taught['versions']}, "
              f"longest pause between two events {taught['longest_pause_s']} s (training shares the cores), "
              f"longest pause a swap put between two decoding steps {taught['swap_pause_max_s']} s")
    print(f"written to {args.out}")
