"""`ckl bench step-time`: one training step of a paragraph-sized batch (a 100-token window, 16 probes of 20 tokens,
2 replayed rows) on the served model, computed as one batch padded to the longest example and as passes of similar
length (core/batching.py: by_length), and those passes in bfloat16 autocast (CKL_TRAINING_AUTOCAST) or with the
softmax over the step's words only (core/vocabulary.py); the median of 5 steps each, after one to warm up."""
from __future__ import annotations

import argparse
import statistics
import time

import methods  # noqa: F401  (registers the methods)
from core.model.loader import load_model
from core.settings import Settings
from core.training import Example
from methods.routed.training import RoutedMethod

TEXT = "Marrowdeep Station is a research base on the island of Quellholm, opened in 1974. "


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench step-time")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    settings = Settings()
    loaded = load_model(settings, progress=lambda message: None)
    method = RoutedMethod(loaded.model, loaded.tokenizer, settings)
    method.begin("document", TEXT, [])
    method.activate(("document",))
    ids = loaded.tokenizer(TEXT * 6)["input_ids"]
    own = [Example(ids[:100], [1.0] * 100), *(Example(ids[i:i + 20], [0.0] * 15 + [1.0] * 5) for i in range(16))]
    replay = [Example(ids[i:i + 12], [0.0] * 8 + [1.0] * 4) for i in range(2)]
    optimizer, params = method.optimizer(), method.parameters()
    for param in params:
        param.requires_grad_(True)
    similar, words = method.losses, method.step_vocabulary([*own, *replay], 8)
    for name, losses, autocast, vocabulary in (
            ("one padded batch", method._padded_losses, "off", None),
            ("passes of similar length", similar, "off", None),
            ("passes of similar length, bfloat16 autocast", similar, "bfloat16", None),
            (f"passes of similar length, a softmax over {len(words)} words", similar, "off", words)):
        method.losses = losses
        method.settings.training.autocast = autocast
        method.vocabulary = vocabulary
        seconds = []
        for _ in range(args.steps + 1):
            started = time.perf_counter()
            method._step(own, replay, [1.0, 1.0], optimizer, params)
            seconds.append(time.perf_counter() - started)
        print(f"{name}: median {statistics.median(seconds[1:]):.2f} s per step")
