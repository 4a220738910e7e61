"""A training step's softmax over the words that compete (core/vocabulary.py), on the tiny model: the words are the
targets, the model's first ones and the targets' nearest rows, and a document's training uses them and lets them go
after (the loss over them: tests/test_scoring.py)."""
import pytest
import torch

from core.scoring import logits_at
from core.settings import Settings
from core.training import Example
from core.vocabulary import nearest_words, step_vocabulary
from methods.routed.training import RoutedMethod
from tests.test_scoring import COLS, IDS, MASK, ROWS, TARGETS


def test_the_words_are_the_targets_the_models_first_words_and_the_targets_nearest_rows(tiny):
    with torch.no_grad():
        first = logits_at(tiny.model, IDS, MASK, ROWS, COLS).topk(2, dim=-1).indices.flatten()
    weight = tiny.model.get_output_embeddings().weight
    near = [(weight[t] @ weight.T).topk(3).indices for t in TARGETS.unique()]
    words = step_vocabulary(tiny.model, [(IDS, MASK, ROWS, COLS, TARGETS)], top_k=2, neighbours=3)
    expected = torch.unique(torch.cat([TARGETS, first, *near]))
    assert words.tolist() == expected.tolist() and len(words) < len(tiny.tokenizer)
    assert sorted(nearest_words(weight, TARGETS.unique(), 3).tolist()) == sorted(torch.cat(near).tolist())
    assert len(step_vocabulary(tiny.model, [(IDS, MASK, ROWS, COLS, TARGETS)], 10**6, 10**6)) == len(weight)


class Recording(RoutedMethod):
    """The routed method, recording the words each loss it computes runs over."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.seen: list[torch.Tensor | None] = []

    def _padded_losses(self, batch):
        self.seen.append(self.vocabulary)
        return super()._padded_losses(batch)


def test_a_documents_steps_run_over_its_words_and_let_them_go_after(tiny):
    ids = tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]
    example = Example(ids, [0.0] * (len(ids) - 1) + [1.0])
    for top_k, expect_words in ((2, True), (0, False)):
        method = Recording(tiny.model, tiny.tokenizer, Settings(training={"vocabulary_top_k": top_k}))
        method.begin("new", "the capital of veltoria is marnhold", [])
        method.activate(("new",))
        method.train([example], 2, lambda: False)
        assert method.seen and all((words is not None) == expect_words for words in method.seen)
        assert all(ids[-1] in words.tolist() for words in method.seen if words is not None)
        assert method.vocabulary is None


def test_a_training_that_raises_lets_its_words_go(tiny):
    ids = tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]
    method = Recording(tiny.model, tiny.tokenizer, Settings(training={"vocabulary_top_k": 2}))
    method.begin("new", "the capital of veltoria is marnhold", [])
    method.activate(("new",))

    def stopped(step: int, steps: int) -> None:
        raise RuntimeError("the worker stopped")

    with pytest.raises(RuntimeError):
        method.train([Example(ids, [0.0] * (len(ids) - 1) + [1.0])], 2, lambda: False, progress=stopped)
    assert method.seen and method.seen[-1] is not None  # the step ran over the document's words
    assert method.vocabulary is None
