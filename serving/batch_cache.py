"""A batched KV cache for left-padded rows: transformers' DynamicCache, grown, merged and cut row by row.

Every row of a group's cache spans the same columns; a row shorter than the group is padded on the left
(zero keys and values, 0 in the attention mask), as transformers' generate pads a batch of prompts. A full
attention layer holds every column; a sliding-window layer (Gemma 3) only the last window - 1 of them, and
counts the columns it has seen. Padding shifts all of a row's columns by the same amount, so the distance
between any two of its tokens, and so what the window shows, stays what it would be for the row alone.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

LAYERS = (DynamicLayer, DynamicSlidingWindowLayer)


def batchable(cache: object) -> bool:
    """Whether rows of this cache can be padded and merged here (other layer kinds, e.g. quantized or
    linear-attention caches, are decoded one sequence at a time)."""
    return isinstance(cache, DynamicCache) and all(type(layer) in LAYERS and layer.is_initialized
                                                   for layer in cache.layers)


def columns(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def resize(cache: DynamicCache, length: int) -> None:
    """Make every row span `length` columns: pad on the left, or cut columns off the left (only padding)."""
    for layer in cache.layers:
        held = layer.keys.shape[-2]
        wanted = min(length, layer.sliding_window - 1) if layer.is_sliding else length
        if wanted > held:
            layer.keys = F.pad(layer.keys, (0, 0, wanted - held, 0))
            layer.values = F.pad(layer.values, (0, 0, wanted - held, 0))
        elif wanted < held:
            layer.keys = layer.keys[..., held - wanted:, :]
            layer.values = layer.values[..., held - wanted:, :]
        if layer.is_sliding:
            layer.cumulative_length = length


def pad_mask(mask: torch.Tensor, length: int) -> torch.Tensor:
    return F.pad(mask, (length - mask.shape[1], 0))


def merge(cache: DynamicCache, mask: torch.Tensor, other: DynamicCache,
          other_mask: torch.Tensor) -> tuple[DynamicCache, torch.Tensor]:
    """`other`'s rows appended to `cache`'s (in place), the shorter one padded on the left; and the mask."""
    length = max(columns(cache), columns(other))
    resize(cache, length)
    resize(other, length)
    for layer, joining in zip(cache.layers, other.layers, strict=True):
        layer.keys = torch.cat([layer.keys, joining.keys])
        layer.values = torch.cat([layer.values, joining.values])
    return cache, torch.cat([pad_mask(mask, length), pad_mask(other_mask, length)])


def leading_padding(mask: torch.Tensor) -> int:
    """Columns on the left that are padding in every row."""
    return int(torch.argmax(mask.any(0).to(torch.int8)))


def keep_rows(cache: DynamicCache, mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Only `rows` stay (in place); the columns that then are padding in every row are cut. Gives the mask."""
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[rows], layer.values[rows]
    mask = mask[rows]
    if cut := leading_padding(mask):
        resize(cache, columns(cache) - cut)
        mask = mask[:, cut:]
    return mask
