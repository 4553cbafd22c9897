"""gsm8k: grade-school math word problems, answered with a boxed number.

Real use reads the hub dataset ``openai/gsm8k`` (7473 train / 1319 test) through
``vf.load_example_dataset("gsm8k")``. For offline runs and tests a small local
sample is built in: 60 word problems in the GSM8K style, written for this
package (not taken from GSM8K), 40 train / 20 test. ``use_local_sample=None``
(the default) picks the local sample when ``HF_HUB_OFFLINE`` or
``HF_DATASETS_OFFLINE`` is set and the hub otherwise; pass ``True``/``False`` to
choose explicitly.

The model reasons freely and ends with ``\\boxed{answer}``; ``MathRubric``
checks the boxed answer symbolically (math-verify), so ``0.6``, ``3/5`` and
``0.60`` all match ``0.6``.
"""

from __future__ import annotations

import os
import random
import re

import verifiers as vf
from verifiers.errors import ConfigError

SYSTEM_PROMPT = (
    "Solve the math word problem. Think step by step, then give the final answer as a number "
    "inside \\boxed{}, for example \\boxed{42}."
)

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")

# Each entry is (question, solution); the solution ends with ``#### <answer>`` like GSM8K's.
PROBLEMS: tuple[tuple[str, str], ...] = (
    (
        "Mia buys 3 packs of stickers with 12 stickers in each pack. She gives 9 stickers to her brother. How many stickers does she have left?",
        "She buys 3 * 12 = 36 stickers. After giving some away she has 36 - 9 = 27. #### 27",
    ),
    (
        "A baker makes 48 muffins. He sells 3/4 of them in the morning. How many muffins are left?",
        "He sells 48 * 3 / 4 = 36 muffins, so 48 - 36 = 12 are left. #### 12",
    ),
    (
        "Tom reads 15 pages of a book every day. The book has 210 pages. How many days does it take him to finish it?",
        "It takes 210 / 15 = 14 days. #### 14",
    ),
    (
        "A farmer has 5 rows of apple trees with 14 trees in each row. Each tree gives 20 apples. How many apples does the farmer get?",
        "There are 5 * 14 = 70 trees, giving 70 * 20 = 1400 apples. #### 1400",
    ),
    (
        "Lena earns $12 per hour. She works 6 hours on Saturday and 4 hours on Sunday. How much does she earn over the weekend?",
        "She works 6 + 4 = 10 hours and earns 10 * 12 = 120 dollars. #### 120",
    ),
    (
        "A pizza is cut into 8 slices. Four friends order 3 pizzas and share them equally. How many slices does each friend get?",
        "There are 3 * 8 = 24 slices, so each friend gets 24 / 4 = 6. #### 6",
    ),
    (
        "A school bus holds 42 students. How many buses are needed to take 300 students on a trip?",
        "300 / 42 is about 7.14, so 7 buses are not enough and 8 are needed. #### 8",
    ),
    (
        "Sam has $50. He buys 2 books for $13 each and a pen for $4. How much money does he have left?",
        "The books cost 2 * 13 = 26 dollars. He spends 26 + 4 = 30 and has 50 - 30 = 20 left. #### 20",
    ),
    (
        "A train travels at 80 kilometers per hour for 3 hours and then at 60 kilometers per hour for 2 hours. How far does it travel in total?",
        "It covers 80 * 3 = 240 km and then 60 * 2 = 120 km, in total 240 + 120 = 360 km. #### 360",
    ),
    (
        "There are 28 students in a class. 4/7 of them are girls. How many boys are in the class?",
        "There are 28 * 4 / 7 = 16 girls, so 28 - 16 = 12 boys. #### 12",
    ),
    (
        "A shirt costs $40. It is on sale for 25% off. What is the sale price in dollars?",
        "The discount is 40 * 25 / 100 = 10 dollars, so the price is 40 - 10 = 30. #### 30",
    ),
    (
        "Nina plants 6 rows of tulips with 9 tulips in each row. Rabbits eat 15 of the tulips. How many tulips are left?",
        "She plants 6 * 9 = 54 tulips and 54 - 15 = 39 are left. #### 39",
    ),
    (
        "A water tank holds 500 liters. It is filled at 25 liters per minute. How many minutes does it take to fill the empty tank?",
        "It takes 500 / 25 = 20 minutes. #### 20",
    ),
    (
        "Omar is 3 times as old as his son. His son is 11 years old. How old will Omar be in 5 years?",
        "Omar is 3 * 11 = 33 now, so in 5 years he will be 33 + 5 = 38. #### 38",
    ),
    (
        "A box of pencils has 24 pencils. A teacher buys 7 boxes and hands out 150 pencils. How many pencils does she have left?",
        "She buys 7 * 24 = 168 pencils and has 168 - 150 = 18 left. #### 18",
    ),
    (
        "Grace runs 4 kilometers every weekday and 10 kilometers on Saturday. She rests on Sunday. How many kilometers does she run in a week?",
        "On weekdays she runs 5 * 4 = 20 km, so the week totals 20 + 10 = 30 km. #### 30",
    ),
    (
        "A store sells apples at 3 for $2. How much do 24 apples cost in dollars?",
        "24 apples are 24 / 3 = 8 groups of three, costing 8 * 2 = 16 dollars. #### 16",
    ),
    (
        "Ben saves $15 each week. How many weeks does he need to save to buy a bike that costs $240?",
        "He needs 240 / 15 = 16 weeks. #### 16",
    ),
    (
        "A rectangle garden is 12 meters long and 8 meters wide. A fence goes all the way around it. How many meters of fence are needed?",
        "The perimeter is 2 * (12 + 8) = 40 meters. #### 40",
    ),
    (
        "Ivy has 3 times as many marbles as Jack. Together they have 64 marbles. How many marbles does Ivy have?",
        "Together they have 3 + 1 = 4 parts, so one part is 64 / 4 = 16 and Ivy has 3 * 16 = 48. #### 48",
    ),
    (
        "A movie starts at 6:45 pm and lasts 2 hours and 35 minutes. At what minute past 9 pm does it end?",
        "6:45 plus 2 hours is 8:45, plus 35 minutes is 9:20, so it ends 20 minutes past 9. #### 20",
    ),
    (
        "A car uses 6 liters of fuel for every 100 kilometers. How many liters does it use for a 450 kilometer trip?",
        "The trip is 450 / 100 = 4.5 hundreds of km, using 4.5 * 6 = 27 liters. #### 27",
    ),
    (
        "Five friends share a restaurant bill of $85 and add a $15 tip. They split the total equally. How much does each pay in dollars?",
        "The total is 85 + 15 = 100 dollars, so each pays 100 / 5 = 20. #### 20",
    ),
    (
        "A library has 1200 books. 35% of them are fiction. How many books are not fiction?",
        "Fiction books are 1200 * 35 / 100 = 420, so 1200 - 420 = 780 are not fiction. #### 780",
    ),
    (
        "Each classroom needs 30 chairs. The school has 9 classrooms and 215 chairs. How many more chairs does it need?",
        "It needs 9 * 30 = 270 chairs, which is 270 - 215 = 55 more. #### 55",
    ),
    (
        "Kim buys 4 notebooks at $2.50 each and 3 pens at $1.20 each. How much does she spend in dollars?",
        "Notebooks cost 4 * 2.5 = 10 dollars and pens 3 * 1.2 = 3.6 dollars, in total 10 + 3.6 = 13.6. #### 13.6",
    ),
    (
        "A hen lays 5 eggs a week. A farm has 36 hens. How many dozen eggs does the farm get in 4 weeks?",
        "Each week there are 36 * 5 = 180 eggs, in 4 weeks 180 * 4 = 720 eggs, which is 720 / 12 = 60 dozen. #### 60",
    ),
    (
        "Paul walks 1.5 kilometers to school and back every school day. How many kilometers does he walk in 20 school days?",
        "Each day he walks 1.5 * 2 = 3 km, so in 20 days he walks 20 * 3 = 60 km. #### 60",
    ),
    (
        "A jar has 60 candies: 1/3 are red, 1/4 are green and the rest are yellow. How many are yellow?",
        "Red: 60 / 3 = 20. Green: 60 / 4 = 15. Yellow: 60 - 20 - 15 = 25. #### 25",
    ),
    (
        "A phone costs $360. Anna pays $60 now and the rest in 6 equal monthly payments. How much is each payment in dollars?",
        "The rest is 360 - 60 = 300 dollars, so each payment is 300 / 6 = 50. #### 50",
    ),
    (
        "A cyclist rides 18 kilometers in 45 minutes. At the same speed, how many kilometers does she ride in 2 hours?",
        "2 hours is 120 minutes. Her speed is 18 / 45 = 0.4 km per minute, so she rides 0.4 * 120 = 48 km. #### 48",
    ),
    (
        "A class collects 245 cans on Monday, 318 on Tuesday and 187 on Wednesday. Their goal is 1000 cans. How many more cans do they need?",
        "They have 245 + 318 + 187 = 750 cans and need 1000 - 750 = 250 more. #### 250",
    ),
    (
        "Maria is making lemonade. Each pitcher needs 6 lemons. Lemons come in bags of 8. How many bags does she need for 12 pitchers?",
        "She needs 12 * 6 = 72 lemons, which is 72 / 8 = 9 bags. #### 9",
    ),
    (
        "A shop had 90 umbrellas. On a rainy day it sold 2/5 of them, and the next day it sold 14 more. How many umbrellas are left?",
        "On the rainy day it sold 90 * 2 / 5 = 36. Then 90 - 36 - 14 = 40 are left. #### 40",
    ),
    (
        "A swimming pool is 25 meters long. Leo swims 24 lengths. How many kilometers does he swim?",
        "He swims 25 * 24 = 600 meters, which is 600 / 1000 = 0.6 km. #### 0.6",
    ),
    (
        "Tickets cost $8 for adults and $5 for children. A family of 2 adults and 3 children goes to the zoo. How much do they pay in dollars?",
        "Adults pay 2 * 8 = 16 dollars and children 3 * 5 = 15 dollars, in total 16 + 15 = 31. #### 31",
    ),
    (
        "A factory makes 250 toys an hour. It runs 8 hours a day for 5 days. How many toys does it make?",
        "It makes 250 * 8 = 2000 toys a day and 2000 * 5 = 10000 toys in 5 days. #### 10000",
    ),
    (
        "Zoe had 120 dollars. She spent 1/4 of it on a game and then 1/2 of what was left on clothes. How many dollars does she have now?",
        "The game cost 120 / 4 = 30, leaving 120 - 30 = 90. Clothes cost 90 / 2 = 45, leaving 90 - 45 = 45. #### 45",
    ),
    (
        "A gardener waters 14 plants with 3 liters each and 6 trees with 12 liters each. How many liters of water does she use?",
        "Plants take 14 * 3 = 42 liters and trees 6 * 12 = 72 liters, in total 42 + 72 = 114. #### 114",
    ),
    (
        "A printer prints 18 pages per minute. How many minutes does it need to print 12 copies of a 45 page report?",
        "That is 12 * 45 = 540 pages, taking 540 / 18 = 30 minutes. #### 30",
    ),
    # -- test split ---------------------------------------------------------
    (
        "Jake has 4 boxes of crayons with 16 crayons each. He loses 7 crayons. How many crayons does he have?",
        "He has 4 * 16 = 64 crayons and after losing some 64 - 7 = 57. #### 57",
    ),
    (
        "A bakery sells cookies for $1.50 each. On Monday it sells 84 cookies. How many dollars does it earn?",
        "It earns 84 * 1.5 = 126 dollars. #### 126",
    ),
    (
        "A tree grows 30 centimeters each year. It is 2 meters tall now. How tall will it be in centimeters after 4 years?",
        "It is 2 * 100 = 200 cm now and grows 4 * 30 = 120 cm, reaching 200 + 120 = 320 cm. #### 320",
    ),
    (
        "There are 7 days in a week. How many days are there in 15 weeks plus 4 days?",
        "15 weeks are 15 * 7 = 105 days, plus 4 makes 105 + 4 = 109. #### 109",
    ),
    (
        "A farmer sells eggs in cartons of 6. He has 250 eggs. How many full cartons can he fill?",
        "250 / 6 is about 41.67, so he can fill 41 full cartons. #### 41",
    ),
    (
        "Rosa reads 20 pages on Monday, twice as many on Tuesday, and 15 fewer than Tuesday on Wednesday. How many pages does she read in the three days?",
        "Tuesday: 20 * 2 = 40. Wednesday: 40 - 15 = 25. Total: 20 + 40 + 25 = 85. #### 85",
    ),
    (
        "A concert hall has 24 rows of 35 seats. 680 tickets are sold. How many seats are empty?",
        "There are 24 * 35 = 840 seats, so 840 - 680 = 160 are empty. #### 160",
    ),
    (
        "Henry buys a jacket for $75 and pays with two $50 bills. How much change does he get in dollars?",
        "He pays 2 * 50 = 100 dollars and gets 100 - 75 = 25 back. #### 25",
    ),
    (
        "A recipe needs 250 grams of flour for 10 pancakes. How many grams of flour are needed for 36 pancakes?",
        "Each pancake needs 250 / 10 = 25 grams, so 36 need 36 * 25 = 900 grams. #### 900",
    ),
    (
        "A bus leaves every 15 minutes from 7:00 am. How many buses leave from 7:00 am to 10:00 am, counting both ends?",
        "3 hours is 180 minutes, giving 180 / 15 = 12 gaps and 12 + 1 = 13 buses. #### 13",
    ),
    (
        "Lucy has 5 more pencils than Mark. Mark has 2 times as many pencils as Nora. Nora has 9 pencils. How many pencils does Lucy have?",
        "Mark has 2 * 9 = 18 and Lucy has 18 + 5 = 23. #### 23",
    ),
    (
        "A store buys a lamp for $40 and sells it for 30% more. What is the selling price in dollars?",
        "The markup is 40 * 30 / 100 = 12 dollars, so it sells for 40 + 12 = 52. #### 52",
    ),
    (
        "A pool is filled by two hoses. One adds 12 liters per minute and the other 8 liters per minute. How many minutes do they need to fill 600 liters?",
        "Together they add 12 + 8 = 20 liters per minute and need 600 / 20 = 30 minutes. #### 30",
    ),
    (
        "Ella scores 78, 85 and 92 on three tests. What is her average score?",
        "The scores add up to 78 + 85 + 92 = 255, so the average is 255 / 3 = 85. #### 85",
    ),
    (
        "A parking lot has 8 rows with 25 spaces each. 163 cars are parked. How many spaces are free?",
        "There are 8 * 25 = 200 spaces and 200 - 163 = 37 are free. #### 37",
    ),
    (
        "A snail climbs 3 meters up a wall during the day and slides 1 meter down at night. The wall is 10 meters tall. On which day does it reach the top?",
        "Each full day and night gains 3 - 1 = 2 meters. After 4 days and nights it is at 4 * 2 = 8 meters, and on day 5 it climbs 8 + 3 = 11, past the top. #### 5",
    ),
    (
        "Mr. Lee drives 35 kilometers to work and the same back, 5 days a week. How many kilometers does he drive for work in 4 weeks?",
        "Each day is 35 * 2 = 70 km, each week 70 * 5 = 350 km, and 4 weeks 350 * 4 = 1400 km. #### 1400",
    ),
    (
        "A box holds 6 rows of 4 chocolates. Amy eats 1/3 of the chocolates. How many chocolates are left?",
        "The box holds 6 * 4 = 24. She eats 24 / 3 = 8, leaving 24 - 8 = 16. #### 16",
    ),
    (
        "A toy costs $18. Its price goes up by $3 each year. How much will it cost after 5 years in dollars?",
        "It goes up 5 * 3 = 15 dollars, to 18 + 15 = 33. #### 33",
    ),
    (
        "Three brothers share 96 marbles. The oldest gets half, and the other two split the rest equally. How many marbles does the youngest get?",
        "The oldest gets 96 / 2 = 48, leaving 96 - 48 = 48, so the youngest gets 48 / 2 = 24. #### 24",
    ),
)


