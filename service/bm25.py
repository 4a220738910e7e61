"""BM25 (Robertson and Zaragoza's ranking function): which of a few texts a query's words point to. The benchmark's
retrieval baseline ranks whole documents with it; knowledge read as context ranks the read documents' sentences
(service/in_context.py: `nearest_sentence`). Pure functions."""
from __future__ import annotations

import math
from collections import Counter

K1, B = 1.5, 0.75  # BM25's usual constants


def ranked(query: list[str], texts: list[list[str]], k: int | None = None, ties_to_later: bool = True) -> list[int]:
    """Indices of the `k` texts (all by default) that BM25 ranks first for the query's terms, each text given as its
    terms (ties: the later text, or the earlier)."""
    counts = [Counter(text) for text in texts]
    lengths = [sum(c.values()) for c in counts]
    mean_length = (sum(lengths) / len(counts) if counts else 0.0) or 1.0
    df = Counter(term for c in counts for term in c)

    def score(i: int) -> float:
        total = 0.0
        for term in set(query):
            if tf := counts[i][term]:
                idf = math.log(1 + (len(counts) - df[term] + 0.5) / (df[term] + 0.5))
                total += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[i] / mean_length))
        return total

    return sorted(range(len(counts)), key=lambda i: (score(i), i if ties_to_later else -i), reverse=True)[:k]
