"""Typed containers passed between stages.

Data flows one way: dataset row -> ``Environment.rollout`` (a ``State`` holding
one ``TurnTokens`` per assistant turn) -> ``Rubric`` (``RolloutScore``) ->
``GenerateOutputs`` -> ``process_env_results`` (``ProcessedOutputs``) -> trainer.
Only the trainer turns these into dicts of tensors.

The OpenAI response and message types that 0.1.x code imports from here
(``ChatCompletion``, ``Completion``, ``ModelResponse``, ...) resolve lazily, on
first use, so ``import verifiers`` does not import ``openai``.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict, Union

# Re-exported: the typed failure a rollout state carries (defined with its kinds in failures.py).
from verifiers.failures import FailureKind, RolloutFailure  # noqa: F401

ChatMessage = dict[str, Any]
"""An OpenAI chat message: ``{"role": ..., "content": ..., ["tool_calls" | "tool_call_id"]}``."""
Messages = Union[str, list[ChatMessage]]
"""A prompt or completion: a string (completion API) or a list of chat messages."""
MessageType = Literal["chat", "completion"]
State = dict[str, Any]
"""A rollout's state: a dict, so code written for 0.1.x reads and adds keys as before. The keys
every state has are listed in docs/architecture.md ("Rollout state"); ``state["failure"]`` is
typed: ``None`` or a ``RolloutFailure`` (``kind``: a ``FailureKind``, ``message``)."""
Info = dict[str, Any]
SamplingArgs = dict[str, Any]
RewardFunc = Callable[..., Union[float, Awaitable[float]]]
Message = Union[str, ChatMessage]
"""One message: a chat message dict, or text (completion API)."""
JsonPrimitive = Literal["string", "number", "integer", "boolean", "array", "object"]
"""The JSON Schema type names a tool parameter may have."""


def message_field(message: Any, key: str, default: Any = None) -> Any:
    """Read ``key`` from a chat message that is a dict or an object with attributes (the openai
    client's pydantic messages)."""
    if isinstance(message, dict):
        return message.get(key, default)
    return getattr(message, key, default)


class Endpoint(TypedDict):
    """One entry of a ``vf-eval -e`` endpoints file: API-key variable, base URL, model id."""

    key: str
    url: str
    model: str


Endpoints = dict[str, Endpoint]

# 0.1.x re-exported these openai types from here; name -> "module:attribute".
_OPENAI_TYPES: dict[str, str] = {
    "ChatCompletion": "openai.types.chat.chat_completion:ChatCompletion",
    "ChatCompletionMessageParam": "openai.types.chat.chat_completion_message_param:ChatCompletionMessageParam",
    "ChatCompletionMessageToolCall": "openai.types.chat.chat_completion_message_tool_call:"
    "ChatCompletionMessageToolCall",
    "ChatCompletionRole": "openai.types.chat.chat_completion_role:ChatCompletionRole",
    "ChatCompletionToolParam": "openai.types.chat.chat_completion_tool_param:ChatCompletionToolParam",
    "Completion": "openai.types.completion:Completion",
    "FunctionDefinition": "openai.types.shared_params:FunctionDefinition",
    "FunctionParameters": "openai.types.shared_params:FunctionParameters",
}


def __getattr__(name: str) -> Any:
    """Resolve the openai types (and ``ModelResponse``, their union) on first use."""
    if name == "ModelResponse":
        value: Any = Union[__getattr__("Completion"), __getattr__("ChatCompletion"), None]
    elif name in _OPENAI_TYPES:
        module, attr = _OPENAI_TYPES[name].split(":")
        value = getattr(importlib.import_module(module), attr)
    else:
        # A later release's name we do not offer is refused in one line saying why: verifiers.compat's
        # import hook wraps this function to do so (types sits below compat, imports nothing of it).
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


# -- Shapes and aliases of later 0.1.x releases (0.1.8-0.1.12), for annotations and for building
# the dicts they describe; the data is the plain dicts this package already passes around.

ChatMessages = list[ChatMessage]
"""A list of chat messages (0.1.8-0.1.10)."""
IndividualRewardFunc = Callable[..., Union[float, Awaitable[float]]]
"""A reward function scoring one rollout (0.1.8+)."""
GroupRewardFunc = Callable[..., Union[list[float], Awaitable[list[float]]]]
"""A reward function scoring a group of rollouts at once, one score each (0.1.8+)."""
DatasetBuilder = Callable[[], Any]
"""A zero-argument function returning a dataset, given as ``dataset=`` (0.1.10+; built on first use)."""
FinishReason = Union[Literal["stop", "length", "tool_calls"], None]
"""Why the model stopped a turn (0.1.11+)."""
StartCallback = Callable[..., None]
ProgressCallback = Callable[..., None]
LogCallback = Callable[[str], None]
ThinkingBlock = dict[str, Any]
"""A reasoning block of a model reply (0.1.11+)."""
GenericContentPart = dict[str, Any]


class TextContentPart(TypedDict):
    """``{"type": "text", "text": ...}``: a part of a message's content (0.1.11+)."""

    type: Literal["text"]
    text: str


class ImageUrlSource(TypedDict):
    url: str


class ImageUrlContentPart(TypedDict):
    type: Literal["image_url"]
    image_url: ImageUrlSource


class InputAudioSource(TypedDict):
    data: str
    format: str


class InputAudioContentPart(TypedDict):
    type: Literal["input_audio"]
    input_audio: InputAudioSource


ContentPart = Union[TextContentPart, ImageUrlContentPart, InputAudioContentPart, GenericContentPart]
MessageContent = Union[str, list[ContentPart]]
"""A message's content: text, or a list of parts (0.1.11+)."""
TextMessage = ChatMessage
"""A message of the completion API (0.1.11+): a dict with ``role`` and text ``content``."""


class TokenUsage(TypedDict):
    """Tokens a rollout used (0.1.10+)."""

    input_tokens: float
    output_tokens: float


class RolloutTiming(TypedDict, total=False):
    """Where a rollout's time went, in milliseconds from ``start_time`` (0.1.8+)."""

    start_time: float
    generation_ms: float
    scoring_ms: float
    total_ms: float


class ErrorInfo(TypedDict):
    """A rollout's error as text (0.1.10+)."""

    error: str
    error_chain_repr: str
    error_chain_str: str


class BaseRolloutInput(TypedDict):
    """The required keys of a rollout's input (0.1.8+; ``RolloutInput`` adds the optional ones)."""

    prompt: Messages
    example_id: int
    task: str


class RolloutInput(TypedDict, total=False):
    """One rollout's input (0.1.8+): ``prompt`` (required), ``answer``, ``task``, ``info``
    (a dict or its JSON), ``example_id``."""

    prompt: Messages
    example_id: int
    task: str
    answer: str
    info: Info | str


class TrajectoryStepTokens(TypedDict, total=False):
    """The server's tokens for one model call: the whole prompt (mask 0) and the sampled
    completion (mask 1) with its sampling log-probs."""

    prompt_ids: list[int]
    prompt_mask: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float]
    overlong_prompt: bool
    is_truncated: bool


