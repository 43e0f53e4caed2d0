"""The one chat format of mtsql: ChatML with Qwen's hermes-style tool calls, as LLaMA-Factory trains it.

A conversation is a list of OpenAI-style messages: an optional ``system``, then ``user`` or ``tool``
messages alternating with ``assistant`` ones. Rendered (LLaMA-Factory 0.9.5 ``qwen3_nothink``)::

    <|im_start|>system\\n{system}{tools block}<|im_end|>\\n
    <|im_start|>user\\n{question}<|im_end|>\\n<|im_start|>assistant\\n
    {assistant text, tool call inline as <tool_call>\\n{json}\\n</tool_call>}<|im_end|>\\n
    <|im_start|>user\\n<tool_response>\\n{tool result}\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n
    ...

Every user or tool message ends with the assistant generation prompt, exactly as LLaMA-Factory's
templates do. Token ids are made the way LLaMA-Factory makes them: each message (and the system
block) is encoded on its own and the pieces are concatenated, so ids match its training data
token for token. ``thinking=True`` is the ``qwen3`` template: an assistant message with no
``<think>`` block is trained with an empty one in front (``<think>\\n\\n</think>\\n\\n``).

For token-in/token-out rollouts: ``prompt_ids(messages)`` + the generated ids (ending with
``<|im_end|>``) + ``observation_ids(tool_message)`` + ... equals ``render_ids`` of the whole
conversation, when the generated ids are the canonical encoding of the assistant text.

Where LLaMA-Factory's training data can still differ from a rollout (checked in the tests):
* it re-serializes a ``function_call`` message: the JSON inside ``<tool_call>`` is re-dumped
  (``json.dumps``, ``ensure_ascii=False``) and free text after the call moves before it, so export
  tool calls in that canonical form (as the scripted policies write them);
* it trains the ``\\n`` after each assistant ``<|im_end|>``; a rollout counts it as prompt (mask 0);
* ``qwen3`` (thinking) adds an empty think block to assistant messages that have none, ids the
  model never generated; with a ``<think>`` block in every message both templates agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
EMPTY_THINK = "<think>\n\n</think>\n\n"
TEMPLATES = {"qwen3_nothink": False, "qwen3": True}  # LLaMA-Factory template name -> thinking

_TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\n</tool_call>"
)


def tools_block(tools: Sequence[dict]) -> str:
    """The text appended to the system prompt that describes the tools (one JSON line each)."""
    if not tools:
        return ""
    lines = "".join("\n" + json.dumps(_as_function(tool), ensure_ascii=False) for tool in tools)
    return _TOOLS_HEAD + lines + _TOOLS_TAIL


def _as_function(tool: dict) -> dict:
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def _turn(role: str, content: str) -> str:
    return f"{IM_START}{role}\n{content}{IM_END}\n"


def _check_roles(messages: Sequence[dict]) -> None:
    start = 1 if messages and messages[0]["role"] == "system" else 0
    for index, message in enumerate(messages[start:], start=start):
        expected = ("user", "tool") if (index - start) % 2 == 0 else ("assistant",)
        if message["role"] not in expected:
            raise ValueError(
                f"message {index} has role '{message['role']}', expected {' or '.join(expected)}: "
                "after an optional system message, user/tool and assistant messages alternate"
            )


def segments(messages: Sequence[dict], tools: Sequence[dict] | None = None, thinking: bool = False) -> list[str]:
    """The conversation as the text pieces that are tokenized separately (see the module docstring)."""
    _check_roles(messages)
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    body = messages[1:] if messages and messages[0]["role"] == "system" else messages
    pieces = []
    if system or tools:
        pieces.append(_turn("system", system + tools_block(tools or ())))
    for message in body:
        pieces.extend(message_segments(message, thinking))
    return pieces


def message_segments(message: dict, thinking: bool = False) -> list[str]:
    """One user, tool or assistant message as its separately tokenized pieces."""
    role, content = message["role"], message["content"]
    if role == "user":
        return [_turn("user", content) + f"{IM_START}assistant\n"]
    if role == "tool":
        return [_turn("user", f"<tool_response>\n{content}\n</tool_response>") + f"{IM_START}assistant\n"]
    if role == "assistant":
        head = [EMPTY_THINK] if thinking and "<think>" not in content and "</think>" not in content else []
        return head + [content + IM_END + "\n"]
    raise ValueError(f"unknown role '{role}'")


def render(messages: Sequence[dict], tools: Sequence[dict] | None = None, thinking: bool = False) -> str:
    """The conversation as one string."""
    return "".join(segments(messages, tools, thinking))


# A Jinja chat template rendering the same text (non-thinking form) for tokenizer.apply_chat_template.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='', body=messages) -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set ns.system = messages[0]['content'] -%}{%- set ns.body = messages[1:] -%}"
    "{%- endif -%}"
    "{%- if ns.system or tools -%}"
    "{{- '<|im_start|>system\\n' + ns.system -}}"
    "{%- if tools -%}"
    "{{- " + json.dumps(_TOOLS_HEAD) + " -}}"
    "{%- for tool in tools -%}"
    "{%- if tool['type'] == 'function' -%}{{- '\\n' + (tool | tojson) -}}"
    "{%- else -%}{{- '\\n' + ({'type': 'function', 'function': tool} | tojson) -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- " + json.dumps(_TOOLS_TAIL) + " -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in ns.body -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


class ChatFormat:
    """The chat format bound to a tokenizer: token ids for whole conversations and for rollout steps."""

    def __init__(self, tokenizer, thinking: bool = False):
        self.tokenizer = tokenizer
        self.thinking = thinking
        self.end_of_turn_id = tokenizer.convert_tokens_to_ids(IM_END)
        if self.end_of_turn_id is None or self.end_of_turn_id == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {IM_END} token: it cannot use the ChatML format")
        self._newline_ids = self._encode("\n")

    @classmethod
    def for_template(cls, tokenizer, template: str) -> ChatFormat:
        """The format of a LLaMA-Factory template name (``qwen3_nothink`` or ``qwen3``)."""
        if template not in TEMPLATES:
            raise ValueError(f"unsupported chat template '{template}': choose {' or '.join(TEMPLATES)}")
        return cls(tokenizer, thinking=TEMPLATES[template])

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    def render_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """Token ids of a whole conversation, piece by piece as LLaMA-Factory encodes it."""
        return [i for piece in segments(messages, tools, self.thinking) for i in self._encode(piece)]

    def prompt_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """Token ids of a conversation that ends with a user or tool message (so with the generation prompt)."""
        if not messages or messages[-1]["role"] not in ("user", "tool"):
            raise ValueError("a prompt must end with a user or tool message")
        return self.render_ids(messages, tools)

    def observation_ids(self, message: dict) -> list[int]:
        """The ids after an assistant's ``<|im_end|>`` up to the next generation prompt, for ``message``."""
        if message["role"] not in ("user", "tool"):
            raise ValueError(f"an observation is a user or tool message, got role '{message['role']}'")
        return self._newline_ids + [i for piece in message_segments(message) for i in self._encode(piece)]
