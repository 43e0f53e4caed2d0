"""mtsql's chat formats: one per model family, each spelled as LLaMA-Factory 0.9.5 spells the template
of the same name, so a rollout and the SFT data agree token for token.

A conversation is a list of OpenAI-style messages: an optional ``system``, then ``user`` or ``tool``
messages alternating with ``assistant`` ones. ``qwen3_nothink`` (ChatML, Qwen's hermes-style tools)::

    <|im_start|>system\\n{system}{tools block}<|im_end|>\\n
    <|im_start|>user\\n{question}<|im_end|>\\n<|im_start|>assistant\\n
    {assistant text, tool call inline as <tool_call>\\n{json}\\n</tool_call>}<|im_end|>\\n
    <|im_start|>user\\n<tool_response>\\n{tool result}\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n
    ...

The families (``FAMILIES``, by LLaMA-Factory template name):

* ``qwen3_nothink`` / ``qwen3``: Qwen3 without / with thinking. ``qwen3`` trains an assistant
  message with no ``<think>`` block with an empty one in front (``<think>\\n\\n</think>\\n\\n``).
* ``qwen``: Qwen2.5 (Qwen2.5-Coder, OmniSQL): the same ChatML, and Qwen2.5's default system message
  when the conversation has none.
* ``llama3``: Llama-3's header blocks, ``<|begin_of_text|>`` first, ``<|eot_id|>`` closing a message,
  tool results in an ``ipython`` block. Its template has no tool section mtsql can use (LLaMA-Factory's
  writes today's date and asks for bare JSON calls), so the tools are not listed: the system prompt
  already spells out the tag protocol, and the SFT export keeps tool calls verbatim.
* ``smollm2``: SmolLM2-Instruct, as LLaMA-Factory's ``smollm2`` template spells it: plain ChatML, a tool
  result as a plain ``user`` message (no ``<tool_response>`` tags; the model's own template writes a
  ``tool`` role there), and SmolLM's default system message when the conversation has none, with
  LLaMA-Factory's closing period (the model's own template has none). LLaMA-Factory's default tool
  formatters list tools and rewrite calls as ``Action:`` / ``Action Input:`` lines, not the agent's
  ``<tool_call>`` tags, so, as for ``llama3``, the tools are not listed and calls stay verbatim.
* ``auto`` (``AutoChatFormat``): the model's own ``tokenizer.chat_template`` through
  ``apply_chat_template``.

Every user or tool message ends with the assistant generation prompt, exactly as LLaMA-Factory's
templates do. Token ids are made the way LLaMA-Factory makes them: each message (and the prefix and
the system block) is encoded on its own and the pieces are concatenated.

For token-in/token-out rollouts: ``prompt_ids(messages)`` + the generated ids (ending with the
family's end-of-turn token) + ``observation_ids(tool_message)`` + ... equals ``render_ids`` of the
whole conversation, when the generated ids are the canonical encoding of the assistant text.

Where LLaMA-Factory's training data can still differ from a rollout (checked in the tests):
* with the hermes tool section it re-serializes a ``function_call`` message: the JSON inside
  ``<tool_call>`` is re-dumped (``json.dumps``, ``ensure_ascii=False``) and free text after the call
  moves before it, so export tool calls in that canonical form (as the scripted policies write them);
* it trains the text after each end-of-turn token (ChatML's ``\\n``); a rollout counts it as prompt (mask 0);
* ``qwen3`` (thinking) adds an empty think block to assistant messages that have none, ids the
  model never generated; with a ``<think>`` block in every message both templates agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from mtsql.base.errors import UsageError

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
EMPTY_THINK = "<think>\n\n</think>\n\n"
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face."

_TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}'
    "\n</tool_call>"
)


@dataclass(frozen=True)
class ChatFamily:
    """One template family. Each slot holds ``{content}`` once; a user or tool slot is followed by
    ``assistant_head`` (the generation prompt); an assistant message is its text, ``end_of_turn`` (the
    token the model generates to stop) and ``after_turn``."""

    name: str
    system: str
    user: str
    tool: str
    assistant_head: str
    end_of_turn: str
    after_turn: str = ""
    prefix: str = ""  # before everything (a begin-of-text token)
    default_system: str = ""  # the system message of a conversation that has none
    hermes_tools: bool = True  # tools listed in the system block; calls are LLaMA-Factory function_call turns
    thinking: bool = False  # assistant messages without <think> are trained with an empty one


_CHATML = {
    "system": f"{IM_START}system\n{{content}}{IM_END}\n",
    "user": f"{IM_START}user\n{{content}}{IM_END}\n",
    "tool": f"{IM_START}user\n<tool_response>\n{{content}}\n</tool_response>{IM_END}\n",
    "assistant_head": f"{IM_START}assistant\n",
    "end_of_turn": IM_END,
    "after_turn": "\n",
}
_LLAMA3_HEADER = "<|start_header_id|>{role}<|end_header_id|>\n\n"
FAMILIES = {
    "qwen3_nothink": ChatFamily("qwen3_nothink", **_CHATML),
    "qwen3": ChatFamily("qwen3", **_CHATML, thinking=True),
    "qwen": ChatFamily("qwen", **_CHATML, default_system=QWEN25_DEFAULT_SYSTEM),
    "smollm2": ChatFamily(
        "smollm2",
        **{**_CHATML, "tool": _CHATML["user"]},  # a tool result is a user turn
        default_system=SMOLLM2_DEFAULT_SYSTEM,
        hermes_tools=False,
    ),
    "llama3": ChatFamily(
        "llama3",
        system=_LLAMA3_HEADER.format(role="system") + "{content}<|eot_id|>",
        user=_LLAMA3_HEADER.format(role="user") + "{content}<|eot_id|>",
        tool=_LLAMA3_HEADER.format(role="ipython") + "{content}<|eot_id|>",
        assistant_head=_LLAMA3_HEADER.format(role="assistant"),
        end_of_turn="<|eot_id|>",
        prefix="<|begin_of_text|>",
        hermes_tools=False,
    ),
}
AUTO = "auto"  # the model's own tokenizer.chat_template
TEMPLATES = (*FAMILIES, AUTO)  # what model.template takes


def family_of(template: str | ChatFamily) -> ChatFamily:
    """The family of a template name (``auto`` has none: see ``AutoChatFormat``)."""
    if isinstance(template, ChatFamily):
        return template
    if template not in FAMILIES:
        raise ValueError(f"unsupported chat template '{template}': choose {', '.join(TEMPLATES)}")
    return FAMILIES[template]


def tools_block(tools: Sequence[dict]) -> str:
    """The text appended to the system prompt that describes the tools (one JSON line each)."""
    if not tools:
        return ""
    lines = "".join("\n" + json.dumps(_as_function(tool), ensure_ascii=False) for tool in tools)
    return _TOOLS_HEAD + lines + _TOOLS_TAIL


def _as_function(tool: dict) -> dict:
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def _fill(slot: str, content: str) -> str:
    return slot.replace("{content}", content, 1)


def _check_roles(messages: Sequence[dict]) -> None:
    start = 1 if messages and messages[0]["role"] == "system" else 0
    for index, message in enumerate(messages[start:], start=start):
        expected = ("user", "tool") if (index - start) % 2 == 0 else ("assistant",)
        if message["role"] not in expected:
            raise ValueError(
                f"message {index} has role '{message['role']}', expected {' or '.join(expected)}: "
                "after an optional system message, user/tool and assistant messages alternate"
            )


def segments(
    messages: Sequence[dict], tools: Sequence[dict] | None = None, family: str | ChatFamily = "qwen3_nothink"
) -> list[str]:
    """The conversation as the text pieces that are tokenized separately (see the module docstring)."""
    family = family_of(family)
    _check_roles(messages)
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    body = messages[1:] if messages and messages[0]["role"] == "system" else messages
    system = system or family.default_system
    tool_text = tools_block(tools or ()) if family.hermes_tools else ""
    pieces = [family.prefix] if family.prefix else []
    if system or tool_text:
        pieces.append(_fill(family.system, system + tool_text))
    for message in body:
        pieces.extend(message_segments(message, family))
    return pieces


def message_segments(message: dict, family: str | ChatFamily = "qwen3_nothink") -> list[str]:
    """One user, tool or assistant message as its separately tokenized pieces."""
    family = family_of(family)
    role, content = message["role"], message["content"]
    if role in ("user", "tool"):
        return [_fill(getattr(family, role), content) + family.assistant_head]
    if role == "assistant":
        bare = family.thinking and "<think>" not in content and "</think>" not in content
        return [EMPTY_THINK] * bare + [content + family.end_of_turn + family.after_turn]
    raise ValueError(f"unknown role '{role}'")


def render(
    messages: Sequence[dict], tools: Sequence[dict] | None = None, family: str | ChatFamily = "qwen3_nothink"
) -> str:
    """The conversation as one string."""
    return "".join(segments(messages, tools, family))


def chat_template(family: str | ChatFamily) -> str:
    """A Jinja chat template rendering ``family``'s text (non-thinking form) for ``apply_chat_template``."""
    family = family_of(family)

    def emit(slot: str, expr: str) -> str:
        head, tail = slot.split("{content}")
        return "{{- " + json.dumps(head) + " + " + expr + " + " + json.dumps(tail) + " -}}"

    tools = ""
    if family.hermes_tools:
        tools = (
            "{%- if tools -%}{%- set ns.system = ns.system + " + json.dumps(_TOOLS_HEAD) + " -%}"
            "{%- for tool in tools -%}"
            "{%- if tool['type'] == 'function' -%}{%- set ns.system = ns.system + '\\n' + (tool | tojson) -%}"
            "{%- else -%}{%- set ns.system = ns.system + '\\n' + "
            "({'type': 'function', 'function': tool} | tojson) -%}"
            "{%- endif -%}{%- endfor -%}"
            "{%- set ns.system = ns.system + " + json.dumps(_TOOLS_TAIL) + " -%}{%- endif -%}"
        )
    head = json.dumps(family.assistant_head)
    return (
        "{{- " + json.dumps(family.prefix) + " -}}"
        "{%- set ns = namespace(system=" + json.dumps(family.default_system) + ", body=messages) -%}"
        "{%- if messages and messages[0]['role'] == 'system' -%}"
        "{%- if messages[0]['content'] -%}{%- set ns.system = messages[0]['content'] -%}{%- endif -%}"
        "{%- set ns.body = messages[1:] -%}"
        "{%- endif -%}" + tools + "{%- if ns.system -%}" + emit(family.system, "ns.system") + "{%- endif -%}"
        "{%- for message in ns.body -%}"
        "{%- if message['role'] == 'user' -%}"
        + emit(family.user, "message['content']")
        + "{%- elif message['role'] == 'tool' -%}"
        + emit(family.tool, "message['content']")
        + "{%- elif message['role'] == 'assistant' -%}{{- "
        + head
        + " + message['content'] + "
        + json.dumps(family.end_of_turn + family.after_turn)
        + " -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- " + head + " -}}{%- endif -%}"
    )


