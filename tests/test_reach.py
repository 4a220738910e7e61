"""`ckl bench reach` (no model): the key a document sent without probes is learned with reaches what its made
probes ask, and the neighbour prompts that reach a document are counted."""
from bench.reach import shares
from core.settings import Settings

NEWS = ("Lisbon has a new mayor: Tomé Varrancho was sworn in at the city hall on Monday. Varrancho has promised to "
        "plant 40,000 trees across the Portuguese capital.")
INVENTED = "Brannoch Ferries was founded in 1931 by the boatwright Ailsa Munroe."


def asked(prompt: str, answer: str) -> dict[str, str]:
    return {"prompt": prompt, "answer": answer}


def test_the_learned_key_reaches_a_known_subjects_news_and_a_neighbour_sharing_its_words_is_counted():
    mayor = {"probe": asked("The mayor of Lisbon is", "Tomé Varrancho"),
             "paraphrase": asked("Lisbon's city hall is now headed by", "Tomé Varrancho"),
             "question": asked("Question: Who is the mayor of Lisbon?\nAnswer:", "Tomé Varrancho")}
    founder = {"probe": asked("Brannoch Ferries was founded by", "Ailsa Munroe")}
    neighbours = ["Lisbon is the capital city of", "The river that flows through Lisbon is the"]

    out = shares([NEWS, INVENTED], [(0, mayor), (1, founder)], Settings().routing_threshold, neighbours)

    # The text alone keys no known subject: only the invented firm's cloze reaches its document by it.
    assert out["rel"]["text_key"] == 1 and out["gen"]["text_key"] == 0 and out["qa"]["text_key"] == 0
    # The made probes ask Lisbon about its mayor: every form of that fact reaches the news, as the firm's cloze does.
    assert (out["rel"]["learned_key"], out["gen"]["learned_key"], out["qa"]["learned_key"]) == (2, 1, 1)
    # "capital", from the made probes' question about the trees, routes the capital's neighbour prompt; the river's
    # reaches nothing. A pending document is read by the known subject's name alone: both.
    assert out["neighbours_reaching"] == {"text_key": 0, "reading_key": 2, "learned_key": 1, "of": 2}
