"""`ckl bench ta-costs`: what Train-Attention costs and saves, on LAMA-ckl evidence passages.

1. phi's trunk: the frozen base model's forward pass per document (what phi costs, once per
   document), against a forward + backward through the same trunk (what each meta-step would cost
   per document if phi's trunk were trained, e.g. with its own LoRA).
2. Logits only where phi's weight is above the threshold: the same batches, weights and adapter;
   (a) weights below the threshold set to 0, so only the other positions get logits over the 262k
   vocabulary, (b) every position gets logits. Median seconds of forward + backward per batch.
(Where each phi puts its weight in the invented facts the service is taught: `ckl bench phi-facts`.)
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from core.model.base_only import base_only
from core.model.loader import load_model
from core.scoring import decoder_and_head
from core.settings import Settings
from core.training import Example
from methods.adapter.training import AdapterMethod
from research import lama_ckl
from workers import weighting
from workers.train_attention.phi import TrainAttention, packaged_checkpoint


def step_seconds(method: AdapterMethod, batches: list[list[Example]], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        for batch in batches:
            started = time.perf_counter()
            method.loss(batch).backward()
            times.append(time.perf_counter() - started)
            method.model.zero_grad(set_to_none=True)
    return statistics.median(times)


def trunk_seconds(model: torch.nn.Module, documents: list[list[int]]) -> tuple[float, float]:
    """Median seconds per document: phi's trunk pass (no grad), and a forward + backward through it."""
    decoder, _, _ = decoder_and_head(model)
    frozen, trained = [], []
    for ids in documents:
        x = torch.tensor([ids])
        started = time.perf_counter()
        with torch.no_grad(), base_only(model):
            decoder(input_ids=x, output_hidden_states=True, use_cache=False)
        frozen.append(time.perf_counter() - started)
        started = time.perf_counter()
        with torch.enable_grad(), base_only(model):
            embeddings = decoder.get_input_embeddings()(x).detach().requires_grad_(True)
            decoder(inputs_embeds=embeddings, use_cache=False).last_hidden_state.sum().backward()
        trained.append(time.perf_counter() - started)
    return statistics.median(frozen), statistics.median(trained)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench ta-costs", description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=32, help="variant_dev evidence passages")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threshold", type=float, default=Settings().training.weight_threshold)
    lama_ckl.add_data_argument(parser)
    args = parser.parse_args(argv)
    data = lama_ckl.data_folder(args.data)

    settings = Settings()
    loaded = load_model(settings)
    method = AdapterMethod(loaded.model, loaded.tokenizer, settings)
    phi = TrainAttention.from_path(method.model, packaged_checkpoint(settings.model))
    rows = lama_ckl.read_rows(lama_ckl.data_files(data)[0], args.docs)
    raw = []
    for row in rows:
        ids = loaded.tokenizer(row.evidence, truncation=True, max_length=args.max_tokens)["input_ids"]
        raw.append((ids, phi.weights(ids)))
    trunk_pass, trunk_train = trunk_seconds(method.model, [ids for ids, _ in raw[:8]])
    thresholded = [Example(ids, weighting.thresholded(w, args.threshold)) for ids, w in raw]
    full = [Example(ids, w) for ids, w in raw]
    kept = sum(sum(1 for x in e.weights[1:] if x > 0) for e in thresholded) / sum(len(e.weights) - 1 for e in full)

    def chunks(examples: list[Example]) -> list[list[Example]]:
        return [examples[i : i + args.batch_size] for i in range(0, len(examples), args.batch_size)]

    with torch.enable_grad():
        step_seconds(method, chunks(full)[:1], 1)  # warm-up
        cut = step_seconds(method, chunks(thresholded), args.repeats)
        every = step_seconds(method, chunks(full), args.repeats)
    print(f"phi trunk per document (frozen, no grad): {trunk_pass:.3f} s; "
          f"forward + backward through the trunk: {trunk_train:.3f} s (x{trunk_train / trunk_pass:.1f})")
    print(f"{len(rows)} documents, batches of {args.batch_size}, <= {args.max_tokens} tokens, threshold {args.threshold}")
    print(f"positions with logits: {kept:.1%} (thresholded) vs 100% (all)")
    print(f"forward+backward per batch, median: {cut:.2f} s thresholded, {every:.2f} s all positions, "
          f"speed-up x{every / cut:.2f}")
