"""Tools for every model: a tool-aware chat template where the model's own ignores ``tools``.

Many small chat models (SmolLM2 among them) have a chat template that drops the
``tools`` argument: the model never sees a tool schema, so tool environments cannot
learn. :func:`effective_chat_template` detects that (it renders one conversation
with and without a tool and compares) and then returns the model's template with
``verifiers/data/tool_template.jinja`` in front of it: that preamble moves the tool
schemas into the system message, writes assistant ``tool_calls`` as Hermes
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks and tool results
as ``<tool_response>`` blocks, and leaves everything else to the model's template,
so the model keeps its own format (ChatML for SmolLM2). vLLM's ``hermes`` tool-call
parser (:data:`TOOL_CALL_PARSER`) reads the model's blocks back into ``tool_calls``.

One decision, two sides: ``vf-vllm`` serves with this template (unless given
``--chat-template`` or ``--no-tool-template``), and the trainer renders prompts
with the same function (``verifiers/tokenization/assembly.py``), so token counts and
retokenized rollouts match what the server saw. ``$VF_CHAT_TEMPLATE`` makes the
trainer side follow a server started otherwise: a template file (the server's
``--chat-template``) or ``model`` (the model's own, ``--no-tool-template``);
``vf-rl`` sets it from ``[inference.args]``.

``python -m verifiers.tokenization.chat_template MODEL [-o FILE]`` writes the template
to use, e.g. for ``vllm serve MODEL --chat-template FILE --enable-auto-tool-choice
--tool-call-parser hermes``.

Only the standard library at import; transformers is used through the tokenizer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError

TEMPLATE_FILE = Path(__file__).resolve().parent.parent / "data" / "tool_template.jinja"
MARKER = "verifiers tool template"
TOOL_CALL_PARSER = "hermes"
ENV_VAR = "VF_CHAT_TEMPLATE"
MODEL_OWN = "model"  # $VF_CHAT_TEMPLATE value: the model's own template, no tool fallback

# A tool and a conversation for the detection; the name is unlikely in any template.
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "vf_probe_tool_7d1c",
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}
_PROBE_MESSAGES = [{"role": "user", "content": "hi"}]

__all__ = [
    "ENV_VAR",
    "TOOL_CALL_PARSER",
    "effective_chat_template",
    "is_tool_template",
    "own_chat_template",
    "renders_tools",
    "server_messages",
    "server_tools",
    "tool_preamble",
    "wrap_chat_template",
    "write_template",
]

_cache: dict[tuple[type, str], str] = {}  # (who renders, its template) -> the template to use


def tool_preamble() -> str:
    """The shipped Jinja preamble (without its final newline, which would reach the output)."""
    return TEMPLATE_FILE.read_text(encoding="utf-8").rstrip("\n")


def is_tool_template(template: Any) -> bool:
    """Whether ``template`` is (or starts with) verifiers' tool template."""
    return isinstance(template, str) and MARKER in template[:200]


def wrap_chat_template(template: str) -> str:
    """``template`` with the tool preamble in front (unchanged if it has it already)."""
    return template if is_tool_template(template) else tool_preamble() + template


def own_chat_template(processing_class: Any) -> Any:
    """The template ``processing_class`` (a tokenizer, or a processor with one) renders with by default."""
    template = getattr(processing_class, "chat_template", None)
    if template is None:
        template = getattr(getattr(processing_class, "tokenizer", None), "chat_template", None)
    return template


def _render(tokenizer: Any, template: str, tools: list[dict] | None) -> str:
    kw: dict[str, Any] = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(
        _PROBE_MESSAGES, chat_template=template, tokenize=False, add_generation_prompt=True, **kw
    )


def renders_tools(processing_class: Any, template: str | None = None) -> bool | None:
    """Whether ``template`` (default: the tokenizer's), rendered by ``processing_class``, shows ``tools``.

    Renders a one-message conversation with and without a probe tool: equal text means
    the template drops tools. None when the template cannot render that conversation
    (nothing to decide from). A template that fails only when given tools cannot show
    them either: False.
    """
    template = template if template is not None else own_chat_template(processing_class)
    if not isinstance(template, str) or not template:
        return None
    try:
        plain = _render(processing_class, template, None)
    except Exception:  # noqa: BLE001 - a template that cannot render a user turn: leave it alone
        return None
    try:
        with_tools = _render(processing_class, template, [_PROBE_TOOL])
    except Exception:  # noqa: BLE001 - the template rejects tools
        return False
    return with_tools != plain


