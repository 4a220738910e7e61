"""Teacher-forced probe scoring and token-weighted loss, with logits only where they are used.

A probe is a cloze: a prompt and the answer that should follow it. Its score is the share of answer
tokens the model predicts exactly (argmax == gold) when fed the prompt and the gold answer so far.
The vocabulary has 262k entries, so the LM head runs only at the positions that predict answer
(or weighted) tokens: that is most of the cost saved.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedTokenizerBase

from core.namespaces import SHARED


@dataclass(frozen=True)
class Probe:
    prompt: str
    answer: str
    # Whose keys ask it (core/namespaces.py): a tenant's fact is scored as that tenant is answered. Part of its
    # identity, so two tenants' facts with the same words keep a score each.
    namespace: str = SHARED

    @property
    def asked(self) -> tuple[str, str]:
        """The prompt and the namespace it is asked in: what routes it."""
        return self.prompt, self.namespace


def join_probe(prompt: str, answer: str) -> str:
    """The probe as one text: a space goes between prompt and answer unless one is already there."""
    if prompt.endswith((" ", "\n")) or answer.startswith((" ", "\n")):
        return prompt + answer
    return prompt + " " + answer


def encode_probe(tokenizer: PreTrainedTokenizerBase, probe: Probe) -> tuple[list[int], int]:
    """Token ids of prompt + answer, and the index of the first answer token."""
    prompt_ids = tokenizer(probe.prompt)["input_ids"]
    full_ids = tokenizer(join_probe(probe.prompt, probe.answer))["input_ids"]
    start = 0
    while start < min(len(prompt_ids), len(full_ids)) and prompt_ids[start] == full_ids[start]:
        start += 1
    if start >= len(full_ids):
        raise ValueError(f"answer {probe.answer!r} adds no tokens to prompt {probe.prompt!r}")
    return full_ids, max(start, 1)


def decoder_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module, float | None]:
    """The decoder stack, the LM head and the final logit soft-cap of a causal LM (PEFT-wrapped or not)."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    softcap = getattr(causal_lm.config, "final_logit_softcapping", None)
    return causal_lm.model, causal_lm.get_output_embeddings(), softcap


def logits_at(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Logits of the next token at positions (rows[i], cols[i]) only: shape [len(rows), vocab]."""
    decoder, head, softcap = decoder_and_head(model)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    logits = head(hidden[rows, cols])
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


# Positions whose logits a training step makes at once: up to NLL_ONCE, all of them, kept for the backward pass (256
# x a 262k vocabulary is 268 MB in fp32); past it, NLL_CHUNK at a time, made again for the backward pass.
NLL_ONCE = 256
NLL_CHUNK = 128


def next_token_nll(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                   cols: torch.Tensor, targets: torch.Tensor, chunk: int = NLL_CHUNK,
                   once: int = NLL_ONCE, vocabulary: torch.Tensor | None = None) -> torch.Tensor:
    """The next-token loss at positions (rows[i], cols[i]) against targets[i], as logits_at and cross-entropy
    would give it. Past `once` positions the logits are made `chunk` at a time and made again for the backward
    pass: memory no longer grows with the positions trained (a vocabulary of 262k makes a step of 2,000 positions
    6 GB), and a short document's step (most) pays no second pass over the LM head.
    `vocabulary` (sorted token ids holding every target; core/vocabulary.py): the softmax over those words only."""
    decoder, head, softcap = decoder_and_head(model)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state[rows, cols]
    if vocabulary is not None:
        words, bias = head.weight[vocabulary], head.bias[vocabulary] if head.bias is not None else None
        head = lambda states: nn.functional.linear(states, words, bias)  # noqa: E731
        targets = torch.searchsorted(vocabulary, targets)

    def nll(states: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
        logits = head(states)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        return nn.functional.cross_entropy(logits.float(), gold, reduction="none")
    if not torch.is_grad_enabled():
        return torch.cat([nll(hidden[i:i + chunk], targets[i:i + chunk]) for i in range(0, len(targets), chunk)])
    if len(targets) <= once:  # a short document's step: its logits kept for the backward pass, made once
        return nll(hidden, targets)
    return torch.cat([checkpoint(nll, hidden[i:i + chunk], targets[i:i + chunk], use_reentrant=False)
                      for i in range(0, len(targets), chunk)])


def pad_batch(sequences: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and attention mask."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
    return ids.to(device), mask.to(device)


def left_padded(prompts: list[list[int]], device: torch.device, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts as one batch padded on the left (each row's next token in the last column), and its attention
    mask (0 on the padding)."""
    length = max(len(ids) for ids in prompts)
    ids = torch.tensor([[pad_id] * (length - len(row)) + row for row in prompts], device=device)
    pads = torch.tensor([length - len(row) for row in prompts], device=device)
    return ids, (torch.arange(length, device=device)[None, :] >= pads[:, None]).long()


def answer_positions(encoded: list[tuple[list[int], int]]) -> tuple[list[int], list[int], list[int]]:
    """For each answer token: its row, the position that predicts it, and the gold id."""
    rows, cols, gold = [], [], []
    for row, (ids, start) in enumerate(encoded):
        for pos in range(start, len(ids)):
            rows.append(row)
            cols.append(pos - 1)
            gold.append(ids[pos])
    return rows, cols, gold


@torch.no_grad()
def score_probes(model: nn.Module, tokenizer: PreTrainedTokenizerBase, probes: list[Probe],
                 batch_size: int = 32) -> list[float]:
    """Teacher-forced answer-token accuracy of each probe, in [0, 1]."""
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    scores: list[float] = []
    for start in range(0, len(probes), batch_size):
        encoded = [encode_probe(tokenizer, p) for p in probes[start : start + batch_size]]
        ids, mask = pad_batch([e[0] for e in encoded], pad_id, device)
        rows, cols, gold = answer_positions(encoded)
        logits = logits_at(model, ids, mask, torch.tensor(rows, device=device), torch.tensor(cols, device=device))
        hits = (logits.argmax(-1).cpu() == torch.tensor(gold)).float()
        per_probe = torch.zeros(len(encoded)).index_add_(0, torch.tensor(rows), hits)
        counts = torch.zeros(len(encoded)).index_add_(0, torch.tensor(rows), torch.ones(len(rows)))
        scores.extend((per_probe / counts).tolist())
    return scores


@torch.no_grad()
def greedy_continuations(model: nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: list[str],
                         tokens: int) -> list[str]:
    """Each prompt's greedy continuation of `tokens` tokens, all prompts in one right-padded batch (padding after a
    row's last token changes nothing before it), cut at an end-of-sequence token."""
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    sequences = [tokenizer(p)["input_ids"] for p in prompts]
    starts = [len(s) for s in sequences]
    done = [False] * len(prompts)
    for _ in range(tokens):
        ids, mask = pad_batch(sequences, pad_id, device)
        rows = torch.arange(len(sequences), device=device)
        cols = torch.tensor([len(s) - 1 for s in sequences], device=device)
        for row, token in enumerate(logits_at(model, ids, mask, rows, cols).argmax(-1).tolist()):
            done[row] = done[row] or token == tokenizer.eos_token_id
            if not done[row]:
                sequences[row].append(token)
    return [tokenizer.decode(s[start:]) for s, start in zip(sequences, starts)]


def accuracy(scores: list[float]) -> float | None:
    """Mean score; None for an empty suite (nothing to compare)."""
    return sum(scores) / len(scores) if scores else None

