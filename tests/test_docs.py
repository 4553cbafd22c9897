"""The docs cannot drift from the code: their examples run, their links resolve.

What is checked, page by page (``docs/*.md``):

* **Python blocks run.** Every fenced block whose info string starts with
  ``python`` is executed. A page's blocks run in order, in one namespace, in a
  fresh interpreter (one subprocess per page, working directory a temporary
  folder, offline, ``PAGE_TIMEOUT_S`` per page). A failure names the Markdown
  file and line: blocks are compiled so that traceback line numbers are line
  numbers of the ``.md`` file.
* **Links resolve.** Every relative link ``[text](path#anchor)`` points to an
  existing file, and an anchor into a Markdown file names one of its headings.
* **Commands exist.** Every ``vf-*`` command named in the docs is a console
  script in ``setup.py``; command lines of the argparse CLIs (``vf-eval``,
  ``vf-init``, ``vf-install``, ``vf-models``) inside ``bash`` blocks parse with
  the real parser, so a renamed or removed flag fails here.
* **TOML blocks parse** (``tomllib``).
* **The GRPOConfig table** in ``docs/training.md`` lists every field that
  ``GRPOConfig`` defines, with the default the code has.
* **The API reference is current**: ``docs/api/*.md`` equals what
  ``scripts/gen_api_docs.py`` generates now.

Conventions for writing docs (the info string is what follows the opening backticks):

* ````` ```python ````` : runs.
* ````` ```python no-test: <reason> ````` : never runs (a GPU, a cluster, the network).
  Each one is reported as a skipped test with its reason; keep them few
  (``MAX_NO_TEST_BLOCKS``) and never use this for a block that merely fails.
* ````` ```python server ````` : needs a real ``vf-vllm`` server serving the tiny
  test model (training examples). Such a page runs completely (all its blocks)
  in ``test_server_page`` (``-m server``), which starts ``vf-vllm`` with the
  tiny model from ``tests/conftest.py`` and rewrites, in that page's code, the
  URL ``http://127.0.0.1:8000`` to the server's, ``vllm_server_port=8000`` to
  its port, and the model id ``DOCS_MODEL_ID`` to the tiny model's folder. The
  fast test runs the page's other blocks and skips these, so a block that uses
  what a ``server`` block made must be a ``server`` block itself.
  **Pending**: while ``TRAINER_DOCS_READY`` is False these blocks are reported
  as skipped; the lead flips it once GRPOTrainer trains against vf-vllm.
* ``<!-- docs-test: fake-server -->`` anywhere on a page: a local fake
  OpenAI-compatible server (``tests/doubles/openai_server.py``) runs for the whole page,
  and every ``http://127.0.0.1:8000/v1`` / ``http://localhost:8000/v1`` in the
  page's Python is rewritten to its URL, so examples read like code for a local
  vLLM server. The namespace also has ``base_url`` (that URL) and
  ``fake_server`` (the server object). The fake model's answer comes from a
  function ``fake_reply(request: dict) -> str | dict`` if the page defines one
  (usually in a hidden setup block), else it echoes the last user message.
* A hidden setup block is an HTML comment that readers do not see::

      <!-- docs-test-setup
      def fake_reply(request): ...
      -->

  It runs at its place in the page, like a visible block. ``<!-- docs-test-setup
  server`` makes it a ``server`` block. Hidden blocks may read ``_last_output``,
  what the last visible block printed, to check that output shown on the page
  (start-up lines, step lines) is what the code prints, and ``__docs_page__``,
  the page's path, to check a table on the page against what the code did.

Bundled environments (``environments/*/``) are importable in the page runs, as
if installed.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE_TIMEOUT_S = 120
MAX_NO_TEST_BLOCKS = 8
TRAINER_DOCS_READY = True
"""Flip to True once GRPOTrainer trains against a real vf-vllm: ``python server`` blocks then run
(``VF_DOCS_TRAINER=1`` runs them before that, to try)."""
PENDING_COMMANDS: set[str] = set()
"""Console scripts declared in setup.py whose modules do not exist yet (the docs mark them TODO)."""
DOCS_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The model id training examples use; server runs swap it for the tiny test model."""
LOCAL_URLS = ("http://127.0.0.1:8000/v1", "http://localhost:8000/v1")
ARGPARSE_CLIS = {
    "vf-eval": "verifiers.cli.eval",
    "vf-init": "verifiers.cli.init",
    "vf-install": "verifiers.cli.install",
    "vf-models": "verifiers.cli.models",
    "vf-setup": "verifiers.cli.setup",
}
TOML_CLIS = {"vf-rl": "verifiers.cli.rl.plan", "vf-train": "verifiers.cli.train"}

