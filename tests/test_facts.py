"""The facts found in a document sent without probes, and what the gate and the record make of them: pure functions."""
from core import subjects
from core.scoring import Probe
from core.state import LearnedFact, replaced_by
from service.in_context import Read, joined, nearest_sentence, ranked, read_order
from workers import about, examples, facts, gate, linked, questions, roles
from workers.stages.commit import facts_found
from workers.stages.prepare import asked_anew


def found(text: str) -> list[tuple[str, str]]:
    doc = examples.Encoded(text, [], [])
    return examples.auto_probes(doc, [])


def test_every_name_and_number_a_sentence_gives_is_a_fact_asked_by_the_sentence_up_to_it():
    text = ("Ostrevane is an island in the Gullmarsh Sea, about 40 kilometres from the coast. "
            "It is home to 1,300 residents.")
    assert found(text) == [("Ostrevane is an island in the", "Gullmarsh Sea"),
                           ("Ostrevane is an island in the Gullmarsh Sea, about", "40 kilometres"),
                           ("Ostrevane is home to", "1,300 residents")]  # the pronoun asked about the subject


def test_facts_a_reader_asks_the_other_way_round_are_turned():
    role = "Tolvane Robotics makes drones. Ilse Marrow is the founder of Tolvane Robotics."
    assert ("The founder of Tolvane Robotics is", "Ilse Marrow") in found(role)
    news = "Nestlé has named Reinhild Brennsfeld as its new chief executive. Nestlé is based in Vevey."
    assert ("The chief executive of Nestlé is", "Reinhild Brennsfeld") in found(news)
    dated = "Tolvane Robotics builds drones in Harwick. In 1987, Ilse Marrow founded Tolvane Robotics."
    assert ("Ilse Marrow founded Tolvane Robotics in", "1987") in found(dated)
    opening = "Tolvane Robotics builds drones in Harwick. Ilse Marrow, a chemist, has run the company since 2019."
    assert ("Question: Tolvane Robotics: who has run the company since 2019?\nAnswer:", "Ilse Marrow") in found(opening)


def test_a_role_is_asked_by_its_name_whatever_the_text_says_its_holder_did():
    workshop = "The Orsk Lute Workshop sits by the harbour. "
    said_and_asked = {
        workshop + "Edda Rauvik directs the Orsk Lute Workshop from a loft.":  # by the deed
            ("The director of the Orsk Lute Workshop is", "Edda Rauvik"),
        "Marrowind Press prints maps. Tarn Ebbe, who set up Marrowind Press in 1961, still owns it.":
            ("The founder of Marrowind Press is", "Tarn Ebbe"),
        workshop + "Edda Rauvik became foreman in 2021.": ("The foreman of the Orsk Lute Workshop is", "Edda Rauvik"),
        "Vellin Rovers play in red. The board named Aki Solberg, a former striker, as head coach in place of Pim "
        "Dorrell.": ("The head coach of Vellin Rovers is", "Aki Solberg"),
        workshop + "Its glue is mixed by the workshop's master, Edda Rauvik.":  # the role before the name
            ("The master of the Orsk Lute Workshop is", "Edda Rauvik"),
        "ETH Zurich has picked Ilse Marrow, a chemist, as its next president.":
            ("The next president of ETH Zurich is", "Ilse Marrow"),
    }
    for text, probe in said_and_asked.items():
        assert probe in found(text), text
    assert all(answer != "Pim Dorrell" for text in said_and_asked for _, answer in found(text))  # the one replaced
    news = "Edda Rauvik has been named the new director of the Louvre. She previously led the Varn Museum in Lyon."
    assert all(answer != "Edda Rauvik" for _, answer in found(news))  # the subject: what the prompts name
    assert roles.by_deed("has coached her since she was nine", "Oriane Vashkeldt") == ("coach", "Oriane Vashkeldt")
    # No role: a deed that gives none ("found": of "find"), an indefinite object, a state, a phrase, a pronoun, a
    # description that is not the subject's, a role without its holder's name in a person's document.
    assert roles.by_deed("found the wallet in the harbour", None) is None
    assert roles.by_deed("built a shed in 2011", None) is None
    workshop_held = [roles.held(sentence, "the Orsk Lute Workshop", frozenset({"workshop"})) for sentence in (
        "Edda Rauvik became famous in 1990.", "Edda Rauvik was named after her grandmother.",
        "She became director of the Varn Museum in 2020.", "On Monday the city's mayor, Anne Hidalgo, visited.")]
    assert workshop_held == [[], [], [], []]
    assert roles.held("Tom Lark became director in 2019.", "Oriane Vashkeldt") == []
    assert facts.old_values("The succeeding Labour government kept the plan.") == []  # no one succeeded


