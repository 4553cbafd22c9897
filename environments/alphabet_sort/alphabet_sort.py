"""alphabet-sort: sort a list of names alphabetically, optionally over several turns.

Each example is a seeded random list of names. With ``num_turns > 1`` the
environment answers every sorted list with a few more names, and the model
must return the whole combined list sorted again, so it has to keep track of
the conversation. The reward gives partial credit: each turn is scored by how
close the returned list is to the true sorted list (sequence similarity over
names), averaged over the turns the task asked for.

The data is generated here, offline, from a fixed name list and a seeded
generator that uses only ``Random.random()`` (whose output Python keeps stable
across versions, unlike ``choice``/``shuffle``).
"""

from __future__ import annotations

import random
import re
from typing import Any

import verifiers as vf
from verifiers.errors import ConfigError

NAMES = (
    "Abebe Adaeze Aiko Alaric Alejandro Amara Anneli Anouk Arjun Astrid Aurelio Ayodele Beatrix Benedikt "
    "Bjorn Bronwen Caius Callum Camille Casimir Cedric Chiara Cosima Dagny Dario Delphine Desmond Dmitri "
    "Eamon Eero Efua Eleni Elio Emeric Esme Evander Faisal Farah Fenna Florian Gaspard Gideon Greta Gunnar "
    "Hamid Hana Hartmut Helka Hiroshi Idris Ilse Imogen Ingrid Isaura Ivo Jasper Jelena Joaquin Jorah Jun "
    "Kaveh Keira Kenji Klaus Kofi Laila Lars Leonie Linnea Lorcan Lucian Mads Magnus Malik Marisol Matteo "
    "Meera Milo Mirela Nadia Nikhil Niamh Nils Oisin Olena Orla Osric Pavel Petra Quentin Quilla Rafael Rania "
    "Rhys Rosalind Rune Saoirse Sebastien Selin Sigrid Soren Sunniva Tamsin Tariq Thea Tobias Ulla Umar "
    "Valentina Vesna Viggo Wanjiru Wilhelmina Xavier Xiomara Yara Yusuf Zainab Zeno Zofia"
).split()
"""Names to sort: single capitalised ASCII words, so plain string order is alphabetical order."""

TAG = "alphabetical_sorted"

SYSTEM_PROMPT = (
    f"Sort the given names alphabetically. Reply with the sorted names inside <{TAG}> and </{TAG}> "
    "tags, one name per line, and nothing else. When more names are given later, reply with the "
    "whole list so far, sorted again."
)


def _pick(rng: random.Random, n: int, pool: list[str]) -> list[str]:
    """``n`` distinct names drawn from ``pool`` (which loses them), in draw order."""
    return [pool.pop(int(rng.random() * len(pool))) for _ in range(n)]


def make_rows(
    count: int, seed: int, min_names: int, max_names: int, num_turns: int, names_per_turn: int
) -> list[dict[str, Any]]:
    """``count`` examples: the first batch of names in the question, later batches in ``info``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        pool = list(NAMES)
        first = _pick(rng, min_names + int(rng.random() * (max_names - min_names + 1)), pool)
        batches = [first] + [
            _pick(rng, 1 + int(rng.random() * names_per_turn), pool) for _ in range(num_turns - 1)
        ]
        rows.append(
            {
                "question": f"Sort these names alphabetically.\nNames: {', '.join(first)}",
                "answer": "\n".join(sorted(name for batch in batches for name in batch)),
                "info": {"batches": batches},
            }
        )
    return rows


def parse_names(text: str | None) -> list[str]:
    """The names in a model's list (one per line; commas also accepted), in order."""
    if not text:
        return []
    return [name.strip(" -*.\t") for name in re.split(r"[\n,]+", text) if name.strip(" -*.\t")]


def list_similarity(predicted: list[str], expected: list[str]) -> float:
    """``2 * LCS / (len(predicted) + len(expected))`` over names, in [0, 1] (1.0 = identical, order included).

    The true longest common subsequence (rapidfuzz's Indel similarity), not
    ``difflib.SequenceMatcher``'s greedy blocks, which can score far below it.
    """
    from rapidfuzz.distance import Indel

    return Indel.normalized_similarity(predicted, expected)


class AlphabetSortEnv(vf.MultiTurnEnv):
    """After each model turn, the next batch of names (from ``info["batches"]``) is added."""

    def is_completed(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> bool:
        return state["turn"] >= len(state["info"].get("batches") or [[]])

    def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any):
        batch = state["info"]["batches"][state["turn"]]
        text = f"Now add these names and sort the whole list again.\nNames: {', '.join(batch)}"
        return [{"role": "user", "content": text}], state


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    min_names: int = 4,
    max_names: int = 8,
    num_turns: int = 1,
    names_per_turn: int = 3,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
) -> vf.Environment:
    """Build the alphabet-sort environment.

    Args:
        num_train_examples: training examples to generate (-1: 1000).
        num_eval_examples: evaluation examples to generate, from a different seed stream (-1: 100).
        min_names: fewest names in the first list.
        max_names: most names in the first list.
        num_turns: model turns per example (1: single-turn; more: names are added each turn).
        names_per_turn: most names added per follow-up turn (at least 1 each).
        system_prompt: instructions shown to the model.
        seed: seed of the generator (train uses ``seed``, eval ``seed + 1_000_003``).
    """
    if not 1 <= min_names <= max_names:
        raise ConfigError(f"need 1 <= min_names <= max_names, got {min_names} and {max_names}")
    if num_turns < 1 or names_per_turn < 1:
        raise ConfigError(f"num_turns and names_per_turn must be >= 1, got {num_turns} and {names_per_turn}")
    if max_names + (num_turns - 1) * names_per_turn > len(NAMES):
        raise ConfigError(
            f"a list may grow to {max_names + (num_turns - 1) * names_per_turn} names but only {len(NAMES)} exist",
            hint="lower max_names, num_turns or names_per_turn",
        )
    from datasets import Dataset

    shape = (min_names, max_names, num_turns, names_per_turn)
    train = Dataset.from_list(make_rows(num_train_examples if num_train_examples > 0 else 1000, seed, *shape))
    test = Dataset.from_list(
        make_rows(num_eval_examples if num_eval_examples > 0 else 100, seed + 1_000_003, *shape)
    )
    parser = vf.XMLParser([TAG], answer_field=TAG)

    def sorted_list_similarity(completion, info, **_) -> float:
        """Mean over the asked-for turns of the similarity between the returned and the true sorted list."""
        batches = info["batches"]
        replies = parser.get_assistant_texts(completion)
        total, seen = 0.0, []
        for turn, batch in enumerate(batches):
            seen += batch
            if turn < len(replies):
                names = parse_names(parser.parse(replies[turn]).alphabetical_sorted)
                total += list_similarity(names, sorted(seen)) if names else 0.0
        return total / len(batches)

    rubric = vf.Rubric(
        funcs=[sorted_list_similarity, parser.get_format_reward_func()], weights=[1.0, 0.2], parser=parser
    )
    return AlphabetSortEnv(
        dataset=train,
        eval_dataset=test,
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
        max_turns=num_turns,
    )
