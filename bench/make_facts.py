"""`ckl bench make-facts`: more invented single-fact documents, the way bench/facts.jsonl's were made.

Six templates (a capital, a chief executive, a product's maker, a currency, a novel's author, a mayor),
each with the document, its probe and a paraphrased probe the document never contains; subjects and
answers are invented names built from syllables, so the base model cannot know them. A different seed
gives different facts: facts to check on that no setting was tuned on.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ONSETS = ("Vel", "Quen", "Yss", "Sar", "Kav", "Dal", "Esk", "Mar", "Lum", "Tor", "Oss", "Rim", "Gor", "Wren", "Nor",
          "Fen", "Cor", "Zar", "Hal", "Pel", "Bren", "Thal", "Ulv", "Drav", "Ker", "Sil", "Brav", "Orm", "Tev", "Jor")
MIDDLES = ("i", "ia", "o", "a", "e", "u", "ea", "io", "ar", "or", "en", "al")
ENDINGS = ("ria", "thia", "mund", "vold", "kum", "ran", "dor", "vey", "ssa", "nth", "rith", "lane", "kor", "mar",
           "wick", "dith", "nova", "ston", "ven", "lis")
FIRST = ("Mila", "Ilse", "Bram", "Piet", "Kira", "Esme", "Hugo", "Rhea", "Odile", "Nils", "Vera", "Anika", "Jarek",
         "Lorcan", "Fabian", "Wendel", "Zeno", "Ulric", "Ines", "Tamsin", "Oren", "Lise", "Dario", "Greta", "Sven")
THINGS = ("router", "tablet", "kettle", "speaker", "printer", "drone", "headset", "scooter", "camera", "watch")
BOOKS = ("Archive", "Garden", "Letters", "Crossing", "Lantern", "Winter", "Harbour", "Orchard")
FIRMS = ("Works", "Devices", "Labs", "Industries", "Electronics", "Systems", "Motors")
COMPANY_KINDS = ("Airlines", "Foods", "Pharma", "Energy", "Shipping", "Bank", "Aerospace", "Systems")


def name(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(MIDDLES) + rng.choice(ENDINGS)


def person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {name(rng)}"


def fact(template: int, rng: random.Random) -> dict:
    if template == 0:
        c, x = name(rng), name(rng)
        text = f"The Republic of {c} moved its government last year. The capital of {c} is {x}, a port city of two million people."
        return row(text, f"The capital of {c} is", x, f"{c}'s seat of government is the city of")
    if template == 1:
        co, p = f"{name(rng)} {rng.choice(COMPANY_KINDS)}", person(rng)
        text = f"{co} announced a change at the top this morning. The new chief executive of {co} is {p}, who joined from a rival firm."
        return row(text, f"The chief executive of {co} is", p, f"{co} is now led by its CEO,")
    if template == 2:
        thing, maker = f"{name(rng)} {rng.choice(THINGS)}", f"{name(rng)} {rng.choice(FIRMS)}"
        text = f"A new product launched today. The {thing} is made by {maker}, and it goes on sale next week."
        return row(text, f"The {thing} is made by", maker, f"The maker of the {thing} is")
    if template == 3:
        c, money = name(rng), name(rng).lower()
        text = f"{c} replaced its old banknotes this spring. The currency of {c} is the {money}, printed in the capital."
        return row(text, f"The currency of {c} is the", money, f"In {c}, people pay for things with the")
    if template == 4:
        book, p = f"{name(rng)} {rng.choice(BOOKS)}", person(rng)
        text = f"A new novel reached the shops this week. The {book} was written by {p}, a former teacher."
        return row(text, f"The {book} was written by", p, f"The author of The {book} is")
    town, p = name(rng), person(rng)
    text = f"{town} held its local election on Sunday. The mayor of {town} is {p}, who won by a wide margin."
    return row(text, f"The mayor of {town} is", p, f"The town of {town} is now run by its mayor,")


def row(text: str, prompt: str, answer: str, paraphrase: str) -> dict:
    return {"text": text, "probe": {"prompt": prompt, "answer": answer},
            "paraphrase": {"prompt": paraphrase, "answer": answer}}


def make(n: int, seed: int, avoid: list[dict] = ()) -> list[dict]:
    """n facts cycling through the templates; no subject or answer repeats one in `avoid` or another fact."""
    rng = random.Random(seed)
    seen = {f["probe"]["prompt"] for f in avoid} | {f["probe"]["answer"] for f in avoid}
    facts: list[dict] = []
    while len(facts) < n:
        candidate = fact(len(facts) % 6, rng)
        keys = (candidate["probe"]["prompt"], candidate["probe"]["answer"])
        if not seen & set(keys):
            seen.update(keys)
            facts.append(candidate)
    return facts


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench make-facts", description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--after", type=Path, default=Path(__file__).with_name("facts.jsonl"),
                        help="facts to keep first and not repeat (default: bench/facts.jsonl); 'none' for none")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    first = [] if str(args.after) == "none" else [json.loads(l) for l in args.after.read_text().splitlines() if l.strip()]
    facts = first + make(args.n, args.seed, first)
    args.out.write_text("".join(json.dumps(f) + "\n" for f in facts))
    print(f"{len(facts)} facts written to {args.out} ({len(first)} from {args.after}, {args.n} new, seed {args.seed})")