# -- parsing pages ------------------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})(?P<info>[^`]*)$")
SETUP_OPEN = re.compile(r"^\s*<!--\s*docs-test-setup(?P<tags>(?:\s+[\w-]+)*)\s*$")
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<name>[\w-]+)\s*-->")


@dataclass
class Block:
    page: Path
    lang: str  # "python", "bash", "toml", ... ("" for a bare fence)
    tags: list[str]  # words after the language: no-test, server, setup
    reason: str  # text after "no-test:"
    code: str
    line: int  # line number (1-based) of the block's first code line

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang == "python" and "no-test" not in self.tags


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    directives: set[str] = field(default_factory=set)
    text: str = ""

    @property
    def python(self) -> list[Block]:
        return [b for b in self.blocks if b.runs]

    @property
    def needs_server(self) -> bool:
        return any("server" in b.tags for b in self.python)


def parse_info(info: str) -> tuple[str, list[str], str]:
    info = info.strip()
    reason = ""
    if "no-test:" in info:
        info, reason = info.split("no-test:", 1)
        info, reason = info + " no-test", reason.strip()
    words = info.split()
    return (words[0].lower() if words else ""), words[1:], reason


def parse_page(path: Path) -> Page:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    page = Page(path=path, text=text)
    page.directives = {m.group("name") for m in DIRECTIVE.finditer(text)}
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        setup = SETUP_OPEN.match(line)
        if setup:
            j = i + 1
            while j < len(lines) and lines[j].strip() != "-->":
                j += 1
            tags = ["setup", *setup.group("tags").split()]
            page.blocks.append(Block(path, "python", tags, "", "\n".join(lines[i + 1 : j]), i + 2))
            i = j + 1
            continue
        if fence:
            indent, ticks = fence.group("indent"), fence.group("ticks")
            lang, tags, reason = parse_info(fence.group("info"))
            j = i + 1
            body: list[str] = []
            while j < len(lines) and not re.match(rf"^\s*{ticks}`*\s*$", lines[j]):
                raw = lines[j]
                body.append(raw[len(indent) :] if raw.startswith(indent) else raw.lstrip())
                j += 1
            page.blocks.append(Block(path, lang, tags, reason, "\n".join(body), i + 2))
            i = j + 1
            continue
        i += 1
    return page


def doc_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def all_markdown() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


PAGES = {p.name: parse_page(p) for p in doc_pages()}


# -- running a page (in a subprocess) -----------------------------------------------------------


def _rewrite(code: str, subs: list[tuple[str, str]]) -> str:
    for old, new in subs:
        code = code.replace(old, new)
    return code


