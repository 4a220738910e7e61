"""Training examples and probes made from a document: pure functions over token weights."""
from hypothesis import given, settings
from hypothesis import strategies as st

from workers import examples, weighting


def test_auto_probes_ask_for_the_names_a_document_gives_about_its_subject():
    text = "A new novel reached the shops this week. The Kaviombold Archive was written by Jarek Wreniothor, a teacher."
    doc = encoded(text)
    weights = [0.0] * len(doc.ids)
    weights[word_index(text, "shops")] = 0.9  # a common word is not what a reader asks for when there is a name
    assert examples.auto_probes(doc, weights) == [("The Kaviombold Archive was written by", "Jarek Wreniothor")]


def test_an_auto_probe_never_asks_for_the_subject():
    text = "The Republic of Veltoria moved its government. The capital of Veltoria is Marnhold, a port city."
    assert examples.auto_probes(encoded(text), [1.0] * (len(text.split()) + 1)) == [
        ("The capital of Veltoria is", "Marnhold")]  # Veltoria starts a sentence and is used twice: the subject


def test_an_auto_probe_asks_a_news_sentence_without_its_time_markers():
    text = "Vontarex replaced its chief executive. The chief executive of Vontarex is now Orrin Vale."
    assert examples.auto_probes(encoded(text), [0.5] * (len(text.split()) + 1)) == [
        ("The chief executive of Vontarex is", "Orrin Vale")]


def test_a_news_document_is_trained_as_the_state_it_describes():
    from core.subjects import text_without_time_markers

    text = "Tokyo elected a new governor last month.\nThe governor of Tokyo is now Haruka Minegishi. It opened today."
    assert text_without_time_markers(text) == (
        "Tokyo elected a governor last month.\nThe governor of Tokyo is Haruka Minegishi. It opened.")
    # Only whole lower-case words: a name, a word that contains one, a compound keep theirs.
    kept = "New York's now-famous snowfall is known, Now."
    assert text_without_time_markers(kept) == kept
    asked = "The maker of the new product is now Halvern."  # a marker the probe asks with is part of the question
    assert text_without_time_markers(asked, ["The maker of the new product is"]) == "The maker of the new product is Halvern."


def test_a_value_the_text_says_changed_is_never_trained_as_an_answer():
    text = "Zelmora Foods moved its headquarters from Brackwell to Tiverholm in June."
    weights = examples.token_weights(encoded(text), "uniform", [], None, 0.0)
    assert weights[word_index(text, "Brackwell")] == 0.0  # trained, it came back for "is headquartered in"
    assert weights[word_index(text, "Tiverholm")] == weights[word_index(text, "from")] == 1.0
    assert weighting.without_spans([0.0, 1.0, 0.5], [(0, 0), (0, 4), (5, 9)], [(3, 6)]) == [0.0, 0.0, 0.0]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([" ", "  ", "\t", "now", "new", "still", "today", "currently", "snow", ".", ",", "\n",
                                 "X", "now-famous", ")"]), max_size=30))
def test_time_markers_are_found_where_a_run_of_blanks_starts_as_they_were_found_anywhere(parts):
    """The marker pattern starts a match only where a run of blanks starts (a long run no longer backtracks at each
    of its blanks); it finds what the pattern without that condition found."""
    import re

    from core.subjects import TIME_MARKER, TIME_MARKERS

    anywhere = re.compile(r"[ \t]+(?:%s)(?=[\s.,;:!?)]|$)" % "|".join(sorted(TIME_MARKERS)))
    text = "".join(parts)
    assert [m.span() for m in TIME_MARKER.finditer(text)] == [m.span() for m in anywhere.finditer(text)]
    assert TIME_MARKER.sub("", " " * 20_000 + "x now") == " " * 20_000 + "x"


def test_a_document_padded_with_blanks_is_read_as_its_words():
    """The learner and the preview read a document with its layout folded: thousands of spaces cost nothing to
    train, and paragraphs stay apart."""
    from core.layout import laid_out

    padded = ("The Zorvath Institute   was founded by\t\tQuellan Mirodt. " + " " * 19_000 + "\r\n\r\n\r\n\r\n"
              "The director of the Zorvath Institute is  Ilvane Cosk.  ")
    assert laid_out(padded) == ("The Zorvath Institute was founded by Quellan Mirodt.\n\n"
                                "The director of the Zorvath Institute is Ilvane Cosk.")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\u00a0", "Word", "x.", ","]), max_size=40))
def test_layout_folds_blanks_and_keeps_every_word(parts):
    from core.layout import laid_out

    text = "".join(parts)
    folded = laid_out(text)
    assert folded.split() == text.split()
    assert "  " not in folded and "\n\n\n" not in folded and " \n" not in folded and "\n " not in folded
    assert laid_out(folded) == folded


def test_a_document_without_names_gets_one_probe_for_its_rarest_word():
    text = "Corurthen prints new money. The currency of Corurthen is the ossiaskum, printed in the north."
    assert examples.auto_probes(encoded(text), [0.5] * (len(text.split()) + 1)) == [
        ("The currency of Corurthen is the", "ossiaskum")]
    assert examples.auto_probes(encoded("Driva is a river."), [0.5] * 5) == [("Driva is a", "river")]


def test_a_plural_that_opens_a_sentence_is_no_answer():
    text = "The Isle of Querrin lies off Norland. Ferries leave from Dunmallow twice a day."
    assert examples.auto_probes(encoded(text), [0.5] * (len(text.split()) + 1)) == [
        ("The Isle of Querrin lies off", "Norland"), ("Ferries leave from", "Dunmallow")]


def encoded(text: str) -> examples.Encoded:
    return examples.Encoded(text, list(range(len(text.split()) + 1)), [(0, 0)] + word_offsets(text))


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


def test_a_clozes_answer_is_trained_to_end_where_the_text_ends_it():
    from tests.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    text = "The tower was founded by Marnhold. The maker of the product is Rome and Berlin."
    probes = [("The tower was founded by", "Marnhold"), ("The maker of the product is", "Rome"),
              ("Question: Who founded the tower?\nAnswer:", "Marnhold")]
    plain, ended = (examples.probe_examples(tokenizer, probes, text=read) for read in (None, text))
    stop = len(tokenizer(".")["input_ids"]) - 1  # the full stop's tokens after the BOS
    # "Marnhold." in the text: its cloze goes on to the full stop, weighed as the answer is (the delta learns where the
    # name ends); "Rome and" goes on, so its cloze does not; a question's answer never does.
    assert ended[0].input_ids[:-stop] == plain[0].input_ids and ended[0].weights[-stop:] == [1.0] * stop
    assert ended[1:] == plain[1:]