class TrajectoryStep(TypedDict, total=False):
    """One entry of ``state["trajectory"]`` (0.1.8+): one model call."""

    prompt: Messages
    completion: Messages
    response: Any
    tokens: TrajectoryStepTokens | None
    reward: float | None
    advantage: float | None
    is_truncated: bool
    trajectory_id: str
    extras: dict[str, Any]


@dataclass
class GenerateInputs:
    """Inputs of ``Environment.a_generate`` as one object (the 0.1.x container).

    ``prompt`` is one entry per rollout; the other columns are optional and,
    when given, aligned with it. ``completion`` (pre-made completions to score
    instead of generating) is not supported: ``a_generate`` refuses it.
    """

    prompt: list[Messages]
    answer: list[str] | None = None
    info: list[dict] | None = None
    task: list[str] | None = None
    completion: list[Messages] | None = None
    example_id: list[int] | None = None
    """0.1.6+: each rollout's example (its state's ``example_id``, and ``GenerateOutputs.example_id``)."""


@dataclass
class TurnTokens:
    """The exact tokens of one model call, as the server saw and sampled them.

    ``prompt_ids`` is the whole prompt the server tokenized for this call (for a
    later turn it includes all earlier turns); ``completion_ids`` and
    ``completion_logprobs`` are the sampled tokens and their log-probabilities
    under the sampling policy (same length). ``finish_reason`` is the server's
    (``"length"`` means the turn was cut at ``max_tokens``).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    finish_reason: str | None = None


@dataclass
class RolloutScore:
    """Score of one rollout: the weighted reward and each function's raw score."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RolloutScores:
    """Scores of many rollouts, aligned by index."""

    reward: list[float]
    metrics: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class GenerateOutputs:
    """Rollouts and their scores, aligned by index (one entry per rollout)."""

    prompt: list[Messages]
    completion: list[Messages]
    answer: list[str]
    state: list[State]
    info: list[Info]
    task: list[str]
    reward: list[float]
    metrics: dict[str, list[float]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    """0.1.6-0.1.7: the run's metadata (a dict carried with the results)."""
    example_id: list[Any] | None = None
    """0.1.6+: each rollout's example id; by default its ``state["example_id"]`` (None where the
    input gave none)."""

    def __post_init__(self) -> None:
        if self.example_id is None:
            self.example_id = [s.get("example_id") if isinstance(s, dict) else None for s in self.state]

    def __len__(self) -> int:
        return len(self.prompt)

    def __getitem__(self, key: str) -> Any:
        # 0.1.x users index results like a dict (results["reward"]).
        return getattr(self, key)

    # A finished coroutine whose value is these results: 0.1.6+ scripts await what
    # ``env.evaluate`` / ``env.generate`` return (``asyncio.run(env.evaluate(...))``, gather),
    # which here is the results themselves when the call was not awaited right away.
    def __await__(self) -> Any:
        return self
        yield  # noqa: B901 (a generator: finishes at once with the results as its value)

    def send(self, value: Any) -> Any:
        raise StopIteration(self)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise typ if val is None else val

    def close(self) -> None:
        return None

    # asyncio.gather keys its arguments in a dict: hashable by identity (results are
    # compared field by field, but never used as keys by value).
    __hash__ = object.__hash__


@dataclass
class ProcessedOutputs:
    """Token-level training data, one entry per training sample.

    Usually one sample per rollout; a rollout whose chat template rewrote
    earlier turns becomes one sample per assistant turn (``rollout_index``
    says which rollout each sample came from). ``completion_mask`` is the loss
    mask (1 = trained token: a model-sampled token); it is not an attention
    mask. ``completion_logprobs`` are the server's sampling log-probs (0.0 where
    the mask is 0).
    """

    prompt_ids: list[list[int]]
    prompt_mask: list[list[int]]
    completion_ids: list[list[int]]
    completion_mask: list[list[int]]
    completion_logprobs: list[list[float]]
    rewards: list[float]
    rollout_index: list[int] = field(default_factory=list)
    is_truncated: list[bool] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


# -- 0.1.8+ message types -------------------------------------------------------------
# Upstream 0.1.8+ builds messages with ``vf.UserMessage(content=...)`` and friends.
# Here they are dicts (the OpenAI wire shape every part of this package already
# handles: JSON, datasets, the openai client) that also read like objects
# (``msg.content``), so a module may use either style.


class _MessageDict(dict):
    """A chat message: a dict with a fixed ``role`` whose keys also read as attributes."""

    ROLE: ClassVar[str] = ""
    REQUIRED: ClassVar[tuple[str, ...]] = ("content",)
    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **fields: Any):
        super().__init__(role=self.ROLE)  # role first, as chat messages are usually written
        self.update(*args, **fields)
        role = self["role"]
        if role != self.ROLE:
            from verifiers.errors import ConfigError

            raise ConfigError(f"{type(self).__name__} has role {self.ROLE!r}, got role={role!r}")
        missing = [key for key in self.REQUIRED if key not in self]
        if missing:
            from verifiers.errors import ConfigError

            raise ConfigError(
                f"{type(self).__name__} needs {', '.join(missing)}",
                hint=f"e.g. {type(self).__name__}({', '.join(f'{k}=...' for k in missing)})",
            )

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return self[name]
        if name in self.OPTIONAL:
            return None
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def model_dump(self, exclude_none: bool = False, **_: Any) -> dict[str, Any]:
        """A plain dict of the message (the name upstream's pydantic messages use)."""
        return {k: v for k, v in self.items() if not (exclude_none and v is None)}