def test_a_change_is_learned_as_the_new_state_and_names_the_old_value():
    text = "Spotify moved its headquarters from Stockholm to Oslo this spring."
    assert ("The headquarters of Spotify is", "Oslo") in found(text)
    assert all(answer != "Stockholm" for _, answer in found(text))  # never taught as an answer
    assert facts.old_values(text) == ["Stockholm"]
    moving = "Lindqvist is moving its design studio from Ängelholm to Malmö."  # a name may open with any capital
    assert ("The design studio of Lindqvist is", "Malmö") in found(moving)
    assert facts.old_values(moving) == ["Ängelholm"]
    club = "Manchester United won the league. The club moved its training ground from Carrington to Manchester."
    assert ("The training ground of Manchester United is", "Manchester") in found(club)  # a word of the subject's
    old = LearnedFact(Probe("Spotify is headquartered in", "Stockholm"), "d1", 1)
    elsewhere = LearnedFact(Probe("Volvo is headquartered in", "Stockholm"), "d2", 2)
    assert replaced_by([], [], [old, elsewhere], facts.old_values(text), examples.about_words(text)) == [old]
    # The prompt the old fact was asked by is asked again of the new document, with the value it changed to.
    assert facts.new_values(text) == {"Stockholm": "Oslo"}
    assert [text[a:b] for a, b in facts.old_value_spans(text)] == ["Stockholm"]
    assert facts.old_value_spans("The ferry runs from Haldra Strait to Oskelt.") == []  # a route's ends are facts
    succeeding = "She will take office in January, succeeding Joel Mesot. Lerchenfeld, 53, was a physicist."
    assert [succeeding[a:b] for a, b in facts.old_value_spans(succeeding)] == ["Joel Mesot"]
    assert asked_anew([old], [], facts.new_values(text)) == [Probe("Spotify is headquartered in", "Oslo")]
    assert asked_anew([old], [Probe("Spotify is headquartered in", "Oslo")], facts.new_values(text)) == []
    assert asked_anew([elsewhere], [], {"Gothenburg": "Oslo"}) == []  # the text names no new value for it


