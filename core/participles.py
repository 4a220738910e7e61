"""English verbs' past participles that do not end in -ed, by every form a sentence may use: data for turning a
sentence round (workers/passive.py) and for telling a participle that opens a sentence from a name (core/subjects.py).
"""
from __future__ import annotations

IRREGULAR = {form: participle for participle, forms in {
    "run": "run runs ran", "led": "lead leads", "built": "build builds", "made": "make makes",
    "won": "win wins", "held": "hold holds", "bought": "buy buys", "sold": "sell sells",
    "written": "write writes wrote", "drawn": "draw draws drew", "given": "give gives gave",
    "found": "find finds", "kept": "keep keeps", "paid": "pay pays", "taken": "take takes took",
    "taught": "teach teaches", "brought": "bring brings", "begun": "begin begins began",
    "chosen": "choose chooses chose", "sung": "sing sings sang", "set": "sets", "shot": "shoot shoots",
    "spent": "spend spends", "sent": "send sends", "met": "meet meets", "known": "know knows knew",
    "seen": "see sees saw", "left": "leave leaves", "put": "puts", "stopped": "stop stops", "laid": "lay lays",
    "lit": "light lights",
}.items() for form in [participle, *forms.split()]}
