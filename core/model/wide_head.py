"""The output layer's product on a CPU, for a few rows at once. With the default model's 262,144-word vocabulary,
MKL's matrix product for 5 to 15 rows takes up to 2.6 times as long as for 16 (docs/decisions.md: "A decoding step
of fewer than 16 rows"), so such a product is computed for 16 rows, the rest zeros, and cut back: each row's logits
are the same, and a decoding step of 15 answers costs what one of 16 does."""
from __future__ import annotations

import torch
from torch import nn

PADDED_ROWS = 16  # a product of fewer rows (but more than FEW_ROWS) is computed for this many
FEW_ROWS = 4  # this many rows or fewer are quicker as they are


class RowPaddedLinear(nn.Linear):
    """An nn.Linear whose product over FEW_ROWS < n < PADDED_ROWS rows (all dimensions but the last) runs on
    PADDED_ROWS rows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[:-1].numel()
        if not FEW_ROWS < rows < PADDED_ROWS:
            return super().forward(x)
        flat = x.reshape(rows, x.shape[-1])
        padded = torch.cat([flat, flat.new_zeros(PADDED_ROWS - rows, flat.shape[-1])])
        return super().forward(padded)[:rows].reshape(*x.shape[:-1], -1)


def pad_head_rows(model: nn.Module) -> bool:
    """Make the model's output layer a RowPaddedLinear (the same weights, and the same state dict) where it is a
    plain nn.Linear; whether it did."""
    head = model.get_output_embeddings()
    if type(head) is not nn.Linear:
        return False
    head.__class__ = RowPaddedLinear
    return True