class SystemMessage(_MessageDict):
    """``{"role": "system", "content": ...}``."""

    ROLE = "system"


class UserMessage(_MessageDict):
    """``{"role": "user", "content": ...}`` (content: text or a list of content parts)."""

    ROLE = "user"


class ToolCall(dict):
    """One tool call, stored in the OpenAI shape ``{"id", "type": "function", "function":
    {"name", "arguments"}}`` and read like upstream 0.1.12's (``call.id``, ``call.name``,
    ``call.arguments``: the JSON text). Build it either way: ``ToolCall(id=, name=, arguments=)``
    or from an OpenAI tool-call dict."""

    def __init__(self, *args: Any, **fields: Any):
        raw = dict(*args, **fields)
        if "function" in raw:  # the OpenAI shape: kept exactly as given
            super().__init__(raw)
            return
        arguments = raw.pop("arguments", "")
        if not isinstance(arguments, str):
            import json

            arguments = json.dumps(arguments)
        name = raw.pop("name", "")
        super().__init__(
            id=raw.pop("id", ""),
            type=raw.pop("type", "function"),
            function={"name": name, "arguments": arguments},
            **raw,
        )

    @property
    def id(self) -> str:
        return self.get("id")

    @property
    def name(self) -> str:
        return (self.get("function") or {}).get("name")

    @property
    def arguments(self) -> str:
        return (self.get("function") or {}).get("arguments")


