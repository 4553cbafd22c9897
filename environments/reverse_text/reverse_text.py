"""reverse-text: reverse a short sentence character by character.

A first RL task for small models (it was chosen to be learnable by a ~135M
model): the data is offline (``vf.load_example_dataset("reverse_text")``,
3-12 word sentences), the answer format is a single tag, and the reward is
dense: the longest-common-subsequence ratio gives partial credit for a
partially correct reversal, so GRPO sees reward differences from the start.
"""

from __future__ import annotations

import verifiers as vf

SYSTEM_PROMPT = (
    "Reverse the text character by character. "
    "Reply with only the reversed text inside <reversed_text> and </reversed_text> tags."
)


def lcs_ratio(a: str, b: str) -> float:
    """``2 * LCS(a, b) / (len(a) + len(b))`` in [0, 1] (1.0 = identical), with the true longest common subsequence.

    rapidfuzz's Indel similarity is exactly this ratio. ``difflib.SequenceMatcher``
    (used before) matches blocks greedily and scored up to 0.5 below it on random pairs.
    """
    from rapidfuzz.distance import Indel

    return Indel.normalized_similarity(a, b)


def load_environment(
    num_train_examples: int = -1,
    num_eval_examples: int = 50,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
) -> vf.Environment:
    """Build the reverse-text environment.

    Args:
        num_train_examples: training rows to keep (-1: all 1000).
        num_eval_examples: evaluation rows to keep (-1: all 200).
        system_prompt: instructions shown to the model.
        seed: seed of the random subset taken when a count is given.
    """
    train = vf.load_example_dataset("reverse_text", split="train", n=num_train_examples, seed=seed)
    test = vf.load_example_dataset("reverse_text", split="test", n=num_eval_examples, seed=seed)
    parser = vf.XMLParser(["reversed_text"], answer_field="reversed_text")

    def lcs_reward(completion, answer, **_) -> float:
        """LCS ratio between the answer and the true reversal.

        The answer is the text in <reversed_text> tags, or the whole reply when
        the tags are missing: a small model rarely writes the tags at first, and
        scoring untagged replies 0 would give every rollout the same reward, so
        GRPO would have nothing to learn from. The format reward pays for tags.
        """
        parsed = parser.parse_answer(completion)
        if parsed is None:
            messages = parser.get_assistant_messages(completion) if isinstance(completion, list) else []
            parsed = str(messages[-1].get("content") or "") if messages else str(completion or "")
        return lcs_ratio(parsed.strip(), answer)

    rubric = vf.Rubric(funcs=[lcs_reward, parser.get_format_reward_func()], weights=[1.0, 0.2], parser=parser)
    return vf.SingleTurnEnv(
        dataset=train,
        eval_dataset=test,
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
    )
