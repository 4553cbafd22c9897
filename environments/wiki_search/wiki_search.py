"""wiki-search: answer questions by searching a small local encyclopedia with tools.

A ``vf.ToolEnv`` over ``wiki_search_corpus.json``: 40 short articles about
Veloria, a fictional island nation (fictional so that answers must come from
the pages, not from a model's memory), and 80 questions with short answers.
The tools:

- ``search_pages(query)``: BM25 search (``bm25s``) over page titles and text;
  the best pages with their ids and a snippet (the section that best matches);
- ``view_sections(page_id)``: a page's sections with their ids;
- ``read_section(section_id)``: one section's text.

The model answers inside ``<answer>...</answer>``. The reward compares the
answer with the reference after normalisation (case, punctuation, articles,
thousands separators, hedges like "about" and unit words like "metres"),
accepting listed aliases. ``use_judge=True`` adds an LLM judge
(``vf.JudgeRubric``) that decides correctness instead.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
from functools import lru_cache
from pathlib import Path
from typing import Any

import verifiers as vf
from verifiers.errors import ConfigError
from verifiers.utils.tool_utils import tool_call_example

CORPUS_FILE = Path(__file__).with_name("wiki_search_corpus.json")

SYSTEM_PROMPT = (
    "Call search_pages with words from the question; if its snippets do not hold the answer, "
    "view_sections and read_section read a page. Reply with a short answer (a name, a number or a "
    "few words) inside <answer> and </answer> tags."
)

_SUFFIXES = ("ies", "es", "s", "ing", "ed")
_FILLER = {"a", "an", "the", "about", "approximately", "around", "roughly", "circa", "some", "its"}
_UNITS = set(
    "m metre metres meter meters km kilometre kilometres kilometer kilometers cm centimetre centimetres "
    "centimeter centimeters kg kilogram kilograms kilos year years old people inhabitants pairs square sq "
    "km2 maps locks arches lumins animals".split()
)


def stem_words(words: list[str]) -> list[str]:
    """A light English stemmer (plural and -ing/-ed endings), enough to match 'cliffs' with 'cliff'."""
    out = []
    for word in words:
        for suffix in _SUFFIXES:
            if len(word) > len(suffix) + 3 and word.endswith(suffix):
                word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
                break
        out.append(word)
    return out


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, articles, hedges, units or thousands separators; single spaces."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower())
    text = "".join(" " if ch in string.punctuation and ch != "." else ch for ch in text)
    text = re.sub(r"\.(?!\d)", " ", text)  # keep decimal points only
    return " ".join(w for w in text.split() if w not in _FILLER and w not in _UNITS)


@lru_cache(maxsize=4)
def load_corpus(path: str = str(CORPUS_FILE)) -> dict[str, Any]:
    """The corpus file's ``pages`` and ``questions``."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def section_id(page_id: str, title: str) -> str:
    """A section's id: ``<page_id>:<section title in snake case>``."""
    return f"{page_id}:{re.sub(r'[^a-z0-9]+', '_', title.lower()).strip('_')}"


