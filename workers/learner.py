"""Learning one document: weigh its tokens, train a candidate from the committed version, gate, commit.

Updates are strictly sequential: a candidate names the version it was trained from, and the store
refuses the commit if another version became current meanwhile; the job then trains again from the
new current version.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from filelock import FileLock

from service.documents import FINAL, DocumentStore
from service.knowledge import memory as memory_layer
from service.knowledge.probes import ProbeSuites, from_json
from service.knowledge.scoring import Probe, accuracy, score_probes
from service.knowledge.state import learned_manifests, resolve
from service.knowledge.versions import ParentMoved, VersionStore
from service.model.loader import LoadedModel, load_model
from service.settings import Settings
from workers import contexts, gate, weighting
from workers.attention.phi import TrainAttention, packaged_checkpoint
from workers.methods import REGISTRY, UpdateMethod
from workers.methods.base import Example
from workers.methods.memory import BACKGROUND_SOURCE, Background, MemoryMethod, background_corpus

log = logging.getLogger(__name__)

MAX_PARENT_RETRIES = 3
TOP_WEIGHTED = 12


class Learner:
    def __init__(self, settings: Settings, loaded: LoadedModel | None = None,
                 publish: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        loaded = loaded or load_model(settings)
        self.tokenizer = loaded.tokenizer
        self.model_name = loaded.name
        # One method instance for now; methods that wrap the same base model differently get their own load.
        self.methods: dict[str, UpdateMethod] = {"adapter": REGISTRY["adapter"](loaded.model, loaded.tokenizer, settings)}
        root = settings.data_dir
        self.documents = DocumentStore(root)
        self.versions = VersionStore(root / "versions")
        self.suites = ProbeSuites(root / "probes")
        self.publish = publish or (lambda version: None)
        self._train_attention: TrainAttention | None = None

    # -- the job ---------------------------------------------------------------------------------
    def learn(self, document_id: str) -> str:
        """Run the job for one document; returns its final status."""
        record = self.documents.get(document_id)
        if record["status"] in FINAL:
            return record["status"]
        record = self.documents.update(document_id, status="training", attempts=record["attempts"] + 1, error=None)
        try:
            for _ in range(MAX_PARENT_RETRIES):
                try:
                    if record.get("removes"):
                        return self._remove_from(self.versions.current(), record)
                    return self._learn_from(self.versions.current(), record)
                except ParentMoved as moved:
                    log.warning("document %s: %s; training again", document_id, moved)
            raise RuntimeError(f"the current version kept moving during {MAX_PARENT_RETRIES} attempts")
        except Exception as exc:
            final = record["attempts"] > self.settings.job_retries
            self.documents.update(document_id, status="failed" if final else "queued",
                                  error=f"{type(exc).__name__}: {exc}")
            raise

    def _learn_from(self, parent: int, record: dict[str, Any]) -> str:
        doc_id = record["document_id"]
        timings: dict[str, float] = {}
        method = self._method(record["method"])
        self._ensure_nf_suite(method)
        self._load_state(parent)
        own = from_json(record["probes"])
        suites = self._suites(parent, own)

        clock = time.perf_counter()
        before = self._score(method, suites)
        how = self._weighting(record.get("weighting") or self.settings.weighting)
        examples, top_tokens = self._examples(record["text"], own, how, method.sentence_contexts)
        budget = self._budget(examples, bool(own))
        self.documents.update(doc_id, status="training", progress={"step": 0, "steps": budget}, weighting_used=how,
                              top_weighted_tokens=top_tokens, scores={"before": before.summary()})
        timings["score_before_s"] = time.perf_counter() - clock

        clock = time.perf_counter()
        report = method.train(
            examples, budget,
            probes_pass=lambda: bool(own) and all(s == 1.0 for s in score_probes(method.model, self.tokenizer, own)),
            progress=lambda step, steps: self.documents.update(doc_id, progress={"step": step, "steps": steps}),
        )
        timings["train_s"] = time.perf_counter() - clock

        self.documents.update(doc_id, status="evaluating")
        clock = time.perf_counter()
        after = self._score(method, suites)
        decision = gate.decide(before, after, nf_version_0=1.0, nf_tolerance=self.settings.nf_tolerance,
                               learned_tolerance=self.settings.learned_tolerance,
                               require_own_probes=self.settings.require_own_probes)
        timings["gate_s"] = time.perf_counter() - clock
        scores = {"before": before.summary(), "after": after.summary(),
                  "own_before": before.own, "own_after": after.own}
        training = {"steps": report.steps, "stopped_early": report.stopped_early, "losses": report.losses}
        if not decision.accepted:
            self.documents.update(doc_id, status="rejected", gate=decision.to_json(), scores=scores,
                                  training=training, timings=_rounded(timings))
            return "rejected"

        clock = time.perf_counter()
        # In the new version, the document's own probes belong to the learned suite.
        metrics = {**after.summary(), "learned_acc": accuracy(after.learned + after.own)}
        manifest = {"documents": [doc_id], "probes": record["probes"], "method": method.name,
                    "metrics": metrics, "gate": decision.to_json(), "training": training,
                    **method.manifest_fields()}
        version = self.versions.commit(parent, method.delta(), manifest)
        timings["commit_s"] = time.perf_counter() - clock
        self.documents.update(doc_id, status="committed", version=version, gate=decision.to_json(), scores=scores,
                              training=training, timings=_rounded(timings))
        self.publish(version)
        return "committed"

    def _remove_from(self, parent: int, record: dict[str, Any]) -> str:
        """A new version without one memory document's rows: they go back to their values before it, and
        if a later document wrote some of them too, the later memory documents are trained again on top."""
        doc_id, target = record["document_id"], self.documents.get(record["removes"])
        lineage = self.versions.lineage(parent)
        position = next((i for i, m in enumerate(lineage) if m["version"] == target["version"]), None)
        if position is None:
            raise ValueError(f"version {target['version']} of document {target['document_id']} is not in the "
                             f"lineage of the current version {parent}")
        method = self._method("memory")
        self._ensure_nf_suite(method)
        suites = {**self._suites(parent, []),
                  "learned": [p for m in learned_manifests(self.versions, parent)
                              if target["document_id"] not in m["documents"] for p in from_json(m["probes"])]}
        self._load_state(parent)
        before = self._score(method, suites)
        removed_rows = self.versions.load_delta(target["version"])["rows"]
        later = [m for m in lineage[position + 1 :] if m["method"] == "memory"]
        later_rows = {int(r) for m in later for r in self.versions.load_delta(m["version"])["rows"]}
        replay = bool(later_rows & set(removed_rows.tolist()))
        earlier = resolve(self.versions, lineage[position]["parent"] or 0)
        if replay:  # train the later memory documents again, in order, from the state before the removed one
            method.load(earlier.memory)
            for manifest in later:
                for later_id in manifest["documents"]:
                    later_record = self.documents.get(later_id)
                    own = from_json(later_record["probes"])
                    examples, _ = self._examples(later_record["text"], own, self._weighting(
                        later_record.get("weighting") or self.settings.weighting), method.sentence_contexts)
                    method.train(examples, self._budget(examples, bool(own)), probes_pass=lambda own=own: bool(own) and
                                 all(s == 1.0 for s in score_probes(method.model, self.tokenizer, own)))
        else:
            before_values = dict(zip(earlier.memory_rows.tolist(), earlier.memory_values)) if earlier.memory else {}
            with torch.no_grad():
                for row in removed_rows.tolist():
                    method.memory.values[row] = before_values.get(row, torch.zeros(()))
        method.rows_touched |= set(removed_rows.tolist()) | (later_rows if replay else set())
        after = self._score(method, suites)
        decision = gate.decide(before, after, nf_version_0=1.0, nf_tolerance=self.settings.nf_tolerance,
                               learned_tolerance=self.settings.learned_tolerance, require_own_probes=False)
        scores = {"before": before.summary(), "after": after.summary()}
        if not decision.accepted:
            self.documents.update(doc_id, status="rejected", gate=decision.to_json(), scores=scores)
            return "rejected"
        manifest = {"documents": [doc_id], "removes": target["document_id"], "replayed": replay, "probes": [],
                    "method": "memory", "metrics": {**after.summary(), "learned_acc": accuracy(after.learned)},
                    "gate": decision.to_json(), **method.manifest_fields()}
        version = self.versions.commit(parent, method.delta(), manifest)
        self.documents.update(target["document_id"], removed_in_version=version)  # first: no second removal
        self.documents.update(doc_id, status="committed", version=version, gate=decision.to_json(), scores=scores,
                              replayed=replay)
        self.publish(version)
        return "committed"

    # -- pieces ----------------------------------------------------------------------------------
    def _method(self, name: str) -> UpdateMethod:
        if name == "memory" and name not in self.methods:
            self.methods[name] = self._build_memory()
        return self.methods[name]

    def _build_memory(self) -> MemoryMethod:
        """The memory method on the adapter's model; its version-0 state (keys, background statistics) is built once
        per data folder from the background corpus and stored under <data>/memory."""
        s, folder = self.settings, self.settings.data_dir / "memory"
        folder.mkdir(parents=True, exist_ok=True)
        model = self.methods["adapter"].model
        with FileLock(str(folder / ".lock")):
            base = memory_layer.load_base(folder)
            method = MemoryMethod(model, self.tokenizer, s, config=base[0] if base else None)
            if base is None:
                method.fit_background(self._background_documents())
                tensors, counts = method.background.stored()
                memory_layer.save_base(folder, method.memory, tensors, {**counts, "source": BACKGROUND_SOURCE})
            else:
                _, tensors, meta = base
                memory_layer.set_keys(method.memory, tensors)
                background = Background.from_stored(tensors, meta)
                if background is None:  # stored before reads were counted: count them with the stored keys
                    method.count_background(self._background_documents())
                else:
                    method.background = background
        return method

    def _background_documents(self) -> list[list[int]]:
        return [self.tokenizer(text)["input_ids"] for text in background_corpus()]

    def _load_state(self, parent: int) -> None:
        """Every method's state as of `parent`: the adapter, and the memory rows when a memory exists."""
        state = resolve(self.versions, parent)
        self.methods["adapter"].load(state.adapter)
        if state.memory_rows is not None:
            self._method("memory")
        if "memory" in self.methods:
            self.methods["memory"].load(state.memory)

    def _ensure_nf_suite(self, method: UpdateMethod) -> None:
        if self.suites.nf_suite() is None:
            self._load_state(0)
            self.suites.ensure_nf_suite(self.model_name, lambda probes: score_probes(method.model, self.tokenizer, probes))

    def _suites(self, parent: int, own: list[Probe]) -> dict[str, list[Probe]]:
        learned = [p for m in learned_manifests(self.versions, parent) for p in from_json(m["probes"])]
        return {"nf": self.suites.nf_probes(), "learned": learned, "must_keep": self.suites.must_keep(), "own": own}

    def _score(self, method: UpdateMethod, suites: dict[str, list[Probe]]) -> gate.SuiteScores:
        def score(probes: list[Probe]) -> list[float]:
            return score_probes(method.model, self.tokenizer, probes) if probes else []
        return gate.SuiteScores(**{name: score(probes) for name, probes in suites.items()})

    def _examples(self, text: str, own: list[Probe], how: str,
                  sentences: bool = False) -> tuple[list[Example], list[dict[str, Any]]]:
        """Windows of the document, weighted as asked (see Settings.weighting); all-zero weights fall back to uniform.
        With `sentences`, each later sentence is also an example of its own (workers/contexts.py)."""
        enc = self.tokenizer(text, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        if how == "train_attention":
            weights = weighting.thresholded(self._phi().weights(ids), self.settings.weight_threshold)
        elif how == "oracle":
            weights = weighting.oracle(offsets, text, [p.answer for p in own])
        else:
            weights = weighting.uniform(len(ids))
        if not any(weights[1:]):
            weights = weighting.uniform(len(ids))
        window = self.settings.train_window_tokens
        examples = []
        for start in range(0, max(len(ids) - 1, 1), window - 1):  # windows overlap by one token
            chunk_ids, chunk_w = ids[start : start + window], weights[start : start + window]
            if start:
                chunk_w = [0.0, *chunk_w[1:]]
            if any(chunk_w):
                examples.append(Example(chunk_ids, chunk_w))
        if sentences:
            examples += contexts.sentence_examples(ids, weights, offsets, text, self.tokenizer.bos_token_id, window)
        ranked = sorted(range(len(ids)), key=lambda i: -weights[i])[:TOP_WEIGHTED]
        top = [{"token": self.tokenizer.decode([ids[i]]), "weight": round(weights[i], 4), "position": i}
               for i in sorted(ranked) if weights[i] > 0]
        return examples, top

    def _weighting(self, asked: str) -> str:
        """train_attention falls back to uniform for a base model with no packaged phi (none configured)."""
        if asked == "train_attention" and self.settings.train_attention_checkpoint is None \
                and not packaged_checkpoint(self.model_name).with_suffix(".json").exists():
            log.warning("no Train-Attention checkpoint for model %s: uniform weights", self.model_name)
            return "uniform"
        return asked

    def _phi(self) -> TrainAttention:
        """phi for the served base model, loaded on first use (a mismatched checkpoint fails the document)."""
        if self._train_attention is None:
            path = self.settings.train_attention_checkpoint or packaged_checkpoint(self.model_name)
            self._train_attention = TrainAttention.from_path(self.methods["adapter"].model, path)
        return self._train_attention

    def _budget(self, examples: list[Example], has_probes: bool) -> int:
        if has_probes:
            return self.settings.max_steps
        tokens = sum(len(e.input_ids) for e in examples)
        return max(4, min(self.settings.max_steps, 4 * math.ceil(tokens / 128)))


def _rounded(timings: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in timings.items()}