TRAIN_SIZE = 40
"""``PROBLEMS[:TRAIN_SIZE]`` is the local train split, the rest the local test split."""

_BOXED = re.compile(r"\\boxed\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")


def is_offline() -> bool:
    """Whether the Hugging Face hub is switched off by ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``."""
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on") for var in OFFLINE_VARS)


def local_rows(split: str) -> list[dict[str, str]]:
    """The local sample's ``question``/``answer`` rows of ``split`` (``"train"`` or ``"test"``)."""
    problems = PROBLEMS[:TRAIN_SIZE] if split == "train" else PROBLEMS[TRAIN_SIZE:]
    return [{"question": q, "answer": vf.extract_hash_answer(solution) or ""} for q, solution in problems]


def load_split(split: str, n: int, seed: int, local: bool):
    """``n`` rows (-1: all) of ``split`` from the local sample or the hub, as a ``datasets.Dataset``."""
    if local:
        from datasets import Dataset

        rows = local_rows(split)
        if 0 <= n < len(rows):
            rng = random.Random(seed)
            rows = sorted(rows, key=lambda _: rng.random())[:n]
        return Dataset.from_list(rows)
    try:
        return vf.load_example_dataset("gsm8k", split=split, n=n, seed=seed)
    except ConfigError as err:
        raise ConfigError(
            err.message,
            hint="""for the built-in offline sample pass use_local_sample=True (vf-eval -a '{"use_local_sample": true}')""",
        ) from err


