"""The output layer computed for 16 rows where fewer would take longer on a CPU (core/model/wide_head.py): every row's
logits, and gradients, are those of the plain layer."""
import copy

import pytest
import torch
from torch import nn

from core.model.wide_head import PADDED_ROWS, RowPaddedLinear, pad_head_rows
from tests.tiny import tiny_loaded


@pytest.mark.parametrize("shape", [(1, 1), (3, 1), (5, 1), (7, 2), (15, 1), (16, 1), (9,), (2, 20)])
def test_a_padded_head_gives_each_row_the_plain_heads_logits_and_gradients(shape):
    torch.manual_seed(0)
    plain = nn.Linear(32, 300, bias=False)
    padded = copy.deepcopy(plain)
    padded.__class__ = RowPaddedLinear
    x = torch.randn(*shape, 32, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    out, expected = padded(x), plain(y)
    assert out.shape == expected.shape
    assert torch.allclose(out, expected, atol=1e-5)
    (out ** 2).sum().backward()
    (expected ** 2).sum().backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-4)
    assert torch.allclose(padded.weight.grad, plain.weight.grad, atol=1e-4)
    assert PADDED_ROWS == 16


def test_a_models_head_is_padded_in_place_with_its_weights_and_state():
    loaded = tiny_loaded()
    model = loaded.model
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    ids = torch.randint(0, model.config.vocab_size, (7, 3))
    with torch.inference_mode():
        expected = model(input_ids=ids).logits
        assert pad_head_rows(model)
        assert type(model.get_output_embeddings()) is RowPaddedLinear
        assert torch.allclose(model(input_ids=ids, logits_to_keep=1).logits, expected[:, -1:], atol=1e-5)
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in before.items())
    assert not pad_head_rows(model)  # once only: it is no plain nn.Linear now