class _Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy (a block's printed output, for hidden checks)."""

    def __init__(self, out, copy: io.StringIO):
        self.out, self.copy = out, copy

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def run_page(path: str, mode: str, server_url: str | None, model_dir: str | None) -> int:
    """Body of the page subprocess: run the page's blocks in order in one namespace.

    ``mode`` is ``fast`` (stop before the first ``server`` block) or ``server``
    (run everything; ``server_url`` / ``model_dir`` name the real server and model).
    """
    page = parse_page(Path(path))
    rel = str(Path(path).resolve().relative_to(ROOT))
    ns: dict = {"__name__": "__main__", "__docs_page__": str(Path(path).resolve())}
    subs: list[tuple[str, str]] = []
    fake = None
    if "fake-server" in page.directives:
        from tests.doubles.openai_server import FakeServer, default_reply

        def reply(request: dict):
            fn = ns.get("fake_reply")
            return fn(request) if callable(fn) else default_reply(request)

        fake = FakeServer(reply=reply).start()
        subs += [(u, fake.url) for u in LOCAL_URLS]
        ns.update(base_url=fake.url, fake_server=fake)
    if mode == "server":
        assert server_url and model_dir
        port = server_url.rsplit(":", 1)[1].split("/")[0]
        subs += [
            ("http://127.0.0.1:8000", server_url),
            ("http://localhost:8000", server_url),
            ("vllm_server_port=8000", f"vllm_server_port={port}"),
            (DOCS_MODEL_ID, model_dir),
        ]
    try:
        for block in page.python:
            if mode == "fast" and "server" in block.tags:
                print(f"[docs-test] {rel}:{block.line} skipped (needs a vf-vllm server)", file=sys.stderr)
                continue
            started = time.perf_counter()
            code = compile("\n" * (block.line - 1) + _rewrite(block.code, subs), rel, "exec")
            captured = io.StringIO()
            try:
                with contextlib.redirect_stdout(_Tee(sys.stdout, captured)):
                    exec(code, ns)
            except BaseException:
                print(f"[docs-test] block at {rel}:{block.line} failed:", file=sys.stderr)
                traceback.print_exc()
                return 1
            if "setup" not in block.tags:
                ns["_last_output"] = captured.getvalue()
            print(
                f"[docs-test] {rel}:{block.line} ok ({time.perf_counter() - started:.1f}s)", file=sys.stderr
            )
    finally:
        if fake is not None:
            fake.stop()
    return 0


def page_env() -> dict[str, str]:
    env = dict(os.environ)
    bundled = [str(p) for p in sorted((ROOT / "environments").glob("*/")) if p.is_dir()]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *bundled, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("OPENAI_API_KEY", "EMPTY")
    return env


def run_page_subprocess(
    page: Page, tmp_path: Path, mode: str, server_url: str | None = None, model_dir: str | None = None
) -> None:
    cmd = [
        sys.executable,
        "-c",
        "import sys; from tests.test_docs import run_page; sys.exit(run_page(*sys.argv[1:]))",
        str(page.path),
        mode,
        server_url or "",
        model_dir or "",
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=page_env(), capture_output=True, text=True, timeout=PAGE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as e:
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{page.path.name} took longer than {PAGE_TIMEOUT_S}s\n{err[-4000:]}")
    if os.environ.get("VF_DOCS_VERBOSE"):  # with pytest -s: the page's output, even when it passed
        print(f"--- {page.path.name} stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    if proc.returncode != 0:
        pytest.fail(
            f"a Python block of docs/{page.path.name} failed\n--- stderr ---\n{proc.stderr[-8000:]}"
            f"\n--- stdout ---\n{proc.stdout[-3000:]}",
            pytrace=False,
        )


# -- tests: code blocks -------------------------------------------------------------------------

RUNNABLE = [name for name, p in PAGES.items() if p.python]


@pytest.mark.parametrize("name", RUNNABLE)
def test_page_python_blocks_run(name: str, tmp_path: Path) -> None:
    """Every runnable Python block of the page, in order, in one fresh interpreter."""
    page = PAGES[name]
    if all("server" in b.tags for b in page.python):
        pytest.skip(f"{name}: every block needs a vf-vllm server (see test_server_page)")
    run_page_subprocess(page, tmp_path, "fast")


SERVER_PAGES = [name for name, p in PAGES.items() if p.needs_server]


@pytest.fixture(scope="module")
def vf_vllm_server(tiny_model_dir, tmp_path_factory):
    """A real vf-vllm serving the tiny model on a free loopback port (vLLM CPU: about 40 s to start)."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("vf-vllm") / "server.log"
    env = page_env()
    from tests.doubles.vllm_server import VLLM_CACHE_ROOT

    env.setdefault("VLLM_CACHE_ROOT", VLLM_CACHE_ROOT)
    cmd = [sys.executable, "-m", "verifiers.cli.vllm", "--model", str(tiny_model_dir), "--port", str(port)]
    cmd += ["--enforce-eager", "--dtype", "float32", "--max-model-len", "1024"]
    cmd += ["--kv-cache-memory-bytes", str(256 << 20), "--max-num-seqs", "32"]
    cmd += ["--enable-lora", "--max-lora-rank", "16"]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vf-vllm exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{url}/vf/health", timeout=2) as r:
                    if json.loads(r.read()).get("status") == "ready":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vf-vllm not ready after 300 s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield url
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.server
@pytest.mark.parametrize("name", SERVER_PAGES)
def test_server_page(name: str, request, tmp_path: Path) -> None:
    """Pages with training examples, run completely against a real vf-vllm and the tiny model."""
    if not TRAINER_DOCS_READY:
        pytest.skip(
            f"{name}: `python server` blocks pending (TRAINER_DOCS_READY is False in tests/test_docs.py)"
        )
    url = request.getfixturevalue("vf_vllm_server")
    model_dir = request.getfixturevalue("tiny_model_dir")
    run_page_subprocess(PAGES[name], tmp_path, "server", url, str(model_dir))


NO_TEST = [b for p in PAGES.values() for b in p.blocks if b.lang == "python" and "no-test" in b.tags]


@pytest.mark.parametrize("where", [b.where for b in NO_TEST] or ["(none)"])
def test_no_test_block_is_reported(where: str) -> None:
    """Lists each block that never runs, with its reason, in pytest's skip summary (-ra)."""
    block = next((b for b in NO_TEST if b.where == where), None)
    if block is None:
        return
    pytest.skip(f"no-test block at {where}: {block.reason}")


def test_no_test_blocks_are_few_and_explained() -> None:
    assert len(NO_TEST) <= MAX_NO_TEST_BLOCKS, [b.where for b in NO_TEST]
    unexplained = [b.where for b in NO_TEST if not b.reason]
    assert not unexplained, f"give a reason after 'no-test:' at {unexplained}"


def test_python_blocks_are_valid_python() -> None:
    """Syntax of every Python block, including the ones that do not run."""
    for page in PAGES.values():
        for block in page.blocks:
            if block.lang == "python":
                try:
                    ast.parse(block.code)
                except SyntaxError as e:
                    pytest.fail(f"{block.where}: {e}")


def test_unknown_block_tags() -> None:
    known = {"no-test", "server", "setup"}
    for page in PAGES.values():
        for block in page.blocks:
            if block.lang == "python":
                unknown = [t for t in block.tags if t not in known]
                assert not unknown, f"{block.where}: unknown tag(s) {unknown}; use one of {sorted(known)}"


# -- tests: links, commands, TOML -----------------------------------------------------------------

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def heading_slugs(path: Path) -> set[str]:
    """GitHub-style anchors of a Markdown file's headings (lowercase, punctuation dropped, spaces -> '-')."""
    text = re.sub(r"^\s*(`{3,}).*?^\s*\1\s*$", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    slugs: set[str] = set()
    seen: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def test_relative_links_resolve() -> None:
    problems = []
    for path in all_markdown():
        text = path.read_text(encoding="utf-8")
        body = re.sub(r"^\s*(`{3,}).*?^\s*\1\s*$", "", text, flags=re.S | re.M)
        body = re.sub(r"`[^`\n]*`", "", body)  # a link inside inline code is not a link
        for m in LINK.finditer(body):
            target = m.group("target")
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                problems.append(f"{path.relative_to(ROOT)}: link to missing {target}")
            elif anchor and dest.suffix == ".md" and anchor not in heading_slugs(dest):
                problems.append(f"{path.relative_to(ROOT)}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not problems, "\n".join(problems)


def test_every_page_is_reachable_from_the_overview() -> None:
    """Each docs page can be found by following links from docs/overview.md."""
    seen, todo = set(), [DOCS / "overview.md"]
    while todo:
        page = todo.pop().resolve()
        if page in seen or not page.exists() or page.suffix != ".md" or DOCS.resolve() not in page.parents:
            continue
        seen.add(page)
        for m in LINK.finditer(page.read_text(encoding="utf-8")):
            target = m.group("target").partition("#")[0]
            if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                todo.append(page.parent / target)
    unreachable = sorted(str(p.relative_to(ROOT)) for p in all_markdown() if p.resolve() not in seen)
    assert not unreachable, f"pages no link leads to from docs/overview.md: {unreachable}"


def console_scripts() -> dict[str, str]:
    """``name -> module:function`` from setup.py's console_scripts (read without running setup.py)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    scripts: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    for item in ast.literal_eval(value):
                        name, target = (s.strip() for s in item.split("=", 1))
                        scripts[name] = target
    return scripts


COMMAND = re.compile(r"""(?<![\w/.'"-])(vf-[a-z][a-z0-9-]*[a-z0-9])(?!['"])""")
"""A ``vf-*`` command name; quoted strings (``'vf-lora'``, a default value) are not commands."""


def test_commands_named_in_docs_exist() -> None:
    scripts = console_scripts()
    assert scripts, "no console_scripts found in setup.py"
    named: dict[str, str] = {}
    for path in all_markdown():
        for m in re.finditer(COMMAND, path.read_text(encoding="utf-8")):
            named.setdefault(m.group(1), str(path.relative_to(ROOT)))
    missing = {cmd: where for cmd, where in named.items() if cmd not in scripts}
    assert not missing, f"commands named in the docs but not console scripts in setup.py: {missing}"
    import importlib.util

    unresolved, landed = [], []
    for cmd in sorted(named):
        module = scripts[cmd].split(":")[0]
        found = importlib.util.find_spec(module) is not None
        if cmd in PENDING_COMMANDS:
            if found:
                landed.append(cmd)
        elif not found:
            unresolved.append(f"{cmd} -> {scripts[cmd]}")
    assert not unresolved, f"console scripts whose module does not exist: {unresolved}"
    if landed:
        warnings.warn(
            f"{landed} now exist: check their docs against the code, resolve the TODO lines, "
            "and remove them from PENDING_COMMANDS in tests/test_docs.py",
            stacklevel=1,
        )


def _command_lines(block: Block) -> list[list[str]]:
    """Argument lists of the shell commands in a bash block (continuations joined; pipes split)."""
    text = re.sub(r"\\\n\s*", " ", block.code)
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            if words:
                out.append(words)
    return out


def test_documented_cli_invocations_parse() -> None:
    """``vf-eval ...`` (and the other argparse CLIs) in bash blocks parse with the real parser."""
    import importlib

    checked = 0
    for page in PAGES.values():
        for block in page.blocks:
            if block.lang not in ("bash", "sh", "shell", "console"):
                continue
            for words in _command_lines(block):
                if words and words[0] == "$":
                    words = words[1:]
                if words and words[0] in TOML_CLIS:
                    check_toml_cli(block, words)
                    checked += 1
                    continue
                if not words or words[0] not in ARGPARSE_CLIS or "--help" in words or "-h" in words:
                    continue
                parser = importlib.import_module(ARGPARSE_CLIS[words[0]]).build_parser()
                try:
                    parser.parse_args(words[1:])
                except SystemExit:
                    pytest.fail(
                        f"{block.where}: `{shlex.join(words)}` does not parse with {words[0]}'s parser"
                    )
                checked += 1
    assert checked > 0, "expected documented vf-eval / vf-init command lines"


def check_toml_cli(block: Block, words: list[str]) -> None:
    """A documented ``vf-rl`` / ``vf-train`` line: its arguments parse, and when its config file is
    in the repository, the config with the line's overrides validates."""
    pytest.importorskip("transformers")
    import importlib

    from verifiers.cli.run_config.load import load_config, parse_command_line

    module = importlib.import_module(TOML_CLIS[words[0]])
    flags = getattr(module, "FLAGS", {})
    try:
        cli = parse_command_line(words[1:], words[0], flags, "")
    except Exception as e:
        pytest.fail(f"{block.where}: `{shlex.join(words)}`: {e}")
    config = ROOT / cli.config
    if config.is_file():
        try:
            load_config(config, cli.overrides)
        except Exception as e:
            pytest.fail(f"{block.where}: `{shlex.join(words)}`: {e}")


def test_toml_blocks_parse() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    for page in PAGES.values():
        for block in page.blocks:
            if block.lang == "toml":
                try:
                    raw = tomllib.loads(block.code)
                except Exception as e:
                    pytest.fail(f"{block.where}: {e}")
                if "vf-rl" in block.tags:  # a vf-rl / vf-train config: validate it like vf-rl does
                    pytest.importorskip("transformers")
                    from verifiers.cli.run_config.load import parse_config

                    try:
                        parse_config(raw)
                    except Exception as e:
                        pytest.fail(f"{block.where}: not a valid vf-rl config: {e}")


# -- tests: tables that restate code ------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n") + len(heading)
    nxt = re.search(rf"^#{{1,{level}}} ", text[start:], flags=re.M)
    return text[start : start + nxt.start()] if nxt else text[start:]


def _table_defaults(section: str) -> dict[str, str]:
    """``field -> default`` from table rows written ``| `field` | `default` | ... |``."""
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\|\s*`(\w+)`\s*\|\s*`([^`]*)`\s*\|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def _default_repr(f) -> str:
    import dataclasses

    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "(required)"


def _compare_table(rows: dict[str, str], fields: list, where: str, require_all: bool = True) -> list[str]:
    problems = []
    by_name = {f.name: f for f in fields}
    for f in fields:
        if f.name not in rows:
            if require_all:
                problems.append(f"{where}: {f.name} is missing from the table")
        elif rows[f.name] != _default_repr(f):
            problems.append(
                f"{where}: {f.name}: the table says {rows[f.name]}, the code has {_default_repr(f)}"
            )
    problems += [f"{where}: {n} is in the table but is not a field" for n in rows if n not in by_name]
    return problems


def test_grpo_config_table_matches_the_code() -> None:
    """docs/training.md lists every field GRPOConfig defines, each with the code's default; its table of
    inherited fields is checked too when the installed transformers is the version the page names."""
    transformers = pytest.importorskip("transformers")
    import dataclasses
    import inspect

    from verifiers.training.config.fields import GRPOConfig

    text = (DOCS / "training.md").read_text(encoding="utf-8")
    reference = _section(text, "## GRPOConfig reference")
    inherited_heading = "### Inherited fields you will use"
    inherited = _section(reference, inherited_heading)
    own_rows = _table_defaults(reference.replace(inherited, ""))
    mine = inspect.get_annotations(GRPOConfig)
    own = [f for f in dataclasses.fields(GRPOConfig) if f.name in mine]
    problems = _compare_table(own_rows, own, "GRPOConfig")
    inherited_rows = _table_defaults(inherited)
    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    problems += [f"inherited: {n} is not a GRPOConfig field" for n in inherited_rows if n not in fields]
    documented = re.search(r"transformers (\d+\.\d+)", inherited)
    if documented and transformers.__version__.startswith(documented.group(1) + "."):
        picked = [fields[n] for n in inherited_rows if n in fields]
        problems += _compare_table(inherited_rows, picked, "inherited")
    assert not problems, "\n".join(problems)


def test_rl_config_table_matches_the_code() -> None:
    """docs/rl-trainer.md lists every RLConfig field with the code's default."""
    pytest.importorskip("transformers")
    import dataclasses

    from verifiers.training.rl.config import RLConfig

    text = (DOCS / "rl-trainer.md").read_text(encoding="utf-8")
    rows = _table_defaults(_section(text, "## RLConfig reference").split("### ")[0])
    problems = _compare_table(rows, list(dataclasses.fields(RLConfig)), "RLConfig")
    assert not problems, "\n".join(problems)


def test_todo_lines_are_listed() -> None:
    """Reports the docs' TODO lines (things to re-check once pending code lands) as a skip reason."""
    todos = []
    for path in doc_pages():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "TODO" in line:
                todos.append(f"{path.relative_to(ROOT)}:{number}")
    if todos:
        pytest.skip(f"{len(todos)} TODO line(s) in the docs: {', '.join(todos)}")


# -- tests: API reference -----------------------------------------------------------------------


def test_api_reference_is_current() -> None:
    """docs/api/ is what scripts/gen_api_docs.py writes now (regenerate: python scripts/gen_api_docs.py)."""
    for module in ("torch", "transformers", "peft", "requests"):  # the reference covers the training API
        pytest.importorskip(module)
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_api_docs
    finally:
        sys.path.pop(0)
    pages = gen_api_docs.generate()
    stale = []
    for name, content in pages.items():
        path = DOCS / "api" / name
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            stale.append(name)
    orphans = sorted(p.name for p in (DOCS / "api").glob("*.md") if p.name not in pages)
    assert not stale and not orphans, (
        f"docs/api is out of date (stale: {stale}, not generated: {orphans}); "
        "run: python scripts/gen_api_docs.py"
    )


# -- tests: the layout -------------------------------------------------------------------------


def test_architecture_names_every_module_and_only_modules() -> None:
    """docs/architecture.md's Layout names every module under verifiers/ (a path relative to it; a
    package by its folder, ``training/loss/``) and names nothing that does not exist."""
    text = _section((DOCS / "architecture.md").read_text(encoding="utf-8"), "## Layout")
    named = set(re.findall(r"`([\w/]+(?:\.py|/))`", text))
    package = ROOT / "verifiers"
    modules = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).as_posix()
        if path.name == "__init__.py" and rel != "__init__.py":
            rel = rel[: -len("__init__.py")]  # the package's folder: "training/loss/"
        modules.add(rel)
    missing, stale = sorted(modules - named), sorted(named - modules)
    assert not missing and not stale, (
        f"docs/architecture.md, section Layout: add a line for {missing}; "
        f"these are not modules (any more): {stale}"
    )


def test_module_paths_in_the_docs_exist() -> None:
    """A ``verifiers/....py`` path anywhere in docs/ or the README is a file (the layout moved them once)."""
    problems = []
    for path in [*all_markdown(), ROOT / "README.md"]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"(?<![\w/.])verifiers/[\w/]+\.py\b", line):
                if not (ROOT / m.group(0)).is_file():
                    problems.append(f"{path.relative_to(ROOT)}:{number}: {m.group(0)}")
    assert not problems, "paths that do not exist:\n" + "\n".join(problems)
