"""`ckl bench teach`: teach N single-fact documents one after another through the HTTP API.

Prints seconds from POST to a final status (p50, p95), committed vs rejected counts, reliability
(committed facts whose own probe the final version still completes greedily), generalization (the
same for a paraphrased probe), NF accuracy after each update (locality), and the gate's time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx

from bench.server import running_server
from ckl.client import wait_for_document

FACTS = Path(__file__).with_name("facts.jsonl")


def completes(url: str, probe: dict) -> bool:
    body = {"prompt": probe["prompt"], "max_new_tokens": 8}
    text = httpx.post(f"{url}/generate", json=body, timeout=600).json()["text"]
    return text.strip().startswith(probe["answer"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(url: str, facts: list[dict], method: str, weighting: str | None = None) -> dict:
    rows = []
    for i, fact in enumerate(facts):
        started = time.perf_counter()
        body = {"text": fact["text"], "probes": [fact["probe"]], "method": method,
                **({"weighting": weighting} if weighting else {})}
        r = httpx.post(f"{url}/documents", json=body, timeout=60)
        r.raise_for_status()
        record = wait_for_document(url, r.json()["document_id"])
        seconds = time.perf_counter() - started
        nf = httpx.get(f"{url}/health/forgetting", timeout=60).json()["not_to_forget"]["acc_now"]
        rows.append({"fact": i, "status": record["status"], "seconds": round(seconds, 2),
                     "steps": (record.get("training") or {}).get("steps"),
                     "gate_s": record["timings"].get("gate_s"), "nf_acc_after": nf,
                     "reason": None if record["status"] == "committed" else (record["gate"] or {}).get("reason")})
        print(json.dumps(rows[-1]), flush=True)
    committed = [(fact, row) for fact, row in zip(facts, rows) if row["status"] == "committed"]
    reliable = [completes(url, fact["probe"]) for fact, _ in committed]
    general = [completes(url, fact["paraphrase"]) for fact, _ in committed]
    seconds = [row["seconds"] for row in rows]
    gate = [row["gate_s"] for row in rows if row["gate_s"] is not None]
    return {
        "documents": len(rows),
        "committed": len(committed),
        "rejected": sum(row["status"] == "rejected" for row in rows),
        "failed": sum(row["status"] == "failed" for row in rows),
        "post_to_final_s": {"p50": percentile(seconds, 0.5), "p95": percentile(seconds, 0.95)},
        "gate_s": {"p50": percentile(gate, 0.5), "p95": percentile(gate, 0.95)} if gate else None,
        "reliability": statistics.mean(reliable) if reliable else None,
        "generalization": statistics.mean(general) if general else None,
        "nf_acc_after_each": [row["nf_acc_after"] for row in rows],
        "final_version": httpx.get(f"{url}/versions", timeout=60).json()["current"],
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench teach")
    parser.add_argument("-n", type=int, default=24, help="documents to teach (bench/facts.jsonl has 100, six templates)")
    parser.add_argument("--method", default="adapter", help="adapter or memory")
    parser.add_argument("--weighting", help="train_attention, uniform or oracle (default: the server's)")
    parser.add_argument("--url", help="a running server; default: start an embedded one on a fresh data folder")
    parser.add_argument("--facts", type=Path, default=FACTS)
    args = parser.parse_args(argv)
    facts = [json.loads(line) for line in args.facts.read_text().splitlines() if line.strip()][: args.n]
    if args.url:
        summary = run(args.url, facts, args.method, args.weighting)
    else:
        from service.settings import Settings

        with running_server(Settings().models_dir) as url:
            summary = run(url, facts, args.method, args.weighting)
    print(json.dumps(summary, indent=2))