def boxed_answer_format(completion, parser) -> float:
    """1.0 if the final assistant message holds a complete ``\\boxed{...}`` answer."""
    texts = parser.get_assistant_texts(completion)
    return 1.0 if texts and _BOXED.search(texts[-1]) else 0.0


def load_environment(
    use_local_sample: bool | None = None,
    num_train_examples: int = -1,
    num_eval_examples: int = 100,
    use_think: bool = False,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
    max_turns: int = 1,
) -> vf.Environment:
    """Build the gsm8k environment.

    Args:
        use_local_sample: True: the built-in 60-problem sample (offline); False: the hub
            dataset ``openai/gsm8k`` (needs the network); None: the sample when
            ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set, else the hub.
        num_train_examples: training rows to keep (-1: all).
        num_eval_examples: evaluation rows to keep (-1: all; the local sample has 20).
        use_think: expect ``<think>...</think>`` before the answer (``vf.ThinkParser``) and
            reward that format instead of the presence of a boxed answer.
        system_prompt: instructions shown to the model.
        seed: seed of the random subset taken when a count is given.
        max_turns: a bound on the model's turns. gsm8k is single-turn: its one turn is within
            any bound >= 1, so the argument only checks that (a multi-environment config may
            give every environment the same ``max_turns``, as the prime-rl page's example does).
    """
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise vf.ConfigError(
            f"gsm8k: max_turns={max_turns!r} must be an integer >= 1",
            "gsm8k is single-turn: any max_turns >= 1 allows its one turn",
        )
    local = is_offline() if use_local_sample is None else bool(use_local_sample)
    train = load_split("train", num_train_examples, seed, local)
    test = load_split("test", num_eval_examples, seed, local)
    if use_think:
        parser = vf.ThinkParser(extract_fn=vf.extract_boxed_answer)
        format_reward = parser.get_format_reward_func()
        system_prompt += " Think inside <think>...</think> first."
    else:
        parser = vf.Parser(extract_fn=vf.extract_boxed_answer)
        format_reward = boxed_answer_format
    # MathRubric appends its correct_answer_reward_func (weight 1.0) after these.
    rubric = vf.MathRubric(funcs=[format_reward], weights=[0.2], parser=parser)
    return vf.SingleTurnEnv(
        dataset=train,
        eval_dataset=test,
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
    )
