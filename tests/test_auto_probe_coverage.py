"""How the benchmark counts a made probe as asking for a hidden fact (bench/teach.py: same_answer): no model."""
from bench.teach import same_answer


def probe(prompt: str, answer: str) -> dict[str, str]:
    return {"prompt": prompt, "answer": answer}


def test_a_count_asked_with_what_it_counts_asks_for_the_count():
    hidden = probe("Kestlebrook Instruments employs", "530")
    assert same_answer(probe("Kestlebrook Instruments employs", "530 people"), hidden)
    assert same_answer(probe("Kestlebrook Instruments employs", "530"), hidden)
    assert not same_answer(probe("Kestlebrook Instruments employs", "5300 people"), hidden)
    assert not same_answer(probe("Kestlebrook Instruments was founded in", "1530"), hidden)


def test_a_name_goes_on_only_where_the_hidden_prompt_ends_with_its_first_words():
    hidden = probe("The operating system is called Windows", "Halcyon")
    assert same_answer(probe("The operating system is called", "Windows Halcyon"), hidden)
    assert not same_answer(probe("The firm is based in", "Glasgow Halcyon"), hidden)
    assert not same_answer(probe("The firm is based in", "Glasgow"), probe("Celtic play in", "Glasgow Celtic"))