class AssistantMessage(_MessageDict):
    """``{"role": "assistant", "content": ..., ["tool_calls": ...]}``; content may be None.
    Each tool call becomes a :class:`ToolCall` (OpenAI shape, upstream attributes)."""

    ROLE = "assistant"
    REQUIRED = ()
    OPTIONAL = ("content", "reasoning_content", "tool_calls")

    def __init__(self, *args: Any, **fields: Any):
        super().__init__(*args, **fields)
        if self.get("tool_calls"):
            self["tool_calls"] = [ToolCall(tc) for tc in self["tool_calls"]]


_BY_ROLE: dict[str, type] = {}


def as_message(message: Any) -> Any:
    """``message`` as the message type of its role (``vf.UserMessage``, ...), so 0.1.12 code can
    read ``m.role`` / ``m.content``; anything else (text, an unknown role) is returned as is."""
    if not _BY_ROLE:
        _BY_ROLE.update(system=SystemMessage, user=UserMessage, assistant=AssistantMessage, tool=ToolMessage)
    if isinstance(message, _MessageDict) or not isinstance(message, dict):
        return message
    cls = _BY_ROLE.get(message.get("role"))
    if cls is None or any(key not in message for key in cls.REQUIRED):
        return message
    return cls(message)


class ToolMessage(_MessageDict):
    """``{"role": "tool", "tool_call_id": ..., "content": ...}``."""

    ROLE = "tool"
    REQUIRED = ("tool_call_id", "content")


# -- 0.1.12's provider-agnostic tool definitions ----------------------------------------


