"""The words a training step's softmax runs over (CKL_TRAINING_VOCABULARY_TOP_K, _NEIGHBOURS).

The default model's output layer has 262,144 rows, and a step's loss over all of them is about half of the step
(docs/decisions.md: "A step's softmax over the words that compete"). A step's gradient comes almost all from the
words with some probability at the trained positions: the targets, the words the model already puts first there,
and the words a step towards a target lifts with it (the output rows nearest the target's). Over those, some
thousands, the loss and its gradient are nearly the full ones. The probes the gate scores still use every word.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from core.scoring import decoder_and_head

POSITIONS_AT_ONCE = 128  # positions whose full logits are made at once (128 x 262k floats: 134 MB)

Pass = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # ids, mask, rows, cols, targets


def nearest_words(weight: torch.Tensor, words: torch.Tensor, n: int) -> torch.Tensor:
    """The `n` output rows with the largest dot product with each of `words`' rows (each word among them): a step
    that lifts a word's logit lifts theirs most."""
    n = min(n, len(weight))
    return torch.cat([(weight[words[i:i + POSITIONS_AT_ONCE]] @ weight.T).topk(n, dim=-1).indices.flatten()
                      for i in range(0, len(words), POSITIONS_AT_ONCE)])


@torch.no_grad()
def step_vocabulary(model: nn.Module, passes: Iterable[Pass], top_k: int, neighbours: int) -> torch.Tensor:
    """Sorted ids of the words a document's training steps' softmax runs over: every target of `passes`, the
    model's `top_k` first words at each trained position as it is now, and each target's `neighbours` nearest
    output rows."""
    decoder, head, _ = decoder_and_head(model)
    top_k, found, targets = min(top_k, len(head.weight)), [], []
    for ids, mask, rows, cols, gold in passes:
        hidden = decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state[rows, cols]
        found += [head(hidden[i:i + POSITIONS_AT_ONCE]).topk(top_k, dim=-1).indices.flatten()
                  for i in range(0, len(hidden), POSITIONS_AT_ONCE)]
        targets.append(gold)
    words = torch.unique(torch.cat(targets))
    return torch.unique(torch.cat([words, *found, nearest_words(head.weight, words, neighbours)]))
