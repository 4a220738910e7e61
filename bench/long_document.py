"""`ckl bench long-document`: what one long document without probes costs the learner on the default model: the
seconds to a final state, each phase's share, and the process's peak RSS (sampled every 0.5 s). The document is
generated ("<name> <relation> <object>." about invented people, any seed), so the run repeats anywhere."""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from pathlib import Path

FIRST = ("Aldren Brask Corvin Delma Evrot Faskel Gorvin Halder Istrel Jorvath Kelmar Lortis Morvel Nastor Orvik "
         "Peltra").split()
RELATIONS = [("was born in the town of", "Veltmar Ostrava Brelin Kastow Dunmere".split()),
             ("works as a", "carpenter surgeon pilot baker chemist".split()),
             ("is married to", FIRST),
             ("owns a company called", "Trelvox Marnix Quillon Zevra Borkel".split())]


def document(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < chars:
        relation, objects = rng.choice(RELATIONS)
        sentences.append(f"{rng.choice(FIRST)} {rng.choice(FIRST)}son {relation} {rng.choice(objects)}.")
    return " ".join(sentences)[:chars].rsplit(".", 1)[0] + "."


def rss_mb() -> int:
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) // 1024


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench long-document")
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, help="a fresh folder by default")
    args = parser.parse_args(argv)

    import methods  # noqa: F401  (registers every method folder)
    from core.settings import Settings
    from workers.learner import Learner

    data = args.data_dir or Path(tempfile.mkdtemp(prefix="ckl-long-"))
    settings = Settings(data_dir=data)
    learner = Learner(settings)
    text = document(args.chars, args.seed)
    documents = learner.documents
    record, _ = documents.create({"text": text, "probes": [], "method": settings.method,
                                  "weighting": settings.training.weighting, "owner": None}, None)
    loaded_mb, peak, by_phase = rss_mb(), [0], {}

    def sample() -> None:  # the peak, and the peak in each phase the record shows (status, training step)
        while True:
            now, current = rss_mb(), documents.get(record["document_id"])
            phase = current["status"] + (" (steps running)" if (current.get("progress") or {}).get("step") else "")
            peak[0], by_phase[phase] = max(peak[0], now), max(by_phase.get(phase, 0), now)
            time.sleep(0.5)
    threading.Thread(target=sample, daemon=True).start()
    started = time.perf_counter()
    status = learner.learn(record["document_id"])
    done = learner.documents.get(record["document_id"])
    print(json.dumps({"chars": len(text), "status": str(status), "seconds": round(time.perf_counter() - started, 1),
                      "rss_loaded_mb": loaded_mb, "rss_peak_mb": max(peak[0], rss_mb()),
                      "rss_peak_by_phase_mb": by_phase,
                      "timings": done["timings"],
                      "training": (done.get("training") or {}) | {"losses": None},
                      "auto_probes": done.get("auto_probes"), "gate": (done.get("gate") or {}).get("reason")},
                     indent=1))