class Tool(dict):
    """One tool the model may call, as 0.1.12's ``vf.Tool`` describes it: ``name``,
    ``description``, ``parameters`` (a JSON schema) and optional ``strict``.

    A dict whose keys also read as attributes (``tool.name``), so it passes through JSON and
    datasets unchanged. ``to_oai()`` gives the OpenAI ``tools`` entry the server is sent
    (``strict`` only when set, as upstream sends it).
    """

    def __init__(self, *args: Any, **fields: Any):
        super().__init__(*args, **fields)
        self.setdefault("description", "")
        self.setdefault("parameters", {"type": "object", "properties": {}})
        name, params = self.get("name"), self.get("parameters")
        if not isinstance(name, str) or not name:
            from verifiers.errors import ConfigError

            raise ConfigError(
                f"a tool definition needs a non-empty string 'name', got {name!r}",
                hint="write {'name': ..., 'description': ..., 'parameters': {...}}",
            )
        if params is None:
            self["parameters"] = {"type": "object", "properties": {}}
        elif not isinstance(params, dict):
            from verifiers.errors import ConfigError

            raise ConfigError(
                f"tool {name!r}: 'parameters' must be a JSON-schema dict, got {type(params).__name__}",
                hint="e.g. {'type': 'object', 'properties': {...}, 'required': [...]}",
            )

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return self[name]
        if name == "strict":
            return None
        raise AttributeError(f"Tool has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    @classmethod
    def from_oai(cls, schema: dict) -> Tool:
        """The record of an OpenAI ``{"type": "function", "function": {...}}`` tool schema."""
        fn = dict(schema.get("function") or {})
        fields = {
            "name": fn.get("name", ""),
            "description": fn.get("description") or "",
            "parameters": fn.get("parameters") or {},
        }
        if fn.get("strict") is not None:
            fields["strict"] = fn["strict"]
        return cls(fields)

    @classmethod
    def model_validate(cls, value: Any) -> Tool:
        """A ``Tool`` from a ``Tool`` or a dict (upstream's pydantic name)."""
        return value if isinstance(value, cls) else cls(dict(value))

    def to_oai(self) -> dict[str, Any]:
        """The OpenAI tool schema of this record."""
        fn: dict[str, Any] = {
            "name": self["name"],
            "description": self.get("description") or "",
            "parameters": self.get("parameters") or {},
        }
        if self.get("strict") is not None:
            fn["strict"] = self["strict"]
        return {"type": "function", "function": fn}

    def model_dump(self, exclude_none: bool = False, **_: Any) -> dict[str, Any]:
        """A plain dict of the record (upstream's pydantic name)."""
        return {k: v for k, v in self.items() if not (exclude_none and v is None)}


def normalize_tool_defs(defs: Any, where: str = "tool_defs") -> list[Tool] | None:
    """``defs`` as ``Tool`` records: ``Tool`` objects, ``{name, description, parameters,
    strict?}`` dicts (0.1.12), or OpenAI ``{"type": "function", "function": {...}}`` schemas
    (the 0.1.4-0.1.10 form, which 0.1.12 refuses and this package still reads); a JSON string of
    such a list too (a dataset column). None stays None. ``where`` names the setting in errors."""
    if defs is None:
        return None
    if isinstance(defs, str):
        import json

        defs = json.loads(defs) if defs.strip() else []
    if isinstance(defs, dict) or not isinstance(defs, (list, tuple)):
        from verifiers.errors import ConfigError

        raise ConfigError(
            f"{where} must be a list of tool definitions, got {type(defs).__name__}",
            hint="write [{'name': ..., 'description': ..., 'parameters': {...}}, ...]",
        )
    out: list[Tool] = []
    for item in defs:
        if isinstance(item, Tool):
            out.append(item)
        elif isinstance(item, dict) and isinstance(item.get("function"), dict):
            out.append(Tool.from_oai(item))
        elif isinstance(item, dict):
            # A datasets column fills keys a row lacks with None: drop those.
            out.append(Tool({k: v for k, v in item.items() if v is not None or k == "parameters"}))
        else:
            from verifiers.errors import ConfigError

            raise ConfigError(
                f"{where}: each entry must be a vf.Tool or a dict, got {type(item).__name__}",
                hint="write {'name': ..., 'description': ..., 'parameters': {...}}",
            )
    return out


def tool_defs_to_oai(defs: Any, where: str = "tool_defs") -> list[dict[str, Any]] | None:
    """The OpenAI ``tools`` entries of ``defs`` (any form ``normalize_tool_defs`` reads); None stays None."""
    tools = normalize_tool_defs(defs, where)
    return None if tools is None else [t.to_oai() for t in tools]
