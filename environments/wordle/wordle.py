"""wordle: guess a secret five-letter word in six tries, with letter feedback.

A self-contained ``vf.MultiTurnEnv``: the secret words come from a built-in
list, the model guesses inside ``<guess>...</guess>``, and the environment
answers each guess with one mark per letter, as in the game:

- ``G`` (green): right letter, right place;
- ``Y`` (yellow): the letter is in the word, elsewhere (counted: a letter that
  occurs once in the secret is marked at most once);
- ``X`` (grey): not in the word (or no more of it).

Any five letters count as a guess (there is no dictionary check), so the
model is never stuck on a word the list lacks. A reply without a valid guess
uses up a turn and gets a reminder of the format. Rewards give partial credit
so a small model sees signal before it ever wins: winning, winning early, and
how much of the secret the last guess had found.
"""

from __future__ import annotations

import random
import re
from typing import Any

import verifiers as vf

WORDS = (
    "about above actor acute adult after again agent agree ahead alarm album alert alike alive allow alone "
    "along alter amber among angel anger angle angry apple apply arena argue arise armor array arrow aside "
    "asset audio avoid award aware badge baker basic basin beach beard beast begin being below bench berry "
    "birth black blade blame blank blast blend blind block bloom board boast bonus boost booth brain brake "
    "brand brave bread break brick bride brief bring broad brook brown brush build bunch burst buyer cabin "
    "cable camel candy canoe cargo carry catch cause cedar chain chair chalk charm chart chase cheap check "
    "cheek chess chest chief child chill choir civic claim class clean clear clerk cliff climb clock close "
    "cloth cloud coach coast coral couch count court cover craft crane crash cream crisp cross crowd crown "
    "curve cycle daily dairy dance death delay depth diary dizzy dodge doubt dozen draft drain drama dream "
    "dress drift drink drive eager eagle early earth eight elbow elder elect empty enemy enjoy enter entry "
    "equal error essay event exact exist extra fable faint faith false fancy feast fence fever field fifty "
    "fight final flame flash fleet flesh float flock flood floor flour fluid flute focus force forge forth "
    "forum found frame fresh front frost fruit fully funny gauge ghost giant given glass globe glory glove "
    "grace grade grain grand grant grape grass great green greet grief grill gross group grove guard guess "
    "guest guide habit happy harsh heart heavy hedge hello hinge hobby honey horse hotel house human humor "
    "ideal image index inner input irony ivory jewel joint judge juice knife knock label labor large laser "
    "later laugh layer learn lemon level light limit linen liver lodge logic loose lucky lunar lunch magic "
    "major maple march match mayor medal melon mercy metal meter minor model money month moral motor mount "
    "mouse mouth movie music nerve never night noble noise north novel nurse ocean offer often olive onion "
    "opera orbit order other otter outer owner oxide paint panel paper party pasta patch pause peace peach "
    "pearl pedal penny phase phone photo piano piece pilot pitch pizza place plain plane plant plate plaza "
    "point polar pound power press price pride prime print prize proof proud prove pulse punch queen quick "
    "quiet quilt quote radar radio raise rally ranch range rapid raven reach ready realm relax reply ridge "
    "rifle right rigid river roast robin robot rocky rough round route royal rural salad sauce scale scarf "
    "scene scope score scout sense serve seven shade shake shape share shark sharp sheep shelf shell shift "
    "shine shirt shock shore short shout sight silly since skill skirt slate sleep slice slide slope small "
    "smart smile smoke snack snake solar solid solve sound south space spare spark speak speed spend spice "
    "spine spoon sport spray squad stack staff stage stair stamp stand start state steam steel stick stone "
    "storm story stove strap straw study style sugar suite sunny super swamp sweet swift sword table taste "
    "teach thick thief thing think thumb tiger timer toast today token topic torch total tower trace track "
    "trade trail train trait treat trend trial tribe trick truck truly trunk trust truth tulip twist uncle "
    "under union unity upper urban usage usual valid value valve vapor vault verse video vigor viola "
    "visit vital vivid vocal voice wagon waste watch water whale wheat wheel while white whole width "
    "witch woman world worry worth wound write yacht young youth zebra"
).split()
"""Secret words: common five-letter English words."""

SYSTEM_PROMPT = (
    "You are playing Wordle. Guess the secret five-letter English word. After each guess you get one "
    "mark per letter: G = right letter in the right place, Y = the letter is in the word but elsewhere, "
    "X = the letter is not in the word. Use the feedback to narrow down the word. Reply with your guess "
    "inside <guess> and </guess> tags, for example <guess>crane</guess>."
)

_GUESS = re.compile(r"[A-Za-z]{5}")