class WikiIndex:
    """The corpus, a BM25 index over whole pages, and the three tools as bound methods."""

    def __init__(self, pages: list[dict[str, Any]], max_results: int = 3):
        import bm25s

        self.pages = {page["id"]: page for page in pages}
        self.order = [page["id"] for page in pages]
        self.sections = {
            section_id(page["id"], s["title"]): (page, s) for page in pages for s in page["sections"]
        }
        self.max_results = max_results
        texts = [f"{p['title']}. {p['title']}. " + " ".join(s["text"] for s in p["sections"]) for p in pages]
        self._bm25s = bm25s
        self.retriever = bm25s.BM25()
        self.retriever.index(self._tokens(texts), show_progress=False)

    def _tokens(self, texts: list[str], vocab: bool = True):
        return self._bm25s.tokenize(
            texts, stopwords="en", stemmer=stem_words, show_progress=False, return_ids=vocab
        )

    def search(self, query: str, k: int | None = None) -> list[tuple[str, float]]:
        """``(page_id, score)`` of the best pages for ``query`` (only pages sharing a term)."""
        k = min(k or self.max_results, len(self.order))
        tokens = self._tokens([query], vocab=False)
        known = [[t for t in tokens[0] if t in self.retriever.vocab_dict]]
        if not known[0]:
            return []
        docs, scores = self.retriever.retrieve(known, k=k, show_progress=False)
        return [(self.order[int(d)], float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    # -- the tools ---------------------------------------------------------------

    def snippet(self, query: str, page_id: str) -> str:
        """The text of ``page_id``'s section sharing the most query terms (its title included; the
        first such section on a tie): often the answer itself, so one search can be enough. Terms
        of the page's title are left out: every section is about them."""
        page = self.pages[page_id]
        wanted = set(self._terms(query)) - set(self._terms(page["title"]))
        sections = page["sections"]
        shared = [len(wanted & set(self._terms(f"{s['title']} {s['text']}"))) for s in sections]
        return sections[shared.index(max(shared))]["text"]

    def _terms(self, text: str) -> list[str]:
        return self._tokens([text], vocab=False)[0]

    def search_pages(self, query: str) -> list[dict[str, str]]:
        """Search the wiki for pages about a topic.

        Args:
            query: Words to search for, e.g. a name or a subject.

        Returns:
            The best matching pages, each with its page_id, title and a snippet (the page's
            section that best matches the query).
        """
        hits = self.search(query)
        if not hits:
            return [{"note": f"no page matches {query!r}; try other words"}]
        return [
            {"page_id": pid, "title": self.pages[pid]["title"], "snippet": self.snippet(query, pid)}
            for pid, _ in hits
        ]

    def view_sections(self, page_id: str) -> list[dict[str, str]]:
        """List the sections of a wiki page.

        Args:
            page_id: A page_id returned by search_pages.

        Returns:
            The page's sections, each with its section_id and name.
        """
        page = self.pages.get(page_id.strip())
        if page is None:
            raise ValueError(f"no page with id {page_id!r}; use a page_id from search_pages")
        return [
            {"section_id": section_id(page["id"], s["title"]), "name": s["title"]} for s in page["sections"]
        ]

    def read_section(self, section_id: str) -> str:
        """Read one section of a wiki page.

        Args:
            section_id: A section_id returned by view_sections.

        Returns:
            The section's text.
        """
        found = self.sections.get(section_id.strip())
        if found is None:
            raise ValueError(f"no section with id {section_id!r}; use a section_id from view_sections")
        page, section = found
        return f"{page['title']} - {section['title']}\n{section['text']}"

    def tools(self) -> list:
        return [self.search_pages, self.view_sections, self.read_section]


# Worked questions (asked by no question of the corpus): one search, whose snippet holds the
# answer, then the answer. SmolLM2-135M copies this pattern (34 parsed calls in 128 first
# replies with four of them) where a three-call chain (search, sections, read) gave 1 in 128.
EXAMPLES = [
    ("Who is the present monarch of Veloria?", "monarch of Veloria", "Queen Ismene II"),
    ("What is the capital of Veloria?", "capital of Veloria", "Port Ashmere"),
    ("What is the national animal of Veloria?", "national animal of Veloria", "the Velorian ember fox"),
    (
        "Which library keeps the original Crane Atlas?",
        "Crane Atlas original",
        "the library of Ashmere University",
    ),
]


def few_shot(index: WikiIndex, num_examples: int) -> list[dict[str, Any]]:
    """The first ``num_examples`` worked questions, each search run on ``index`` for real."""
    messages: list[dict[str, Any]] = []
    for i, (question, query, answer) in enumerate(EXAMPLES[:num_examples]):
        call = ("search_pages", {"query": query}, index.search_pages(query))
        messages += tool_call_example(question, [[call]], f"<answer>{answer}</answer>", f"example_{i}")
    return messages


def load_environment(
    num_train_examples: int = -1,
    num_eval_examples: int = -1,
    max_turns: int = 8,
    max_results: int = 3,
    num_examples: int = 4,
    use_judge: bool = False,
    judge_model: str = "gpt-4.1-nano",
    judge_base_url: str | None = None,
    judge_api_key_var: str = "OPENAI_API_KEY",
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
) -> vf.Environment:
    """Build the wiki-search environment.

    Args:
        num_train_examples: training questions to keep (-1: all 60).
        num_eval_examples: evaluation questions to keep (-1: all 20).
        max_turns: most model turns per rollout.
        max_results: most pages search_pages returns.
        num_examples: worked questions (one search, then the answer) shown first (0 to 4).
        use_judge: also ask an LLM judge; its verdict becomes the reward (exact match is then tracked only).
        judge_model: the judge's model name.
        judge_base_url: the judge's OpenAI-compatible base URL (None: the OpenAI API).
        judge_api_key_var: environment variable holding the judge's API key.
        system_prompt: instructions shown to the model.
        seed: seed of the question split.
    """
    if not 0 <= num_examples <= len(EXAMPLES):
        raise ConfigError(
            f"num_examples must be 0 to {len(EXAMPLES)}, got {num_examples}", hint="e.g. num_examples=2"
        )
    from datasets import Dataset

    corpus = load_corpus()
    index = WikiIndex(corpus["pages"], max_results=max_results)
    rows = [
        {
            "question": q["question"],
            "answer": q["answer"],
            "info": {"page_id": q["page_id"], "aliases": q.get("aliases", [])},
        }
        for q in corpus["questions"]
    ]
    # Every fourth question (after a seeded shuffle) is held out for evaluation.
    rng = random.Random(seed)
    rows = sorted(rows, key=lambda _: rng.random())
    train, test = [r for i, r in enumerate(rows) if i % 4], rows[::4]
    train = train[:num_train_examples] if num_train_examples >= 0 else train
    test = test[:num_eval_examples] if num_eval_examples >= 0 else test

    parser = vf.XMLParser(["answer"], answer_field="answer")

    def exact_match(completion, answer, info, **_) -> float:
        """1.0 if the normalised answer equals the normalised reference or one of its aliases."""
        response = parser.parse_answer(completion)
        if response is None:
            return 0.0
        accepted = {normalize_answer(a) for a in [answer, *(info.get("aliases") or [])]}
        return 1.0 if normalize_answer(response) in accepted else 0.0

    tools = index.tools()
    funcs, weights = [exact_match, parser.get_format_reward_func()], [1.0, 0.2]
    if use_judge:
        client = None
        if judge_base_url:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(base_url=judge_base_url, api_key=os.environ.get(judge_api_key_var, "EMPTY"))
        judge_rubric = vf.JudgeRubric(judge_client=client, judge_model=judge_model, parser=parser)

        async def judge_correct(prompt, completion, answer, state, judge, **_) -> float:
            """1.0 if the judge model says the answer matches the reference."""
            verdict = await judge(prompt, completion, answer, state)
            return 1.0 if verdict.strip().lower().startswith("yes") else 0.0

        judge_rubric.add_reward_func(judge_correct)
        weights[0] = 0.0  # the judge decides; exact match is still reported
        rubric = vf.RubricGroup(
            [vf.Rubric(funcs=funcs, weights=weights, parser=parser), judge_rubric, vf.ToolRubric(tools=tools)]
        )
    else:
        rubric = vf.RubricGroup(
            [vf.Rubric(funcs=funcs, weights=weights, parser=parser), vf.ToolRubric(tools=tools)]
        )
    env = vf.ToolEnv(
        tools=tools,
        max_turns=max_turns,
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(test),
        system_prompt=system_prompt,
        few_shot=few_shot(index, num_examples),
        parser=parser,
        rubric=rubric,
    )
    env.wiki_index = index  # for tests and inspection
    return env