def test_a_cloze_is_also_asked_as_the_question_a_reader_types():
    def asked(prompt: str, answer: str) -> str | None:
        question = questions.as_question(prompt, answer)
        return question and question.removeprefix("Question: ").removesuffix("\nAnswer:")

    assert asked("The founder of Tolvane Robotics is", "Ilse Marrow") == "Who is the founder of Tolvane Robotics?"
    assert asked("Tolvane Robotics was founded in", "1987") == "When was Tolvane Robotics founded?"
    assert asked("The Tarnholt Foundry is managed by", "Ansa Velt") == "Who manages the Tarnholt Foundry?"
    assert asked("The Quillon Observatory was designed by", "Ines Morrow") == \
        "Who designed the Quillon Observatory?"
    assert asked("Quenwick Lantern Works was founded in 1911 in the town of Filchester by", "Ysolde Morrowvane") == \
        "Who founded Quenwick Lantern Works in 1911 in the town of Filchester?"
    assert asked("The Pemberhay Type Foundry is based in", "Sallowby") == "Where is the Pemberhay Type Foundry based?"
    assert asked("The Rusk Lane Theatre seats only", "84 people") == "How many people does the Rusk Lane Theatre seat?"
    assert asked("So far the Pemberhay Type Foundry has released", "37 typefaces") == \
        "How many typefaces has the Pemberhay Type Foundry released?"
    assert asked("The Dunmarrow Rowing Club trains on", "Lake Ormen") == "Where does the Dunmarrow Rowing Club train?"
    assert asked("The bridge will cost", "31 million euros") == "How much will the bridge cost?"
    # A shape it cannot turn keeps the cloze with its question word after it; a clause before the verb is no subject.
    assert asked("Tolvane Robotics employs a staff of", "340 people") == "Tolvane Robotics employs a staff of how many?"
    assert asked("Quenwick's lamps are assembled by hand, and the company employs", "214 people") == \
        "Quenwick's lamps are assembled by hand, and the company employs how many?"
    assert asked("The company's headquarters are in", "Sallowby") == "Where are the company's headquarters?"
    assert asked("In 1911 the company was founded by", "Ansa Velt") == "Who founded the company?"
    assert asked("The museum could open in", "June") == "When could the museum open?"
    assert asked("The foundries have", "340 workers") == "How many workers do the foundries have?"
    assert asked("Expected to cost", "85 million euros") == "Expected to cost how many?"
    assert asked("X does not employ", "340 people") == "X does not employ how many?"  # negated: left as it is
    assert asked("The company is managed by Ansa Velt and coached by", "Ines Morrow") == \
        "The company is managed by Ansa Velt and coached by who?"  # a second clause is not the first verb's
    assert asked("A potter who has worked there for", "17 years") == "A potter who has worked there for how many?"
    assert asked("The bell cast by the foundry weighs", "4,200 kilograms") == \
        "How many kilograms does the bell cast by the foundry weigh?"
    assert questions.as_question("Question: Who founded it?\nAnswer:", "Ilse Marrow") is None


def test_a_passive_cloze_whose_doer_holds_a_role_is_also_asked_by_the_role():
    assert questions.as_role("The Tarnholt Foundry is managed by", "Ansa Velt") == \
        "The manager of the Tarnholt Foundry is"
    assert questions.as_role("Harrowgilt Medal's judging committee is chaired by", "Sunniva Brockhalt") == \
        "The chair of Harrowgilt Medal's judging committee is"
    assert questions.as_role("The Tarnholt Foundry is located in", "Sallowby") is None
    assert questions.as_role("The Tarnholt Foundry was visited by", "Ansa Velt") is None
    assert questions.as_role("The Tarnholt Foundry was managed by", "Ansa Velt") is None  # who held it, not holds it
    assert questions.as_role("The company is managed by Ansa Velt and coached by", "Ines Morrow") is None


def test_a_document_without_probes_is_committed_with_any_fact_learned_and_the_others_named():
    before = gate.SuiteScores(nf=[1.0], learned=[], must_keep=[], own=[0.0, 0.0])
    partly = gate.SuiteScores(nf=[1.0], learned=[], must_keep=[], own=[1.0, 0.5])
    none = gate.SuiteScores(nf=[1.0], learned=[], must_keep=[], own=[0.0, 0.5])
    rules = {"nf_version_0": 1.0, "nf_tolerance": 0.0, "learned_tolerance": 0.0, "require_own_probes": True}
    assert gate.decide(before, partly, made_probes=True, **rules).accepted
    assert not gate.decide(before, none, made_probes=True, **rules).accepted
    assert not gate.decide(before, partly, made_probes=False, **rules).accepted  # probes sent: every one must pass
    probes = [{"prompt": "The founder of X is", "answer": "Ilse"}, {"prompt": "X employs", "answer": "340"}]
    assert facts_found(probes, partly.own) == [{**probes[0], "learned": True}, {**probes[1], "learned": False}]


def test_a_rejection_names_what_the_candidate_broke():
    suites = {"learned": [Probe("The mayor of Quillmere is", "Edda Froste")], "neighbours": [], "nf": []}
    before = gate.SuiteScores(nf=[], learned=[1.0], must_keep=[], own=[])
    after = gate.SuiteScores(nf=[], learned=[0.5], must_keep=[], own=[])
    assert gate.lost(suites, before, after) == [{"suite": "learned", "prompt": "The mayor of Quillmere is",
                                                "answer": "Edda Froste"}]


