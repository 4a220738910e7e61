"""phi's meta-training settings: what it learns (`--variant`), its head, and the loop's sizes and rates.

The flags of `ckl train-attention` (research/train_attention/cli.py) are these fields; the checkpoint's json records
them under `train`, and the benchmark's fold phis are trained with the settings of the phi they replace.
"""
from __future__ import annotations

from dataclasses import dataclass

VARIANTS = ("answer", "first-order", "exact")


@dataclass
class TrainConfig:
    variant: str = "answer"  # VARIANTS: what phi learns (research/train_attention/meta.py)
    head: str = "attention"  # phi.HEADS
    trunk_layers: int = 9  # hidden states phi reads, evenly spaced up the trunk
    steps: int = 400
    batch: int = 16
    lr: float = 1e-3  # phi's AdamW
    inner_lr: float = 0.03  # the adapter's SGD step (both variants, and validation)
    lora_rank: int = 16
    lora_alpha: float = 32.0
    max_tokens: int = 128
    val: int = 48
    val_outer: int = 16  # validation pairs that also get the (costly) outer loss after one step
    validate_every: int = 50
    checkpoint_every: int = 25
    seed: int = 0
    balance: bool = False  # weigh pairs by 1 / (pairs sharing their relation and answer)
