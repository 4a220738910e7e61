import torch
from torch import nn


class DocumentBias:
    """A bias per document added to the LM head's output, the documents on summed (none on: the base model)."""

    def __init__(self, model: nn.Module) -> None:
        head = model.get_output_embeddings()
        self.size = head.out_features
        self.biases: dict[str, torch.Tensor] = {}
        self.active: tuple[str, ...] = ()
        head.register_forward_hook(self._add)

    def _add(self, _module: nn.Module, _args: tuple, out: torch.Tensor) -> torch.Tensor:
        return out + sum(self.biases[d] for d in self.active) if self.active else out