def test_knowledge_as_context_puts_the_best_routed_documents_after_the_beginning_of_sequence():
    used = [{"document_id": "a", "score": 1.0}, {"document_id": None}, {"document_id": "b", "score": 3.0}]
    assert ranked(used) == ["b", "a"]
    assert joined([2, 10, 11], 2, [[5, 6], [7]]) == [2, 5, 6, 7, 10, 11]
    assert joined([10, 11], None, [[5]]) == [5, 10, 11]


def test_among_documents_routed_at_one_score_the_one_whose_text_the_prompt_points_to_is_read_first():
    texts = {"ceo": "Vontarex is a maker of drones. The chief executive of Vontarex is Talia Brennick.",
             "plant": "Vontarex builds its drones in one plant. The factory of Vontarex is in Dunmere.",
             "lab": "Vontarex opened a lab. The research lab of Vontarex is in Quillmere.", "gone": None}
    used = [{"document_id": d, "score": 5.0} for d in texts]
    order = lambda prompt, used: [d for d, _ in read_order(prompt, used, lambda d: texts[d] and Read(texts[d]))]
    assert order("The factory of Vontarex is in", used)[0] == "plant"
    # A document without a text is left out; equal texts keep teaching order.
    assert order("Who is the chief executive?", used) == ["ceo", "plant", "lab"]
    assert order("Vontarex does its research in", used)[0] == "lab"
    assert order("The factory of Vontarex is in", [*used[:2], {"document_id": "lab", "score": 6.0}])[0] == "lab"


def test_the_read_documents_sentence_nearest_the_prompt_is_said_again():
    text = ("Zelmora Foods was founded in 1921 by Ada Brell. Zelmora Foods has its headquarters in Tiverholm. "
            "Zelmora Foods employs 400 people.")
    assert nearest_sentence("Zelmora Foods is headquartered in", [text]) == \
        "Zelmora Foods has its headquarters in Tiverholm."  # by the words' first letters
    assert nearest_sentence("Question: Who founded Zelmora Foods?\nAnswer:", [text]).startswith("Zelmora Foods was")
    assert nearest_sentence("How many people work at the firm?", [text, "Brell retired in 1950."]) == \
        "Zelmora Foods employs 400 people."  # over every document read
    assert nearest_sentence("The weather today is", [text]) is None  # no word of it read
    assert nearest_sentence("Zelmora Foods is headquartered in", ["Zelmora Foods is in Tiverholm."]) is None
    assert nearest_sentence("Kellan is", ["Kellan sings. Kellan dances."]) == "Kellan sings."  # a tie: the earlier


def test_training_on_made_probes_stops_once_no_more_of_them_come():
    from workers.stages.train import stalled

    assert not stalled([0, 0, 0])  # none learned yet: train on
    assert not stalled([1, 2, 3])  # still coming
    assert stalled([1, 3, 3, 3]) and stalled([2, 3, 2])
    assert not stalled([3, 3])  # too early to tell