def feedback(secret: str, guess: str) -> str:
    """The marks for ``guess`` against ``secret`` (both five letters), e.g. ``"GXYXX"``."""
    secret, guess = secret.lower(), guess.lower()
    marks = ["X"] * len(guess)
    unmatched: dict[str, int] = {}
    for i, (s, g) in enumerate(zip(secret, guess, strict=True)):
        if s == g:
            marks[i] = "G"
        else:
            unmatched[s] = unmatched.get(s, 0) + 1
    # Yellows left to right, each using up one unmatched occurrence in the secret.
    for i, g in enumerate(guess):
        if marks[i] == "X" and unmatched.get(g, 0) > 0:
            marks[i] = "Y"
            unmatched[g] -= 1
    return "".join(marks)


def letter_score(marks: str) -> float:
    """How much of the secret one guess found: green = 1, yellow = 0.5, per letter, in [0, 1]."""
    return (marks.count("G") + 0.5 * marks.count("Y")) / 5


class WordleEnv(vf.MultiTurnEnv):
    """Wordle as a multi-turn environment; the secret word is the row's ``answer``."""

    def __init__(self, parser: vf.XMLParser, max_guesses: int = 6, **kwargs: Any):
        super().__init__(parser=parser, max_turns=max_guesses, **kwargs)
        self.max_guesses = max_guesses

    def setup_state(self, state: vf.State, **kwargs: Any) -> vf.State:
        state["guesses"] = []  # one entry per model turn: {"guess": str | None, "marks": str | None}
        state["solved"] = False
        return state

    def _judge_last_turn(self, messages: vf.Messages, state: vf.State) -> dict:
        """Record the latest model turn's guess and marks in ``state["guesses"]`` (once per turn)."""
        if len(state["guesses"]) < state["turn"]:
            text = self.parser.parse_answer([messages[-1]]) if messages else None
            word = text.strip().lower() if text else ""
            valid = bool(_GUESS.fullmatch(word))
            marks = feedback(state["answer"], word) if valid else None
            state["guesses"].append({"guess": word if valid else None, "marks": marks})
            state["solved"] = state["solved"] or marks == "GGGGG"
        return state["guesses"][-1]

    def is_completed(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> bool:
        self._judge_last_turn(messages, state)
        return state["solved"] or state["turn"] >= self.max_guesses

    def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any):
        last = self._judge_last_turn(messages, state)
        left = self.max_guesses - state["turn"]
        if last["guess"] is None:
            text = (
                "That is not a valid guess: reply with exactly five letters inside <guess> and </guess>, "
                f"for example <guess>crane</guess>. Guesses left: {left}."
            )
        else:
            text = f"{last['guess'].upper()}\n{' '.join(last['marks'])}\nGuesses left: {left}."
        return [{"role": "user", "content": text}], state


def load_environment(
    num_train_examples: int = -1,
    num_eval_examples: int = 50,
    max_guesses: int = 6,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
) -> vf.Environment:
    """Build the wordle environment.

    Args:
        num_train_examples: training games to keep (-1: every train word).
        num_eval_examples: evaluation games to keep (-1: every eval word).
        max_guesses: guesses per game (model turns).
        system_prompt: the rules shown to the model.
        seed: seed of the train/eval word split.
    """
    from datasets import Dataset

    # A fixed split of the word list: every fifth word (after a seeded shuffle) is held out.
    rng = random.Random(seed)
    order = sorted(WORDS, key=lambda _: rng.random())
    eval_words, train_words = order[::5], [w for i, w in enumerate(order) if i % 5]

    def games(words: list[str], n: int) -> Dataset:
        words = words[:n] if n >= 0 else words
        question = (
            f"Guess the secret five-letter word. You have {max_guesses} guesses. Make your first guess."
        )
        return Dataset.from_list([{"question": question, "answer": w} for w in words])

    parser = vf.XMLParser(["guess"], answer_field="guess")

    def correct_answer(state, **_) -> float:
        """1.0 if the game was won."""
        return 1.0 if state.get("solved") else 0.0

    def fewer_guesses(state, **_) -> float:
        """For a win, 1.0 on the first guess down to 1/max_guesses on the last; 0 otherwise."""
        if not state.get("solved"):
            return 0.0
        return (max_guesses - len(state["guesses"]) + 1) / max_guesses

    def letter_feedback(state, **_) -> float:
        """How much of the word the last valid guess had found (green 1, yellow 0.5 per letter)."""
        marks = [g["marks"] for g in state.get("guesses", []) if g["marks"]]
        return letter_score(marks[-1]) if marks else 0.0

    rubric = vf.Rubric(
        funcs=[correct_answer, fewer_guesses, letter_feedback, parser.get_format_reward_func()],
        weights=[1.0, 0.5, 0.2, 0.2],
        parser=parser,
    )
    return WordleEnv(
        parser=parser,
        max_guesses=max_guesses,
        dataset=games(train_words, num_train_examples),
        eval_dataset=games(eval_words, num_eval_examples),
        system_prompt=system_prompt,
        rubric=rubric,
    )