CHAT_TEMPLATE = chat_template("qwen3_nothink")  # the tiny Qwen3's and SmolLM2's template


class ChatFormat:
    """A family's chat format bound to a tokenizer: token ids for whole conversations and rollout steps."""

    def __init__(self, tokenizer, family: str | ChatFamily = "qwen3_nothink"):
        self.tokenizer = tokenizer
        self.family = family_of(family)
        self.thinking = self.family.thinking
        self.end_of_turn_id = _special_id(tokenizer, self.family.end_of_turn)
        self._after_turn_ids = self._encode(self.family.after_turn)

    @classmethod
    def for_template(cls, tokenizer, template: str) -> ChatFormat | AutoChatFormat:
        """The format of a ``model.template`` value: a LLaMA-Factory template name or ``auto``."""
        return AutoChatFormat(tokenizer) if template == AUTO else cls(tokenizer, family_of(template))

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    def render_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """Token ids of a whole conversation, piece by piece as LLaMA-Factory encodes it."""
        return [i for piece in segments(messages, tools, self.family) for i in self._encode(piece)]

    def prompt_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """Token ids of a conversation that ends with a user or tool message (so with the generation
        prompt)."""
        _check_prompt(messages)
        return self.render_ids(messages, tools)

    def observation_ids(self, message: dict) -> list[int]:
        """The ids after an assistant's end-of-turn token up to the next generation prompt, for
        ``message``."""
        _check_observation(message)
        return self._after_turn_ids + [
            i for piece in message_segments(message, self.family) for i in self._encode(piece)
        ]


