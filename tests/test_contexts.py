"""The extra training contexts of a document: each later sentence on its own (workers/contexts.py)."""
from workers.contexts import sentence_examples, sentence_starts


def test_sentences_start_after_a_full_stop_question_mark_or_newline(tiny):
    text = "The Republic moved. The capital is Marnhold? Yes\nIt is 3.5 km wide."
    enc = tiny.tokenizer(text, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    starts = sentence_starts(text, offsets)
    # the first token of each later sentence; "3.5" is not a sentence end
    assert [text[offsets[i][0]:offsets[i][1]].strip()[:1] for i in starts] == ["T", "Y", "I"]


def test_each_later_sentence_keeps_the_document_weights_of_its_tokens(tiny):
    text = "The Republic moved. The capital is Marnhold."
    enc = tiny.tokenizer(text, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    weights = [0.0] + [float(i) for i in range(1, len(ids))]
    (start,) = sentence_starts(text, offsets)
    (example,) = sentence_examples(ids, weights, offsets, text, bos_token_id=ids[0], window=512)
    assert example.input_ids == [ids[0]] + ids[start:]
    assert example.weights == [0.0] + weights[start:]
    # without a BOS the sentence's first token is position 0, never predicted
    (bare,) = sentence_examples(ids, weights, offsets, text, bos_token_id=None, window=512)
    assert bare.input_ids == ids[start:] and bare.weights == [0.0] + weights[start + 1:]
    # a sentence with no weighted token is not an example; a one-sentence text has no extra context
    assert sentence_examples(ids, [1.0] * start + [0.0] * (len(ids) - start), offsets, text, ids[0], 512) == []
    assert sentence_examples(ids[:start], weights[:start], offsets[:start], text[:19], ids[0], 512) == []
