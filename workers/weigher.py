"""The weigh step's work: a document's training examples under its token weighting, and probes made from its
text with phi's weights for a document sent without any (workers/examples.py does the token-level work), with the
relations every reader asks that the model links to them (workers/linked.py)."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from core import subjects
from core.namespaces import namespace_of
from core.scoring import Probe, left_padded
from core.settings import Settings
from core.training import Example, UpdateMethod
from workers import about, examples, linked
from workers.train_attention.phi import TrainAttention, checkpoint_for

log = logging.getLogger(__name__)

CONTINUATION_TOKENS = 8  # enough for a name after "the village of"
TOP_WEIGHTED = 12
HEAT_TOKENS = 512  # the tokens whose weights a record keeps for the console (a document's start, when it is long)


class Weigher:
    """Weighs documents for one learner: its model and tokenizer, its methods (`method` builds one by name),
    and phi, loaded on first use."""

    def __init__(self, settings: Settings, model, tokenizer, model_name: str,
                 method: Callable[[str], UpdateMethod]) -> None:
        self.settings = settings
        self.model, self.tokenizer, self.model_name = model, tokenizer, model_name
        self.method = method
        self._train_attention: TrainAttention | None = None

    def weighting(self, asked: str) -> str:
        """train_attention falls back to uniform for a base model with no packaged phi (none configured)."""
        if asked == "train_attention" and checkpoint_for(self.settings.training.phi_checkpoint,
                                                         self.model_name) is None:
            log.warning("no Train-Attention checkpoint for model %s: uniform weights", self.model_name)
            return "uniform"
        return asked

    def phi(self) -> TrainAttention:
        """phi for the served base model, loaded on first use (a mismatched checkpoint fails the document)."""
        if self._train_attention is None:
            path = checkpoint_for(self.settings.training.phi_checkpoint, self.model_name)
            assert path is not None, "phi needs a checkpoint (weighting() falls back to uniform without one)"
            self._train_attention = TrainAttention.from_path(self.model, path)
        return self._train_attention

    def examples(self, record: dict[str, Any],
                 own: list[Probe]) -> tuple[list[Example], list[Example], dict[str, Any]]:
        """The document's examples weighted as the record asks (all-zero weights fall back to uniform), with the
        extra contexts its method asks for and, for a method that trains on probes, its probes' (last); those of its
        probes again, apart (every step trains them); and what the record shows of the weights: the most-weighted tokens
        (`top_weighted_tokens`) and the first HEAT_TOKENS tokens as [text, weight] (`token_weights`, the console's
        heatmap). The text is trained as the state it describes, without its time markers."""
        doc = examples.encode(self.tokenizer, subjects.text_without_time_markers(record["text"], [p.prompt for p in own]))
        how = self.weighting(record.get("weighting") or self.settings.training.weighting)
        phi = self.phi().weights if how == "train_attention" else None
        answers = [p.answer for p in own]
        method = self.method(record["method"])
        weights = examples.token_weights(doc, how, answers, phi, self.settings.training.weight_threshold,
                                         method.weight_floor)
        if not any(weights[1:]):
            weights = examples.token_weights(doc, "uniform", [], None, 0.0)
        made = examples.document_examples(doc, weights, self.settings.training.window_tokens,
                                          self.tokenizer.bos_token_id, method.sentence_contexts)
        probes = self.probe_examples(own, method.question_contexts, record["text"]) if method.probe_contexts else []
        ranked = sorted(range(len(doc.ids)), key=lambda i: -weights[i])[:TOP_WEIGHTED]
        top = [{"token": self.tokenizer.decode([doc.ids[i]]), "weight": round(weights[i], 4), "position": i}
               for i in sorted(ranked) if weights[i] > 0]
        heat = [[self.tokenizer.decode([token]), round(weights[i], 3)] for i, token in enumerate(doc.ids[:HEAT_TOKENS])]
        return made + probes, probes, {"top_weighted_tokens": top, "token_weights": heat}

    def probe_examples(self, probes: list[Probe], questions: bool = False, text: str | None = None) -> list[Example]:
        """Each probe as text with weight on its answer only (with `questions`, also asked as a question; with the
        document's `text`, a cloze's answer followed by its end where the text ends it)."""
        return examples.probe_examples(self.tokenizer, [(p.prompt, p.answer) for p in probes], questions, text)

    def auto_probes(self, record: dict[str, Any]) -> list[Probe]:
        """For a document sent without probes: probes made from its text (phi's weights rank them where there is a
        phi for the model, else every token weighs the same), those its method can answer (a routed method: prompts
        that name the document's key)."""
        doc = examples.encode(self.tokenizer, record["text"])
        self.method(record["method"])  # built before phi reads the text, as every job's method is
        weights = self.phi().weights(doc.ids) if self.weighting("train_attention") == "train_attention" \
            else [1.0] * len(doc.ids)
        unreachable = examples.unreachable(record["method"], record["text"], self.settings)
        made = examples.checkable_auto_probes(doc, weights, unreachable)
        asked = {prompt for prompt, _ in made}
        related = [(prompt, answer) for prompt, answer in self.related(doc, made) if prompt not in asked]
        left_out = set(unreachable(related))
        made += [(prompt, answer) for prompt, answer in related if prompt not in left_out]
        return [Probe(prompt, answer, namespace_of(record)) for prompt, answer in made]

    def related(self, doc: examples.Encoded, made: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The relations every reader asks of a new subject (its founder, where it is, ...), each answered by one of
        the made probes' answers where the model, reading the document's start, names it first (workers/linked.py).
        None for a person, and none for a subject the model knows (news about it: its founder is no news)."""
        text = doc.text
        sentences = examples.sentence_spans(text)
        named = about.subjects_of(text, sentences)[1]
        if not made or not named or about.personal_name(named[0]) or subjects.familiar(named[0]) \
                or any(c.isdigit() for c in named[0]):
            return []
        answers, said = [answer for _, answer in made], [text[a:b] for a, b in sentences]
        if not (relations := linked.askable(answers, said)):
            return []
        written = about.with_article(text, named[0])
        tokens = [(a, b) for a, b in doc.offsets if b > a][:linked.CONTEXT_TOKENS]  # the text's own, no BOS
        head = text[:tokens[-1][1]].strip() if tokens else text.strip()
        prompts = [f"{head}\n\n{linked.asked(relation, written)[0]}" for relation in relations]
        return linked.linked(relations, self.continuations(prompts), answers, written, said)

    @torch.no_grad()
    def continuations(self, prompts: list[str]) -> list[str]:
        """Each prompt's greedy continuation of CONTINUATION_TOKENS, in one left-padded batch that keeps its cache
        (the prompts share a document: each step is one new token a row, not the whole text again)."""
        rows = [self.tokenizer(p)["input_ids"] for p in prompts]
        pad = self.tokenizer.pad_token_id or 0
        ids, mask = left_padded(rows, next(self.model.parameters()).device, pad)
        width = ids.shape[1]
        out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=CONTINUATION_TOKENS,
                                  do_sample=False, pad_token_id=pad)
        return self.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
