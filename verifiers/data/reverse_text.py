"""``reverse_text``: short English sentences and their character-by-character reversal.

Rows are ``{"question": text, "answer": text[::-1]}``. Texts are 3-12 words
(about 15-70 characters), short enough for a ~135M-parameter model to reverse
within a few dozen tokens, varied enough that it cannot memorise them.

The sentences come from a small hand-written grammar driven by a fixed-seed
generator. Only ``Random.random()`` is used, because it is the one method
whose output Python guarantees across versions; ``choice``/``shuffle`` may
change between releases and silently change the dataset.
"""

from __future__ import annotations

import random
from functools import lru_cache

SPLITS = {"train": 1000, "test": 200}
"""Split name -> number of rows. Splits never share a sentence."""

_SEED = 20240917

_ADJECTIVES = (
    "small quiet bright old young green red silver tired clever lazy happy brave "
    "gentle cold warm distant narrow heavy empty patient curious wooden golden "
    "busy sleepy noisy soft ancient careful hungry"
).split()
_NOUNS = (
    "cat dog bird river teacher farmer child robot painter sailor garden window "
    "lamp letter train forest baker student engine kettle fox owl horse doctor "
    "pilot tower bridge village poet clock"
).split()
_PLACES = (
    "park kitchen harbor library market station valley meadow attic city hill shore bakery museum school barn"
).split()
_TRANSITIVE = (
    "found carried painted watched opened fixed followed counted cleaned "
    "visited built dropped lifted noticed sold borrowed"
).split()
_INTRANSITIVE = "slept waited laughed danced wandered listened rested sang smiled paused".split()
_ADVERBS = "slowly quietly happily early late softly again outside today carefully".split()
_PREPOSITIONS = "near behind inside beside under above across beyond".split()
_NAMES = "Anna Ben Clara David Elena Farid Grace Hugo Ines Jonas Kira Liam Maya Noor Omar Priya".split()
_TIMES = [
    "at dawn",
    "at noon",
    "at night",
    "after lunch",
    "before dinner",
    "on Sunday",
    "in winter",
    "in spring",
]
_IMPERATIVE = "Open Close Paint Find Clean Move Bring Check Count Fix".split()
_QUESTION_VERBS = "sleep wait sing hide rest play stay work".split()


def _pick(rng: random.Random, words: list[str] | tuple[str, ...]) -> str:
    return words[int(rng.random() * len(words))]


def _noun_phrase(rng: random.Random) -> str:
    det = _pick(rng, ["the", "a", "my", "our", "that"])
    if rng.random() < 0.6:
        return f"{det} {_pick(rng, _ADJECTIVES)} {_pick(rng, _NOUNS)}"
    return f"{det} {_pick(rng, _NOUNS)}"


def _sentence(rng: random.Random) -> str:
    """One sentence from one of several shapes (statements, questions, commands)."""
    shape = int(rng.random() * 7)
    if shape == 0:
        text = f"{_noun_phrase(rng)} {_pick(rng, _TRANSITIVE)} {_noun_phrase(rng)}."
    elif shape == 1:
        text = f"{_noun_phrase(rng)} {_pick(rng, _INTRANSITIVE)} {_pick(rng, _ADVERBS)}."
    elif shape == 2:
        place = _pick(rng, _PLACES)
        text = f"{_pick(rng, _NAMES)} {_pick(rng, _TRANSITIVE)} {_noun_phrase(rng)} {_pick(rng, _PREPOSITIONS)} the {place}."
    elif shape == 3:
        text = f"why does {_noun_phrase(rng)} {_pick(rng, _QUESTION_VERBS)} {_pick(rng, _PREPOSITIONS)} the {_pick(rng, _PLACES)}?"
    elif shape == 4:
        text = f"{_pick(rng, _IMPERATIVE)} {_noun_phrase(rng)} {_pick(rng, _TIMES)}."
    elif shape == 5:
        text = (
            f"{_noun_phrase(rng)} and {_noun_phrase(rng)} {_pick(rng, _INTRANSITIVE)} "
            f"{_pick(rng, _PREPOSITIONS)} the {_pick(rng, _PLACES)}."
        )
    else:
        text = f"{_pick(rng, _NAMES)} {_pick(rng, _INTRANSITIVE)} {_pick(rng, _TIMES)}."
    return text[0].upper() + text[1:]


@lru_cache(maxsize=1)
def _all_sentences() -> tuple[str, ...]:
    """All unique sentences of all splits, in a fixed order."""
    rng = random.Random(_SEED)
    needed = sum(SPLITS.values())
    seen: dict[str, None] = {}
    # The grammar has millions of sentences, so duplicates are rare and this
    # loop ends after about `needed` draws.
    while len(seen) < needed:
        text = _sentence(rng)
        if 3 <= len(text.split()) <= 12:
            seen.setdefault(text, None)
    return tuple(seen)


def rows(split: str) -> list[dict[str, str]]:
    """The rows of ``split`` (one of :data:`SPLITS`), in a fixed order."""
    start = 0
    for name, size in SPLITS.items():
        if name == split:
            return [
                {"question": text, "answer": text[::-1]} for text in _all_sentences()[start : start + size]
            ]
        start += size
    raise KeyError(split)