class AutoChatFormat:
    """The model's own ``tokenizer.chat_template`` (``model.template=auto``), with ChatFormat's interface.

    Prompts are ``apply_chat_template`` with the generation prompt. The end-of-turn token and what
    follows an observation are read off renderings of a probe conversation: the text after a
    closed assistant message up to the next generation prompt, so a template must render earlier
    messages the same whatever comes after them. A template it cannot follow is a ``UsageError``.
    """

    PROBE = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "PROBE"}]

    def __init__(self, tokenizer):
        if not isinstance(getattr(tokenizer, "chat_template", None), str):
            raise UsageError(
                "model.template=auto: the tokenizer has no chat_template; name a template family"
            )
        self.tokenizer = tokenizer
        self.thinking = False
        closed = self._render(self.PROBE, add_generation_prompt=False)
        tail = closed[closed.rindex("PROBE") + len("PROBE") :]
        tail_ids = self._encode(tail)
        if (
            not tail_ids
            or tail_ids[0] not in tokenizer.all_special_ids
            and tail_ids[0] not in tokenizer.added_tokens_decoder
        ):
            raise UsageError(
                f"model.template=auto: the chat template closes an assistant message with {tail!r}, "
                "not a special token a model can generate"
            )
        self.end_of_turn_id = tail_ids[0]
        self._closed_probe = closed
        self.observation_ids(
            {"role": "tool", "content": "?"}
        )  # a template it cannot follow fails here, first

    def _render(self, messages, tools=None, add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
        )

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    def render_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """Token ids of the template's rendering (with the generation prompt after a user or tool message)."""
        _check_roles(messages)
        return self._encode(self._render(messages, tools, messages[-1]["role"] != "assistant"))

    def prompt_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """Token ids of a conversation that ends with a user or tool message, with the generation prompt."""
        _check_prompt(messages)
        return self.render_ids(messages, tools)

    def observation_ids(self, message: dict) -> list[int]:
        """The ids after an assistant's end-of-turn token up to the next generation prompt, for
        ``message``."""
        _check_observation(message)
        end = self.tokenizer.decode([self.end_of_turn_id])
        closed = self._closed_probe
        after_end = closed[closed.rindex(end) + len(end) :]
        opened = self._render([*self.PROBE, message])
        if not opened.startswith(closed):
            raise UsageError(
                "model.template=auto: the chat template renders earlier messages differently once "
                "a message follows; name a template family instead"
            )
        return self._encode(after_end + opened[len(closed) :])


def _special_id(tokenizer, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise ValueError(f"the tokenizer has no {token} token: it cannot use this chat format")
    return token_id


def _check_prompt(messages: Sequence[dict]) -> None:
    if not messages or messages[-1]["role"] not in ("user", "tool"):
        raise ValueError("a prompt must end with a user or tool message")


def _check_observation(message: dict) -> None:
    if message["role"] not in ("user", "tool"):
        raise ValueError(f"an observation is a user or tool message, got role '{message['role']}'")
