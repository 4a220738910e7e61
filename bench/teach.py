"""`ckl bench teach`: teach N documents one after another through the HTTP API (bench/facts.jsonl: one fact
about each of many invented subjects; bench/sets/: streams of several documents per subject, some replacing an
earlier fact, `replaces` naming its probe's prompt; news about well-known subjects with `neighbours`, the subject's
other prompts; pairs of facts whose second paraphrase needs both, `two_facts`; paragraphs and articles of several
`facts`; or, with --lama-passages, LAMA-ckl Wikipedia evidence passages).

Reports, for the method asked (default: the server's):
- committed / rejected / failed, and seconds from POST to a final status (p50, p95) and in the gate;
- reliability (Rel): committed facts, current at the end (not replaced), whose own probe the final version
  completes greedily through /generate; generalization (Gen): the same for a paraphrase the document never
  contained; question answering (QA): the answer within the answer to the fact's question; `answers`: every current
  fact in each form, answered each way asked (bench/answering.py); how many replaced facts still get their old
  answer;
- NF accuracy of the gate's suite after every document (GET /health/forgetting);
- locality the gate never sees: the share of general prompts (bench/general_prompts.txt), and of the facts'
  neighbour prompts, whose greedy 8-token continuation is the same at the end as at version 0, and a second NF set:
  LAMA-ckl invariant rows whose object the base model completes (the first 100 found; --lama, when the data is
  there), again at the end.
With --retrieval, every current fact is also answered with the knowledge as context and as both, by BM25 retrieval
and with its own document in context (bench/answering.py). With --no-probes the documents are sent without probes
(the server makes its own); the scores still use the benchmark's probes, and the server's auto-probes are compared
with them (how many ask for a benchmark probe's answer, how many of the set's facts some auto-probe asks for, how
many ask for the subject, documents left without one). With --before-learned, every document is posted at once and
every current fact is first asked as context and both before any is waited for: what a document answers while its
delta is still being learned. Writes results.json and teach.png (seconds and NF against
documents taught).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx

from bench.answering import FORMS, MODES, SERVICE, complete, completes, score, share, summary, unchanged_by_way
from bench.server import running_server
from core.scoring import join_probe
from core.subjects import words
from research.lama_ckl import add_data_argument, data_folder, read_invariant, read_rows
from research.provenance import RESULTS_ROOT, git_commit
from service.client import wait_for_document

FACTS = Path(__file__).with_name("facts.jsonl")
GENERAL = Path(__file__).with_name("general_prompts.txt")
LAMA_ROWS = 100
LAMA_TOKENS = 4  # LAMA-ckl objects are short


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def general_prompts(path: Path = GENERAL) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def lama_probes(data: Path, url: str, limit: int = LAMA_ROWS) -> list[dict]:
    """Invariant LAMA-ckl probes (the service's NF suite comes from another pool) the served model completes now."""
    if not data.is_dir():
        return []
    kept = []
    for row in read_invariant(data):
        probe = {"prompt": row.probe.prompt, "answer": row.probe.answer}
        if completes(url, probe, LAMA_TOKENS) and probe not in kept:
            kept.append(probe)
            if len(kept) == limit:
                break
    return kept


def lama_passages(folder: Path | None, n: int, max_chars: int = 1000) -> list[dict]:
    """`n` LAMA-ckl Wikipedia evidence passages (text nobody here wrote), spread over variant_dev.jsonl, each a
    document whose one fact is asked by its task_descriptive prompt (a cloze: no paraphrase or question)."""
    rows = [row for row in read_rows(data_folder(folder, "--lama") / "variant_dev.jsonl")
            if len(row.evidence) <= max_chars]
    picked = rows[:: max(1, len(rows) // n)][:n]
    return [{"subject": "", "text": row.evidence,
             "probe": {"prompt": row.probe.prompt, "answer": row.probe.answer}} for row in picked]


def facts_of(documents: list[dict]) -> list[dict]:
    """Every fact of every document, each with its forms (`probe`, `paraphrase`, `question`) and `document`, its
    document's index. A document of one fact gives it at the top level (bench/facts.jsonl, the older sets)."""
    facts = []
    for i, doc in enumerate(documents):
        own = doc.get("facts") or [{k: doc[k] for k in ("probe", "paraphrase", "question", "two_facts") if k in doc}]
        facts += [{**fact, "document": i} for fact in own]
    return facts


def teach(url: str, documents: list[dict], method: str | None, weighting: str | None, probes: bool,
          at_once: bool = False, meanwhile: Callable[[], None] = lambda: None) -> list[dict]:
    """Each document posted once the one before is final; `at_once`: all posted first (workers that learn side by
    side), a document's seconds then counted from the first post, and `meanwhile` run before any is waited for."""
    def post(doc: dict) -> str:
        sent = [fact["probe"] for fact in facts_of([doc])] if probes else []
        body = {"text": doc["text"], "probes": sent,
                **({"method": method} if method else {}), **({"weighting": weighting} if weighting else {})}
        r = httpx.post(f"{url}/documents", json=body, timeout=60)
        r.raise_for_status()
        return r.json()["document_id"]
    rows, first = [], time.perf_counter()
    posted = [post(doc) for doc in documents] if at_once else []
    meanwhile()
    for i, doc in enumerate(documents):
        started = first if at_once else time.perf_counter()
        record = wait_for_document(url, posted[i] if at_once else post(doc), timeout_s=3600)
        seconds = time.perf_counter() - started
        nf = httpx.get(f"{url}/health/forgetting", timeout=60).json()["not_to_forget"]["acc_now"]
        rows.append({"document": i, "status": record["status"], "seconds": round(seconds, 2),
                     "steps": (record.get("training") or {}).get("steps"),
                     "gate_s": record["timings"].get("gate_s"), "timings": record["timings"], "nf_acc_after": nf,
                     "reason": None if record["status"] == "committed" else (record["gate"] or {}).get("reason")
                     or record.get("error"), "auto_probes": record.get("auto_probes"),
                     "facts_found": record.get("facts")})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def same_answer(made: dict, hidden: dict) -> bool:
    """Whether an auto-probe asks for a hidden probe's answer (its answer may start with the hidden prompt's last
    words: "Windows Halcyon" for "...called Windows" -> "Halcyon"; a count may go on with what it counts: "530
    people" for "...employs" -> "530")."""
    answer, asked = made["answer"], hidden["answer"]
    return answer == asked or (answer.endswith(asked) and join_probe(hidden["prompt"], asked).endswith(answer)) \
        or (asked[:1].isdigit() and answer.startswith(asked + " "))


def auto_probe_quality(documents: list[dict], rows: list[dict]) -> dict:
    """How the probes the server made compare with the benchmark's hidden ones: how many ask for a hidden answer, and
    how many of the hidden facts some auto-probe asks for (coverage)."""
    made = [(doc, probe) for doc, row in zip(documents, rows) for probe in row["auto_probes"] or []]
    hidden = [(fact, row) for fact in facts_of(documents) for row in [rows[fact["document"]]]]
    return {"made": len(made), "documents_without": sum(not row["auto_probes"] for row in rows),
            "hidden_answer": share([any(same_answer(p, f[k]) for f in facts_of([d]) for k in ("probe", "paraphrase")
                                        if k in f) for d, p in made]),
            "facts_covered": share([any(same_answer(p, f["probe"]) for p in row["auto_probes"] or [])
                                    for f, row in hidden]),
            "asks_for_subject": sum(bool(words(p["answer"]) & words(d.get("subject", ""))) for d, p in made),
            "examples": [[p["prompt"], p["answer"]] for _, p in made[:6]]}


def disk_per_document(url: str) -> float | None:
    """The mean size of a committed version's delta file."""
    sizes = [row["delta_bytes"] for row in httpx.get(f"{url}/health/forgetting", timeout=60).json()["history"]
             if row["version"] > 0]
    return statistics.mean(sizes) if sizes else None


def replaced(documents: list[dict], facts: list[dict]) -> list[bool]:
    """Whether each fact is replaced by a later document (a later document's `replaces` names its probe's prompt)."""
    return [any(later.get("replaces") == fact["probe"]["prompt"] for later in documents[fact["document"] + 1:])
            for fact in facts]


def marked(documents: list[dict]) -> tuple[list[dict], list[bool]]:
    """The documents' facts, each marked current unless a later document replaces it, and which are replaced."""
    facts = facts_of(documents)
    gone = replaced(documents, facts)
    for fact, out in zip(facts, gone):
        fact["current"] = not out
    return facts, gone


def per_document(rows: list[dict], facts: list[dict], answers: list[dict]) -> None:
    """Each fact is marked committed where its document is, and each document's row gets its current facts' shares
    by weights: a subset can be scored apart."""
    for fact in facts:
        fact["committed"] = rows[fact["document"]]["status"] == "committed"
    for i, row in enumerate(rows):
        mine = [r["modes"]["weights"] for f, r in zip(facts, answers) if f["document"] == i and f["current"]]
        row.update({form: share([m[form] for m in mine if form in m]) for form in FORMS})


def before_learned(url: str, facts: list[dict], texts: list[str], modes: tuple[str, ...]) -> dict:
    """Every current fact asked as soon as every document is posted, with the knowledge as context (and both): what
    a document answers before its delta is learned. How long the answers took, and how many documents were
    committed by the time they were all given (the others were read from their text alone)."""
    started = time.perf_counter()
    answers = score(url, facts, texts, modes, asked=lambda fact: fact["current"])
    records = httpx.get(f"{url}/documents", params={"limit": 500}, timeout=60).json()["items"]
    return {"answers": summary([r for f, r in zip(facts, answers) if f["current"]], modes),
            "answered_in_s": round(time.perf_counter() - started, 1),
            "committed_by_then": sum(r["status"] == "committed" for r in records)}


def replaced_given(url: str, old: list[dict], texts: list[str], ways: tuple[str, ...]) -> int:
    """How many replaced facts some way of the service still answers with the old answer (cloze or paraphrase)."""
    answers = score(url, old, texts, ways)
    return sum(any(r["modes"][m].get("rel") or r["modes"][m].get("gen") for m in ways) for r in answers)


def run(url: str, documents: list[dict], method: str | None, weighting: str | None = None, probes: bool = True,
        lama: Path | None = None, modes: tuple[str, ...] = ("weights",), at_once: bool = False,
        early: tuple[str, ...] = ()) -> dict:
    prompts = general_prompts()
    before = [complete(url, p) for p in prompts]
    lama_set = lama_probes(lama, url) if lama else []
    neighbours = {prompt: complete(url, prompt) for doc in documents for prompt in doc.get("neighbours", [])}
    facts, gone = marked(documents)
    texts = [doc["text"] for doc in documents]
    asked_early: dict = {}
    rows = teach(url, documents, method, weighting, probes, at_once,
                 lambda: asked_early.update(before_learned(url, facts, texts, early)) if early else None)
    neighbours_after = {prompt: complete(url, prompt) for prompt in neighbours}
    answers = score(url, facts, texts, modes, asked=lambda fact: fact["current"])
    ways = tuple(mode for mode in modes if mode in SERVICE) or ("weights",)
    old_given = replaced_given(url, [f for f, out in zip(facts, gone) if out], texts, ways)
    after = [complete(url, p) for p in prompts]
    per_document(rows, facts, answers)
    current = [(f, r) for f, r in zip(facts, answers) if f["current"]]
    committed = [r for f, r in current if f["committed"]]
    seconds = [row["seconds"] for row in rows]
    gate = [row["gate_s"] for row in rows if row["gate_s"] is not None]
    nf = [row["nf_acc_after"] for row in rows]
    return {
        "documents": len(rows), "facts": len(facts), "method": method or "server default", "probes_sent": probes,
        "committed": sum(row["status"] == "committed" for row in rows),
        "current_facts": len(current), "replaced_answers_given": old_given,
        "rejected": sum(row["status"] == "rejected" for row in rows),
        "failed": sum(row["status"] == "failed" for row in rows),
        "post_to_final_s": {"p50": percentile(seconds, 0.5), "p95": percentile(seconds, 0.95)},
        "documents_per_hour": round(3600 * len(rows) / (max(seconds) if at_once else sum(seconds)), 1),
        "gate_s": {"p50": percentile(gate, 0.5), "p95": percentile(gate, 0.95)} if gate else None,
        # The committed documents' current facts, answered with the knowledge as weights.
        "reliability": summary(committed, ("weights",))["weights"]["rel"],
        "generalization": summary(committed, ("weights",))["weights"]["gen"],
        "question_answering": summary(committed, ("weights",))["weights"]["qa"],
        # Every current fact (a rejected document's too), each way of answering (bench/answering.py).
        "answers": summary([r for _, r in current], modes),
        # --before-learned: the same asked as soon as every document was posted, as context and both.
        "before_learned": asked_early or None,
        # A question that needs two taught facts (a fact's `two_facts` paraphrase, bench/sets/two-facts.jsonl).
        "two_facts": share([r["modes"]["weights"]["gen"] for f, r in current if f.get("two_facts")]),
        "nf_acc_min": min(nf) if nf else None, "nf_acc_after_each": nf,
        "general_prompts_unchanged": share([a == b for a, b in zip(before, after)]),
        "neighbours_unchanged": share([neighbours_after[p] == out for p, out in neighbours.items()]),
        "general_prompts_unchanged_by_way": unchanged_by_way(url, dict(zip(prompts, before)), ways),  # each way asked
        "neighbours_unchanged_by_way": unchanged_by_way(url, neighbours, ways),
        "neighbours_changed": [{"prompt": p, "before": out, "after": neighbours_after[p]}
                               for p, out in neighbours.items() if neighbours_after[p] != out],
        "auto_probes": None if probes else auto_probe_quality(documents, rows),
        "general_prompts_changed": [{"prompt": p, "before": b, "after": a}
                                    for p, b, a in zip(prompts, before, after) if a != b],
        "second_nf_set": {"rows": len(lama_set), "acc_after": share([completes(url, p, LAMA_TOKENS) for p in lama_set])}
        if lama_set else None,
        "final_version": httpx.get(f"{url}/versions", timeout=60).json()["current"],
        "disk_bytes_per_document": disk_per_document(url),
        "per_document": rows,
        "per_fact": [{"document": f["document"], "probe": f["probe"], "current": f["current"], **r}
                     for f, r in zip(facts, answers)],
    }


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["per_document"]
    xs = [row["document"] + 1 for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(xs, [row["seconds"] for row in rows], ".", markersize=4)
    left.set(title="seconds from POST to a final status", xlabel="documents taught", ylabel="s", ylim=(0, None))
    right.plot(xs, [row["nf_acc_after"] for row in rows], "-")
    right.axhline(0.99, color="grey", linestyle=":")
    right.set(title="NF accuracy of the served version", xlabel="documents taught", ylim=(0.9, 1.005))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mode_list(value: str) -> tuple[str, ...]:
    """--modes, refused at once without weights (not after the whole run): each document's learned facts and the
    replaced answers are read from it."""
    if "weights" not in (modes := tuple(value.split(","))):
        raise argparse.ArgumentTypeError("the modes must include weights")
    return modes


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench teach")
    parser.add_argument("-n", type=int, default=24, help="documents to teach (bench/facts.jsonl has 100, six templates)")
    parser.add_argument("--method", help="adapter, memory or routed (default: the server's, CKL_METHOD)")
    parser.add_argument("--weighting", help="train_attention, uniform or oracle (default: the server's)")
    parser.add_argument("--no-probes", action="store_true", help="send documents without probes")
    parser.add_argument("--url", help="a running server; default: start an embedded one on a fresh data folder")
    parser.add_argument("--facts", type=Path, default=FACTS, help="JSONL facts (ckl bench make-facts makes more)")
    add_data_argument(parser, "--lama", "LAMA-ckl folder for the second NF set; without one, no second set")
    parser.add_argument("--retrieval", action="store_true",
                        help="also answer every current fact the other ways: knowledge as context, both and auto, BM25 "
                             "retrieval (the top-2 documents before the prompt, version 0), and the fact's own "
                             "document before the prompt (version 0, the in-context upper bound)")
    parser.add_argument("--modes", type=mode_list, help=f"the ways to answer, comma-separated (default: weights; with --retrieval: "
                                           f"{','.join(MODES)})")
    parser.add_argument("--lama-passages", type=int, default=0,
                        help="teach this many LAMA-ckl Wikipedia evidence passages (variant_dev.jsonl, read from "
                             "--lama) instead of --facts, each asked by its task_descriptive prompt")
    parser.add_argument("--fill", type=int, default=0,
                        help="the fresh data folder first holds this many synthetic documents, committed as "
                             "`ckl bench scale --api` makes them (teaching on a large store)")
    parser.add_argument("--workers", type=int, default=0,
                        help="learn in this many `ckl worker` processes (one PyTorch thread each, a Redis queue), all "
                             "documents posted at once; 0: the server's embedded learner, one document at a time")
    parser.add_argument("--before-learned", action="store_true",
                        help="post every document at once and ask every current fact as context and both before "
                             "waiting for any (a document is read as context from the moment it is stored)")
    parser.add_argument("--out", type=Path, default=RESULTS_ROOT / "teach")
    args = parser.parse_args(argv)
    if args.lama_passages:
        facts = lama_passages(args.lama, args.lama_passages)
    else:
        facts = [json.loads(line) for line in args.facts.read_text().splitlines() if line.strip()][: args.n]
    modes = args.modes or (MODES if args.retrieval else ("weights",))
    second_nf = None if args.lama_passages else args.lama  # the passages' rows are what is taught
    started, at_once = time.time(), args.workers > 0
    early = ("context", "both") if args.before_learned else ()
    if args.url:
        summary = run(args.url, facts, args.method, args.weighting, not args.no_probes, second_nf, modes,
                      at_once or bool(early), early)
    else:
        from bench.api_scale import fill, redis_without_worker
        from core.settings import Settings

        with ExitStack() as stack:
            env = {"CKL_REDIS_URL": stack.enter_context(redis_without_worker())} if at_once else {}
            url = stack.enter_context(running_server(
                Settings().models_dir, prepare=(lambda data: fill(data, args.fill)) if args.fill else None,
                timeout_s=1800, env=env, workers=args.workers))
            summary = run(url, facts, args.method, args.weighting, not args.no_probes, second_nf, modes,
                          at_once or bool(early), early)
    summary |= {"command": "ckl bench teach " + " ".join(argv), "git_commit": git_commit(),
                "facts_file": str(args.facts), "filled": args.fill, "workers": args.workers,
                "wall_s": round(time.time() - started)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))
    plot(summary, args.out / "teach.png")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("per_document", "nf_acc_after_each")}, indent=2))
    print(f"written to {args.out}")
