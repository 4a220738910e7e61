"""Probe suites: the not-to-forget (NF) suite, the user's must-keep probes, the shipped pool, and the general
prompts whose drift from version 0 each version reports.

The NF suite is calibrated per base model: the shipped pool is scored on version 0 and the probes
it answers fully are kept. Each suite is a named JSON value (core/shared_values.py): a file in `<data_dir>/probes/`,
or a row of the database where processes share no folder.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from core.namespaces import SHARED
from core.scoring import Probe
from core.shared_values import Values

ScoreFn = Callable[[list[Probe]], list[float]]


GENERAL_TOKENS = 8  # a general prompt's continuation compared with version 0's


def shipped_pool() -> list[Probe]:
    return read_probe_file(Path(str(files("core").joinpath("data/probe_pool.tsv"))))


def general_prompts() -> list[str]:
    """The open prompts general-prompt drift is measured on (core/data/general_prompts.txt)."""
    text = Path(str(files("core").joinpath("data/general_prompts.txt"))).read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def digest(continuation: str) -> str:
    return hashlib.sha256(continuation.encode()).hexdigest()


def drifted(base: dict[str, str], changed_before: list[str], continuations: dict[str, str]) -> list[str]:
    """The prompts whose continuation differs from version 0's (`base`, hashed): those continued again by their
    new continuation, the others as in the parent (`changed_before`)."""
    return [p for p in base if (digest(continuations[p]) != base[p] if p in continuations else p in changed_before)]


def read_probe_file(path: Path) -> list[Probe]:
    """Probes from a TSV (prompt<TAB>answer), JSONL of {prompt, answer}, or LAMA-ckl rows.

    A LAMA-ckl row becomes the text of `task_descriptive` before the last occurrence of `object`.
    """
    probes = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if path.suffix == ".tsv":
            prompt, answer = line.split("\t")
            probes.append(Probe(prompt, answer))
            continue
        row = json.loads(line)
        probe = lama_probe(row) if "task_descriptive" in row else Probe(row["prompt"], row["answer"])
        if probe is not None:
            probes.append(probe)
    return probes


def lama_probe(row: dict[str, Any]) -> Probe | None:
    """A LAMA-ckl row's cloze: `task_descriptive` up to the object's last occurrence, the object as answer."""
    sentence, obj = row["task_descriptive"], row["object"]
    cut = sentence.rfind(obj)
    return Probe(sentence[:cut].rstrip(), obj) if cut > 0 else None


def to_json(probes: list[Probe]) -> list[dict[str, str]]:
    return [{"prompt": p.prompt, "answer": p.answer} for p in probes]


def from_json(rows: list[dict[str, Any]], namespace: str = SHARED) -> list[Probe]:
    """Probes as stored (a manifest's, a record's), asked in `namespace`: that of the document they belong to."""
    return [Probe(r["prompt"], r["answer"], namespace) for r in rows]


class TooManyProbes(ValueError):
    pass


class ProbeSuites:
    def __init__(self, values: Values) -> None:
        self.values = values
        self._lock = values.lock

    def nf_suite(self) -> dict[str, Any] | None:
        return self.values.read("nf_suite")

    def nf_probes(self) -> list[Probe]:
        suite = self.nf_suite()
        return from_json(suite["probes"]) if suite else []

    def calibrate(self, model_name: str, pool: list[Probe], score: ScoreFn) -> dict[str, Any]:
        """Keep the pool's probes the base model answers fully; store them as the NF suite."""
        scores = score(pool)
        kept = [p for p, s in zip(pool, scores) if s == 1.0]
        suite = {"model": model_name, "pool_size": len(pool), "probes": to_json(kept)}
        self.values.write("nf_suite", suite)
        return suite

    def ensure_nf_suite(self, model_name: str, score: ScoreFn) -> dict[str, Any]:
        with self._lock:
            suite = self.nf_suite()
            if suite is None:
                suite = self.calibrate(model_name, shipped_pool(), score)
            return suite

    def general(self) -> dict[str, str] | None:
        """A hash of version 0's continuation of each general prompt, once the learner has made them (only compared:
        no text a model wrote is kept)."""
        made = self.values.read("general")
        return made["continuations"] if made else None

    def ensure_general(self, model_name: str, continue_all: Callable[[list[str]], list[str]]) -> dict[str, str]:
        with self._lock:
            if (made := self.general()) is None:
                prompts = general_prompts()
                made = dict(zip(prompts, map(digest, continue_all(prompts))))
                self.values.write("general", {"model": model_name, "continuations": made})
            return made

    def saved_scores(self) -> dict[str, Any] | None:
        """The last committed version's probe scores, as workers/saved_scores.py wrote them."""
        return self.values.read("scores")

    def save_scores(self, saved: dict[str, Any]) -> None:
        self.values.write("scores", saved)

    def must_keep(self) -> list[Probe]:
        return from_json(self.values.read("must_keep", []))

    def add_must_keep(self, probes: list[Probe], cap: int) -> list[Probe]:
        """The must-keep list with `probes` added (once each); TooManyProbes past `cap`, and nothing written."""
        with self._lock:
            merged = self.must_keep()
            seen = set(merged)  # a set: adding n probes to m is O(n + m), not O(n * m)
            merged += [p for p in dict.fromkeys(probes) if p not in seen]
            if len(merged) > cap:
                raise TooManyProbes(f"{len(merged)} must-keep probes would be more than the cap of {cap}; "
                                    "remove some first (DELETE /probes)")
            self.values.write("must_keep", to_json(merged))
            return merged

    def remove_must_keep(self, probes: list[Probe]) -> list[Probe]:
        with self._lock:
            gone = set(probes)
            kept = [p for p in self.must_keep() if p not in gone]
            self.values.write("must_keep", to_json(kept))
            return kept
