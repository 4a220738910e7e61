import torch
from torch import nn


def add_bias(model: nn.Module) -> nn.Parameter:
    """A zero bias added to the LM head's output (so version 0 is the base model exactly)."""
    head = model.get_output_embeddings()
    bias = nn.Parameter(torch.zeros(head.out_features))
    head.register_forward_hook(lambda _m, _args, out: out + bias)
    return bias
