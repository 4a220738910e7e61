"""Training examples and probes made from a document: pure functions over token weights."""
from workers import examples, weighting


def test_auto_probes_take_each_sentences_most_weighted_content_word_and_its_name():
    text = "A new novel reached the shops this week. The Kaviombold Archive was written by Jarek Wreniothor, a teacher."
    doc = examples.Encoded(text, list(range(len(text.split()) + 1)), [(0, 0)] + word_offsets(text))
    weights = [0.0] * len(doc.ids)
    weights[word_index(text, "shops")] = 0.5
    weights[word_index(text, "Wreniothor,")] = 0.9  # the surname; the first name comes with it
    weights[word_index(text, "The")] = 1.0  # an everyday word is never an answer
    assert examples.auto_probes(doc, weights) == [("A new novel reached the", "shops"),
                                              ("The Kaviombold Archive was written by", "Jarek Wreniothor")]


def word_offsets(text: str) -> list[tuple[int, int]]:
    offsets, position = [], 0
    for word in text.split():
        start = text.index(word, position)
        offsets.append((start, start + len(word)))
        position = start + len(word)
    return offsets


def word_index(text: str, word: str) -> int:
    return text.split().index(word) + 1  # token 0 is the BOS


def test_floored_weights_keep_every_token_and_phis_order():
    assert weighting.floored([0.0, 0.2, 1.0, 0.6], 0.5) == [0.0, 0.6, 1.0, 0.8]
    assert weighting.floored([0.0, 0.0, 0.0], 0.5) == [0.0, 1.0, 1.0]  # no signal: uniform


def test_an_auto_probe_whose_answer_is_another_probes_subject_is_dropped():
    made = [("The Republic of", "Veltoria"), ("The capital of Veltoria is", "Marnhold")]
    assert examples.without_subject_answers(made) == [("The capital of Veltoria is", "Marnhold")]
    assert examples.without_subject_answers(made[1:]) == made[1:]