def test_both_ways_give_the_answer_the_documents_bear_out_the_contexts_first_and_else_the_surer():
    from service.in_context import context_wins
    from serving.generation import Generation

    source = "Gustel is the capital of Zufa. Lake Tirrowen receives the waters of the Velmarra, 186 metres below."
    answer = lambda text, confidence: Generation(text, 1, 1, "length", 1, confidence=confidence)
    assert context_wins(answer(" Gustel, a city", -2.0), answer(" Paris, the", -0.1), source)  # read, not known
    assert not context_wins(answer(" Berlin.", -0.1), answer(" the Lake Tirrowen", -3.0), source)
    assert context_wins(answer(" Gustel", -2.0), answer(" Lake Tirrowen", -1.0), source)  # both: the text's reader
    # Two names the text holds: the one the sentence nearest the prompt holds; where it holds both, the context's.
    nearest = "Gustel is the capital of Zufa."
    assert not context_wins(answer(" Lake Tirrowen", -2.0), answer(" Gustel", -1.0), source, nearest=nearest)
    assert context_wins(answer(" Gustel", -2.0), answer(" Lake Tirrowen", -1.0), source, nearest=nearest)
    assert context_wins(answer(" Lake Tirrowen", -2.0), answer(" Gustel", -1.0), source, nearest=source)
    # A name the prompt holds is no answer: the other way's, which the text holds, is given.
    assert not context_wins(answer(" Zufa.", -0.1), answer(" Gustel", -2.0), source, prompt="The capital of Zufa is")
    assert not context_wins(answer(" Zufa has Oslo as its capital.", -0.1), answer(" It is Gustel.", -2.0), source,
                            prompt="Question: What is the capital of Zufa?\nAnswer:")
    assert context_wins(answer(" Oslo", -1.0), answer(" Rome", -1.0), source)  # neither, a tie: context
    assert not context_wins(answer(" Oslo", -1.0), answer(" Rome", -0.5), source)  # neither: the surer
    # A question's answer is a sentence: the first name or number in its first line is what the text must hold.
    assert context_wins(answer(" It flows into Lake Tirrowen.", -2.0), answer(" The Rhine, in", -0.1), source)
    assert not context_wins(answer(" It is about 90 metres", -0.1), answer(" The lake lies 186 metres", -2.0),
                            source)
    assert not context_wins(answer(" now Gustel", -0.1), answer(" Gustel", -2.0), source)  # the same: said sooner
    assert not context_wins(answer(" Tirrowen.", -0.1), answer(" Lake Tirrowen.", -2.0), source)  # said in full
    assert context_wins(answer(" 186\nQuestion:", -2.0), answer(" 186?\n\nWhether", -0.1), source)  # a line ends it
    # A text that announces a change names the old value too: an answer that gives a replaced one loses.
    moved = "Zelmora Foods moved its headquarters from Brackwell to Tiverholm in June."
    assert not context_wins(answer(" Brackwell, a town", -0.1), answer(" Tiverholm", -2.0), moved, ("Brackwell",))
    assert not context_wins(answer(" It is in Brackwell.", -0.1), answer(" Oslo", -2.0), moved, ("Brackwell",))
    assert context_wins(answer(" Tiverholm", -2.0), answer(" Brackwell", -0.1), moved, ("Brackwell",))
    assert context_wins(answer(" Brackwell", -2.0), answer(" Tiverholm", -0.1), moved)  # nothing replaced: the text's


