"""`ckl bench phi-heads`: which phi design finds the answer in documents it never saw, and what it costs.

Each candidate (a head, the trunk layers it reads, what it learns) is trained as `ckl train-attention --rule
with-variant --folds K --hold-out I` trains a fold phi (the same rows, steps and batches; no validation),
once per fold, and judged on the variant_dev rows of the fold it held out: how often the answer's token is
the most weighted one, or among the three most weighted, and the share of the weight (thresholded as the
service does) that falls on the answer. The costs: seconds of meta-training per fold (the trunk's features
and, for first-order, the alignments are cached beforehand, as in training), and milliseconds to weigh
1,000 tokens (the trunk's pass and the head). With `--lora-trunk`, phi with a LoRA of its own on the base
model's top layers (the paper's design: phi is a language model with its own adapter) is judged the same
way on the first fold only, since it has to run the base model forward and backward for every document
at every step. LAMA-ckl's Top Acc for the design chosen: `ckl bench lama-ckl --crossfit`.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from torch import nn

from bench.phi_transfer import object_share
from core.model.loader import LoadedModel, load_model
from core.scoring import pad_batch
from core.settings import Settings
from methods.adapter.training import AdapterMethod
from research import lama_ckl
from research.provenance import RESULTS_ROOT, git_commit
from research.train_attention import folds, meta
from research.train_attention.caches import (
    alignments_cache_name,
    build_examples,
    cached_alignments,
    features_cache_name,
)
from research.train_attention.config import TrainConfig
from research.train_attention.rows import DataRule, training_rows, variant_pool
from research.train_attention.step import new_head, phi_step
from workers import weighting
from workers.train_attention import phi


@dataclass(frozen=True)
class Candidate:
    head: str
    layers: int
    variant: str  # answer | first-order

    @property
    def name(self) -> str:
        return f"{self.head} over {self.layers} layers, {self.variant}"


CANDIDATES = (
    Candidate("mlp", 3, "first-order"),  # the first packaged phis
    Candidate("mlp", 3, "answer"),
    Candidate("mlp", 9, "answer"),
    Candidate("attention", 3, "answer"),
    Candidate("attention", 9, "first-order"),
    Candidate("attention", 9, "answer"),  # the packaged phi
)
LORA_TOP_LAYERS = 6  # the top layers phi's own LoRA adapts


def judged(weights: torch.Tensor, answer: torch.Tensor, threshold: float) -> tuple[bool, bool, float]:
    """(answer's token most weighted, answer in the top 3, answer's share of the thresholded weight)."""
    w = weights.clone()
    w[0] = 0.0
    order = torch.argsort(w, descending=True)
    share = object_share(weighting.thresholded(w.tolist(), threshold), answer.tolist())
    return bool(answer[order[0]] > 0), bool(answer[order[:3]].sum() > 0), share


def summarize(marks: list[tuple[bool, bool, float]]) -> dict[str, float]:
    return {"rows": len(marks), "answer_first": statistics.mean(m[0] for m in marks),
            "answer_in_top_3": statistics.mean(m[1] for m in marks), "answer_share": statistics.mean(m[2] for m in marks)}


def fold_examples(loaded: LoadedModel, model: nn.Module, config: TrainConfig, args: argparse.Namespace,
                  head_config: phi.PhiConfig, cache: Path) -> list[tuple[list, list]]:
    """Per fold, (training examples, held-out variant_dev examples) as that fold phi's training sees them: all
    the rows phi may learn from, in training's order, less the fold's."""
    _, train_rows, _ = training_rows(loaded, config, args.data, RESULTS_ROOT, Settings().model,
                                     DataRule("with-variant"))
    examples = build_examples(loaded, model, train_rows, head_config, config.max_tokens,
                              cache / features_cache_name(head_config, config.max_tokens))
    out = []
    for fold in folds.make_folds(variant_pool(args.data), args.folds, args.split, args.fold_seed):
        held = {r.uuid for r in fold}
        out.append(([ex for ex in examples if ex.uuid not in held], [ex for ex in examples if ex.uuid in held]))
    return out


def frozen_trunk(loaded: LoadedModel, model: nn.Module, candidate: Candidate, args: argparse.Namespace,
                 cache: Path) -> dict:
    config = replace(TrainConfig(), variant=candidate.variant, head=candidate.head,
                     trunk_layers=candidate.layers)
    head_config = phi.default_config(loaded.model, candidate.head, candidate.layers)
    marks, seconds, weigh_s, tokens = [], [], 0.0, 0
    for train_examples, held in fold_examples(loaded, model, config, args, head_config, cache):
        alignments = None
        if candidate.variant == "first-order":
            alignments = cached_alignments(model, train_examples, config.inner_lr,
                                           cache / alignments_cache_name(config))
        head, optimizer = new_head(head_config, config)
        started = time.perf_counter()
        for step in range(config.steps):
            phi_step(head, optimizer, model, train_examples, step, config, alignments)
        seconds.append(time.perf_counter() - started)
        with torch.no_grad():  # the documents are shorter than phi's window: the cached features are its input
            marks += [judged(head(ex.features), ex.object_mask, args.threshold) for ex in held if ex.object_mask.sum() > 0]
        if not tokens:  # the cost of weighing, trunk pass included, on the first fold's documents
            weigh = phi.TrainAttention(model, phi.Checkpoint(head_config, head.state_dict(),
                                                             {"base_model": phi.fingerprint(model)}))
            started = time.perf_counter()
            for ex in held:
                weigh.weights(ex.pair.doc_ids)
            weigh_s, tokens = time.perf_counter() - started, sum(len(ex.pair.doc_ids) for ex in held)
    return {**summarize(marks), "train_s_per_fold": statistics.mean(seconds), "weigh_ms_per_1000_tokens": 1e6 * weigh_s / tokens}


def lora_trunk(loaded: LoadedModel, args: argparse.Namespace, cache: Path, epochs: int = 2, batch: int = 8) -> dict:
    """phi = the base model with its own LoRA (rank 8, every projection of the top layers) and the mlp head over
    3 of its layers, learning the answer tokens, trained on fold 0's training rows and judged on fold 0."""
    config = replace(TrainConfig(), variant="answer", head="mlp", trunk_layers=3)
    head_config = phi.default_config(loaded.model, "mlp", 3)
    train_examples, held = fold_examples(loaded, loaded.model, config, args, head_config, cache)[0]
    n = loaded.model.config.num_hidden_layers
    torch.manual_seed(config.seed)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, layers_to_transform=list(range(n - LORA_TOP_LAYERS, n)),
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    trunk = get_peft_model(loaded.model, lora)
    head = phi.make_head(head_config)
    optimizer = torch.optim.AdamW([{"params": [p for p in trunk.parameters() if p.requires_grad], "lr": 3e-4},
                                   {"params": head.parameters(), "lr": config.lr}])
    decoder = trunk.get_base_model().model

    def weigh(docs: list[list[int]]) -> torch.Tensor:
        """[docs, longest] weights of right-padded documents, through phi's own adapter."""
        ids, mask = pad_batch(docs, 0, loaded.device)
        states = decoder(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False).hidden_states
        return head(phi.layer_features(states, head_config))

    rng, started = random.Random(config.seed), time.perf_counter()
    for _ in range(epochs):
        order = rng.sample(train_examples, len(train_examples))
        for i in range(0, len(order), batch):
            chunk = order[i : i + batch]
            optimizer.zero_grad(set_to_none=True)
            weights = weigh([ex.pair.doc_ids for ex in chunk])
            loss = sum(meta.answer_objective(weights[j, : len(ex.pair.doc_ids)], ex.object_mask)
                       for j, ex in enumerate(chunk)) / len(chunk)
            loss.backward()
            optimizer.step()
    train_s = time.perf_counter() - started
    marks, weigh_s, tokens = [], 0.0, 0
    with torch.no_grad():
        for ex in held:
            started = time.perf_counter()
            weights = weigh([ex.pair.doc_ids])[0]
            weigh_s += time.perf_counter() - started
            tokens += len(ex.pair.doc_ids)
            if ex.object_mask.sum() > 0:
                marks.append(judged(weights, ex.object_mask, args.threshold))
    return {**summarize(marks), "train_s_per_fold": train_s, "weigh_ms_per_1000_tokens": 1e6 * weigh_s / tokens,
            "folds_judged": 1}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench phi-heads", description=__doc__.split("\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--split", choices=folds.SPLITS, default="uuid")
    parser.add_argument("--fold-seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=Settings().training.weight_threshold)
    parser.add_argument("--lora-trunk", action="store_true", help="also phi with its own LoRA (fold 0 only; ~7 min)")
    lama_ckl.add_data_argument(parser)
    parser.add_argument("--out", type=Path, default=RESULTS_ROOT / "phi-heads")
    args = parser.parse_args(argv)
    args.data = lama_ckl.data_folder(args.data)
    loaded = load_model(Settings())
    # As ckl train-attention does: the first-order alignments are computed on a fresh adapter.
    loaded.model.set_attn_implementation("eager")
    defaults = TrainConfig()
    torch.manual_seed(defaults.seed)
    model = AdapterMethod(loaded.model, loaded.tokenizer,
                          Settings(method_settings={"adapter": {"rank": defaults.lora_rank, "alpha": defaults.lora_alpha}})).model
    cache = RESULTS_ROOT / "train-attention" / "cache"  # shared with ckl train-attention's runs
    results = {c.name: frozen_trunk(loaded, model, c, args, cache) for c in CANDIDATES}
    if args.lora_trunk:  # on a model of its own: phi's adapter is not the learner's
        results[f"mlp over 3 layers, answer, phi's own LoRA on the top {LORA_TOP_LAYERS} layers"] = lora_trunk(
            load_model(Settings()), args, cache)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"results-{args.split}.json").write_text(json.dumps(
        {"git_commit": git_commit(), "folds": args.folds, "split": args.split, "results": results}, indent=1))
    print(f"variant_dev rows weighed by the phi that held their fold out ({args.folds} folds by {args.split}); "
          f"threshold {args.threshold}")
    print("| phi | answer first | answer in top 3 | answer's share | train s / fold | weigh ms / 1,000 tokens |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['answer_first']:.3f} | {r['answer_in_top_3']:.3f} | {r['answer_share']:.3f} | "
              f"{r['train_s_per_fold']:.0f} | {r['weigh_ms_per_1000_tokens']:.0f} |")
