"""A document's text as the learner reads it: its words, with layout that carries no fact folded away.

A run of blanks is one space, blanks around a line break go, and more than one blank line is one: a document
padded with thousands of spaces trains, weighs and is previewed as its words, at the cost of its words. The text
stored and shown is the one sent."""
from __future__ import annotations

import re

BLANKS = re.compile(r"[^\S\n]+")  # whitespace other than a line break, one run at a time (no backtracking)
AROUND_BREAK = re.compile(r" ?\n ?")
BLANK_LINES = re.compile(r"\n{3,}")


def laid_out(text: str) -> str:
    """`text` with every run of blanks one space and at most one blank line between paragraphs."""
    return BLANK_LINES.sub("\n\n", AROUND_BREAK.sub("\n", BLANKS.sub(" ", text))).strip()