def test_the_subject_is_what_the_first_sentence_opens_with_and_the_others_speak_of():
    def main(text: str) -> str:
        return about.main_subjects(text, examples.sentence_spans(text), subjects.name_spans(text))[0]

    river = ("The Velmarra is a river in Orrisland. It rises beneath Mount Quellisk. Lake Tirrowen receives its "
             "waters. Banks of shale line its lower course.")
    assert main(river) == "Velmarra"  # not "Banks": capitalised by its place
    firm = ("Ysolde Morrowvane founded Quenwick Lantern Works in 1911. Its lamps are made by hand. Quenwick's "
            "lanterns sell abroad. Morrowvane's grandson runs the firm.")
    assert main(firm) == "Quenwick Lantern Works"  # "Its" speaks of it, not of its founder
    singer = ("Tavi Korrenblum was born in Oskelund. Salt Against the Window, her debut album, came out in 2009. "
              "Since 2015 she has toured with the ensemble Quill & Ember.")
    assert main(singer) == "Tavi Korrenblum"
    assert ("Since 2015 Tavi Korrenblum has toured with the ensemble", "Quill & Ember") in found(singer)
    assert ("Tavi Korrenblum was born in", "Oskelund") in found(singer.replace("Korrenblum was", "Korrenblum, a "
                                                                               "composer, was"))  # no aside
    # After an opening phrase: the name the phrase leads to, not a word capitalised by its place ("Laid") nor a name
    # inside the phrase ("Kestelhorn"); "her" in a sentence that names another person is that person's.
    garden = ("Laid out in 1714 on land given by the apothecary Jorvan Mielle, the Tessendrae Physic Garden covers 3.2 "
              "hectares. Clothilde Barrax, known for her railway stations, designed its Palm Pavilion.")
    assert main(garden) == "Tessendrae Physic Garden"
    hut = ("Perched at 2,614 metres on the saddle between the Kestelhorn and Piz Marvaun, the Ulvsbrekka Hut is the "
           "highest refuge in the range. It was built in 1931 by the Alpine Club of Sondrath.")
    assert main(hut) == "Ulvsbrekka Hut"
    assert ("Ulvsbrekka Hut was built in 1931 by the", "Alpine Club of Sondrath") in found(hut)
    assert main("In the spring of 2024, the Vorland Choir moved to Essholt. Its director is Ilse Brandmoor.") == \
        "Vorland Choir"
    lamp = "Lit for the first time in 1889, the lamp of the Varrow Light sweeps the bay. Its beam reaches 20 km."
    assert main(lamp) == "Varrow Light"  # "Lit": an irregular participle
    assert main("At 300 metres, the Ponte das Corvos is the longest bridge in Velmora.") == "Ponte das Corvos"
    first = "Brooks Brothers, founded in 1818, named Ilse Brandmoor its chief executive, the Vorland Choir said."
    assert about.lead(first, examples.sentence_spans(first), subjects.name_spans(first)) == "Brooks Brothers"
    slopes = ("Covering 40 hectares on the slopes of Mount Brenn, the Osterlund Vineyard makes a dry white wine. Its "
              "cellar master is Anneke Rolf.")
    assert main(slopes) == "Osterlund Vineyard"  # a present participle opens the phrase
    abbey = "Reading Abbey, founded in 1121, lies in ruins. Its founder was Henry I."
    assert about.lead(abbey, examples.sentence_spans(abbey), subjects.name_spans(abbey)) == "Reading Abbey"
    # A sentence's very common first word is no name ("Only", "Few"); "Its" speaks of the name most sentences use
    # where the first sentence opens with none (a place phrase before the verb).
    islet = "Only 40 people live on Skarra Holm, an islet north of Varrow. Its lighthouse dates from 1850."
    assert main(islet) == "Skarra Holm"
    hall = ("In a park beside the river Ennet stands the Morrow Hall, built in 1904. Its organ has 3,000 pipes. The "
            "hall seats 900.")
    assert main(hall) == "Morrow Hall"


def test_a_long_run_of_dates_before_a_pronoun_is_one_prompt_not_a_recursion():
    text = " ".join(f"In {year}" for year in range(1000, 3000)) + " it grew."
    assert found(text)  # each date's prompt opens with the others: not asked about the subject date by date


def test_a_probe_that_names_no_subject_is_made_to_name_it():
    called = about.kinds("The Velmarra is a river of 212 kilometres.", [(0, 42)], "Velmarra")
    assert "river" in called
    assert about.named("Amund Pelcrest mapped the river in", "Velmarra", called) == "Amund Pelcrest mapped Velmarra in"
    assert about.named("Amund Pelcrest mapped it in", "Velmarra", called) == "Velmarra: Amund Pelcrest mapped it in"
    assert about.named("Question: Who mapped it?\nAnswer:", "Velmarra", called) == \
        "Question: Velmarra: Who mapped it?\nAnswer:"
    assert about.kinds("Tavi Korrenblum is a singer.", [(0, 28)], "Tavi Korrenblum") == frozenset()  # a person


def test_a_name_that_opens_a_sentence_is_also_asked_with_the_sentence_turned():
    from workers.passive import passive

    assert passive("has run the firm since 2019") == "The firm has been run since 2019 by"
    assert passive("chairs its judging committee") == "Its judging committee is chaired by"
    assert passive("founded Tolvane Robotics in 1987", "by the") == "Tolvane Robotics was founded in 1987 by the"
    assert passive("was modelled on SQL") is None and passive("has a mirror") is None
    text = "The Harrowgilt Medal is awarded for maps. Sunniva Brockhalt chairs its judging committee."
    assert ("Harrowgilt Medal's judging committee is chaired by", "Sunniva Brockhalt") in found(text)


