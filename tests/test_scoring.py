"""Probe scoring and the weighted loss against hand-computed values on the tiny model."""
import math

import pytest
import torch

from core.scoring import Probe, encode_probe, join_probe, logits_at, next_token_nll, pad_batch, score_probes
from core.training import sequence_nll


def test_join_probe_adds_one_space_only_when_needed():
    assert join_probe("The capital of France is", "Paris") == "The capital of France is Paris"
    assert join_probe("The capital of France is ", "Paris") == "The capital of France is Paris"
    assert join_probe("x", " y") == "x y"


def test_encode_probe_marks_every_answer_token(tiny):
    ids, start = encode_probe(tiny.tokenizer, Probe("the capital of veltoria is", "marnhold city"))
    words = tiny.tokenizer.convert_ids_to_tokens(ids)
    assert words[0] == "<bos>" and words[start:] == ["marnhold", "city"]


def test_score_matches_argmax_by_hand(tiny):
    probes = [Probe("the capital of france is", "paris"), Probe("the capital of veltoria is", "marnhold city in rome")]
    scores = score_probes(tiny.model, tiny.tokenizer, probes, batch_size=2)
    for probe, score in zip(probes, scores):
        ids, start = encode_probe(tiny.tokenizer, probe)
        with torch.no_grad():
            logits = tiny.model(torch.tensor([ids])).logits[0]
        hits = [int(logits[pos - 1].argmax()) == ids[pos] for pos in range(start, len(ids))]
        assert score == pytest.approx(sum(hits) / len(hits))


def test_score_is_one_for_what_the_model_predicts(tiny):
    prompt = "the capital of france is"
    ids = tiny.tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        predicted = int(tiny.model(torch.tensor([ids])).logits[0, -1].argmax())
    answer = tiny.tokenizer.convert_ids_to_tokens([predicted])[0]
    other = next(w for w in ("paris", "rome") if w != answer)
    assert score_probes(tiny.model, tiny.tokenizer, [Probe(prompt, answer), Probe(prompt, other)]) == [1.0, 0.0]


def test_padding_does_not_change_scores(tiny):
    probes = [Probe("the", "capital"), Probe("the capital of france is a city in", "germany")]
    together = score_probes(tiny.model, tiny.tokenizer, probes, batch_size=2)
    alone = [score_probes(tiny.model, tiny.tokenizer, [p], batch_size=1)[0] for p in probes]
    assert together == alone


def test_logits_at_equals_full_forward(tiny):
    ids, mask = pad_batch([[2, 5, 6, 7], [2, 8]], 0, torch.device("cpu"))
    rows, cols = torch.tensor([0, 0, 1]), torch.tensor([1, 3, 1])
    with torch.no_grad():
        full = tiny.model(input_ids=ids, attention_mask=mask).logits
        picked = logits_at(tiny.model, ids, mask, rows, cols)
    torch.testing.assert_close(picked, full[rows, cols])


IDS, MASK = pad_batch([[2, 5, 6, 7, 9], [2, 8, 4]], 0, torch.device("cpu"))
ROWS, COLS, TARGETS = torch.tensor([0, 0, 0, 1, 1]), torch.tensor([0, 1, 3, 0, 1]), torch.tensor([5, 6, 9, 8, 4])


def same_loss_and_gradients(model, got, expected) -> None:
    """`got()` and `expected()` give the same losses, and the same gradients of their sum."""
    params = list(model.parameters())

    def loss_and_grads(loss_fn):
        for p in params:
            p.requires_grad_(True)
        try:
            loss = loss_fn()
            grads = torch.autograd.grad(loss.sum(), params, allow_unused=True)
        finally:
            for p in params:
                p.requires_grad_(False)
        return loss.detach(), [g for g in grads if g is not None]
    (want, want_grads), (have, have_grads) = loss_and_grads(expected), loss_and_grads(got)
    torch.testing.assert_close(have, want)
    assert len(have_grads) == len(want_grads) > 0
    for a, b in zip(have_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_chunked_loss_equals_the_loss_of_the_whole_logits_and_so_do_its_gradients(tiny):
    whole = lambda: torch.nn.functional.cross_entropy(logits_at(tiny.model, IDS, MASK, ROWS, COLS).float(), TARGETS,
                                                      reduction="none")
    chunked = lambda: next_token_nll(tiny.model, IDS, MASK, ROWS, COLS, TARGETS, chunk=2, once=2)  # three chunks
    same_loss_and_gradients(tiny.model, chunked, whole)


def test_the_loss_over_some_words_is_the_cross_entropy_of_their_logits_alone_and_so_are_its_gradients(tiny):
    words = torch.tensor([3, 4, 5, 6, 8, 9, 11])  # sorted, every target among them (core/vocabulary.py)

    def by_hand():
        logits = logits_at(tiny.model, IDS, MASK, ROWS, COLS)[:, words]
        return torch.nn.functional.cross_entropy(logits.float(), torch.searchsorted(words, TARGETS), reduction="none")
    for chunked in ({}, {"chunk": 2, "once": 2}):
        over_words = lambda: next_token_nll(tiny.model, IDS, MASK, ROWS, COLS, TARGETS, vocabulary=words,  # noqa: E731
                                            **chunked)
        same_loss_and_gradients(tiny.model, over_words, by_hand)
    full = next_token_nll(tiny.model, IDS, MASK, ROWS, COLS, TARGETS)
    every = next_token_nll(tiny.model, IDS, MASK, ROWS, COLS, TARGETS, vocabulary=torch.arange(len(tiny.tokenizer)))
    torch.testing.assert_close(every, full)
    assert bool((next_token_nll(tiny.model, IDS, MASK, ROWS, COLS, TARGETS, vocabulary=words) < full).all())


def test_weighted_nll_by_hand():
    nll = torch.tensor([math.log(1 + math.exp(-2)), math.log(1 + math.exp(1)), math.log(2)])
    weights = torch.tensor([1.0, 3.0, 2.0])
    rows = torch.tensor([0, 0, 1])
    expected = ((1 * nll[0] + 3 * nll[1]) / 4 + nll[2]) / 2
    per_sequence, used = sequence_nll(nll, weights, rows, 3)  # the third sequence has no weighted position
    assert used.tolist() == [True, True, False]
    assert float(per_sequence[used].mean()) == pytest.approx(float(expected), rel=1e-5)