def _template_from_env(value: str, own: str | None) -> str | None:
    if value == MODEL_OWN:
        return own
    path = Path(value).expanduser()
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if "{" in value:  # vLLM's --chat-template also takes the template itself
        return value
    raise ConfigError(
        f"${ENV_VAR}={value!r} is neither a template file nor {MODEL_OWN!r}",
        hint=f"set it to the server's --chat-template file, to {MODEL_OWN!r} (--no-tool-template), or unset it",
    )


def effective_chat_template(processing_class: Any) -> str | None:
    """The chat template the server renders with: the model's own, or it wrapped with the tool preamble.

    Wrapped when the model's template drops ``tools`` (:func:`renders_tools` is False);
    a template that is already verifiers' tool template, or that renders tools, is
    returned as is. ``$VF_CHAT_TEMPLATE`` overrides (see the module docstring). None
    when the tokenizer has no template. The decision is cached per template.
    """
    own = own_chat_template(processing_class)
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return _template_from_env(env, own)
    if not isinstance(own, str) or not own:
        return own
    key = (type(processing_class), own)
    if key not in _cache:
        needs = not is_tool_template(own) and renders_tools(processing_class, own) is False
        _cache[key] = wrap_chat_template(own) if needs else own
    return _cache[key]


def write_template(template: str, folder: str | os.PathLike) -> Path:
    """Write ``template`` to ``folder/tool-template-<hash>.jinja`` (atomically, once) and return the path."""
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()[:16]
    folder = Path(folder).expanduser()
    path = folder / f"tool-template-{digest}.jinja"
    if path.is_file() and path.read_text(encoding="utf-8") == template:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_text(template, encoding="utf-8")
    os.replace(tmp, path)
    return path


# -- the messages and tools as vLLM hands them to the template ---------------------------------


def _arguments_as_dict(arguments: Any) -> dict[str, Any]:
    """vLLM's reading of a tool call's ``arguments``: a JSON object, else ``{}``."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str) and arguments:
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def server_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as vLLM passes them to a chat template: tool-call arguments parsed into dicts.

    Why: the client sends arguments as JSON strings and vLLM renders them as objects;
    rendering the strings on the trainer side could differ from what the server saw.
    """
    out = []
    for msg in messages:
        msg = dict(msg)
        calls = msg.get("tool_calls")
        if msg.get("role") == "assistant" and isinstance(calls, list):
            if not calls:
                msg.pop("tool_calls")
            else:
                fixed = []
                for call in calls:
                    call = dict(call) if isinstance(call, Mapping) else call
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, Mapping):
                        call["function"] = {**fn, "arguments": _arguments_as_dict(fn.get("arguments"))}
                    fixed.append(call)
                msg["tool_calls"] = fixed
        out.append(msg)
    return out


def server_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``tools`` as vLLM passes them to a chat template (its request model's fields, in its order)."""
    if not tools:
        return None
    out = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else {}
        dumped: dict[str, Any] = {
            "name": fn.get("name"),
            "description": fn.get("description"),
            "parameters": fn.get("parameters"),
        }
        for optional in ("strict", "defer_loading"):
            if fn.get(optional) is not None:
                dumped[optional] = fn[optional]
        out.append({"type": tool.get("type", "function"), "function": dumped})
    return out


# -- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Print (or write with ``-o``) the chat template vf-vllm would serve a model with."""
    parser = argparse.ArgumentParser(
        prog="python -m verifiers.tokenization.chat_template",
        description="Write the chat template vf-vllm serves MODEL with (its own, or with the tool preamble).",
    )
    parser.add_argument("model", help="model folder, hub id, or 'smollm2'")
    parser.add_argument("-o", "--out", help="write the template to this file instead of printing it")
    args = parser.parse_args(argv)
    try:
        from verifiers.models import SMOLLM2_ALIASES, get_tokenizer, smollm2_tokenizer_dir

        # "smollm2": its tokenizer alone, without converting the whole model
        smol = args.model.lower() in SMOLLM2_ALIASES and not Path(args.model).exists()
        tokenizer = get_tokenizer(smollm2_tokenizer_dir() if smol else args.model)
        template = effective_chat_template(tokenizer) or ""
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    wrapped = is_tool_template(template)
    if args.out:
        Path(args.out).write_text(template, encoding="utf-8")
    else:
        sys.stdout.write(template)
    what = "the model's template with verifiers' tool preamble" if wrapped else "the model's own template"
    flags = (
        f" (serve it with --enable-auto-tool-choice --tool-call-parser {TOOL_CALL_PARSER})" if wrapped else ""
    )
    print(f"{args.out or 'printed'}: {what}{flags}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