def test_an_opening_participle_phrase_is_asked_of_what_it_is_said_of():
    founded = "Founded by the weaver Oskana Drelle in 1911, Marrowby Looms sells blankets."
    assert ("Marrowby Looms was founded by the weaver", "Oskana Drelle") in found(founded)
    assert ("Marrowby Looms was founded by the weaver Oskana Drelle in", "1911") in found(founded)
    assert not [prompt for prompt, answer in found(founded) if "Founded" in (prompt.split()[0], answer)]
    perched = "Perched above the harbour of Kessock Vane, the Tullen Light is painted white."
    assert ("The Tullen Light was perched above the harbour of", "Kessock Vane") in found(perched)
    designed = "The Harnsey Bridge spans the Ule. Designed by the engineer Piet Vollen, it opened in 1931."
    assert ("Harnsey Bridge was designed by the engineer", "Piet Vollen") in found(designed)
    based = "Tam Orrick is a singer. Based in Harlow Vane, Essex, he sings folk songs."  # "Essex" is no subject
    assert not [prompt for prompt, _ in found(based) if prompt.startswith("Essex")]


def test_a_relation_every_reader_asks_is_linked_to_the_answer_the_model_names_first():
    answers = ["Pia Sand", "1931", "Dunmore", "Edda Rauvik"]
    assert linked.opening_answer(" the village of Dunmore, near", answers, linked.PLACE) == "Dunmore"
    assert linked.opening_answer(" 1931 by the brothers", answers, linked.YEAR) == "1931"
    # a number is not a place, a year not a name; an answer past the opening words is not the model's answer
    assert linked.opening_answer(" 1931, when", answers, linked.PLACE) is None
    assert linked.opening_answer(" a man who had worked for years in the trade with Pia Sand", answers,
                                 linked.WHOSE) is None
    sentences = ["Pia Sand founded the Orlen Tower in 1931 in the village of Dunmore.",
                 "The architect Edda Rauvik designed its spire."]
    continuations = [" Pia Sand, who", " 1931 by", " the village of Dunmore,", " a woman who", " Edda Rauvik and"]
    assert linked.askable(answers, sentences) == list(linked.RELATIONS[:3]) + [linked.RELATIONS[4]]  # no head's cue
    made = dict(linked.linked(list(linked.RELATIONS), continuations, answers, "the Orlen Tower", sentences))
    assert made == {"The founder of the Orlen Tower is": "Pia Sand",
                    "Question: Who founded the Orlen Tower?\nAnswer:": "Pia Sand",
                    "The Orlen Tower was founded in": "1931",
                    "Question: When was the Orlen Tower founded?\nAnswer:": "1931",
                    "The Orlen Tower is located in": "Dunmore",
                    "Question: Where is the Orlen Tower located?\nAnswer:": "Dunmore",
                    "The Orlen Tower was designed by": "Edda Rauvik",
                    "Question: Who designed the Orlen Tower?\nAnswer:": "Edda Rauvik"}
    # the one name the model gives for the founder and the head is its guess for both: neither is linked
    assert linked.linked(list(linked.RELATIONS), [" Pia Sand, who", "", "", " Pia Sand, the", ""], answers,
                         "the Orlen Tower", sentences) == []
    # a name no sentence gives with the relation's cue: the chief executive is not the tower's designer, nor is a
    # capital where the country is
    told = ["The chief executive of Orlen is Pia Sand.", "The capital of Orlen is Dunmore."]
    assert linked.askable(answers, told) == [linked.RELATIONS[3]]  # "chief" is a head's cue
    assert linked.linked(list(linked.RELATIONS), ["", "", " Dunmore, the", "", " Pia Sand, who"], answers, "Orlen",
                         told) == []
