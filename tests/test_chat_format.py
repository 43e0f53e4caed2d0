"""The chat format against LLaMA-Factory 0.9.5's own encoding, the tokenizer's chat template, and
the incremental ids a rollout builds."""

from __future__ import annotations

import json

import pytest

from mtsql.base.errors import UsageError
from mtsql.core.chat_format import EMPTY_THINK, ChatFormat, render, segments, tools_block

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "exec_sql",
            "description": "Run one read-only query — returns rows.",
            "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
        },
    },
    {
        "name": "memory_retrieve",
        "description": "Show earlier turns.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
]


def call(name: str, arguments: dict) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "\n</tool_call>"
    )


CONVERSATION = [
    {"role": "system", "content": "You are an SQLite analyst. Schema: singer(name, age, country)."},
    {"role": "user", "content": "How many singers are older than 30?"},
    {
        "role": "assistant",
        "content": "<think>\nCount with a filter.\n</think>\n\n"
        + call("exec_sql", {"sql": "SELECT count(*) FROM singer WHERE age > 30"}),
    },
    {"role": "tool", "content": "Result: [(4,)]\n\nVerify this result: café ✓"},
    {
        "role": "assistant",
        "content": "<think>\nFour rows, plausible.\n</think>\n\n<exec_verify>pass</exec_verify>\n"
        + call("memory_retrieve", {}),
    },
    {"role": "tool", "content": "Earlier turns of this conversation:\nTurn 1 ..."},
    {
        "role": "assistant",
        "content": "<memory_verify>pass</memory_verify>\n"
        "<answer_sql>SELECT count(*) FROM singer WHERE age > 30</answer_sql>",
    },
]


def llamafactory_ids(
    tokenizer_path, template_name: str, messages: list[dict], tools: list[dict] | None
) -> list[int]:
    """What LLaMA-Factory trains on for this conversation (sharegpt roles: function_call for tool calls;
    without ``tools``, every assistant message is a plain reply, as the export gives a family without
    them)."""
    from llamafactory.data.template import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template=template_name))
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    roles = {"user": "user", "tool": "observation"}
    converted = [
        {
            "role": roles.get(m["role"])
            or ("function" if tools and "<tool_call>" in m["content"] else "assistant"),
            "content": m["content"],
        }
        for m in messages[system is not None :]
    ]
    pairs = template.encode_multiturn(tokenizer, converted, system, json.dumps(tools) if tools else None)
    return [i for prompt, response in pairs for i in prompt + response]


def without_think(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        content = m["content"]
        if m["role"] == "assistant" and "</think>" in content:
            content = content.split("</think>\n\n", 1)[1]
        out.append({**m, "content": content})
    return out


@pytest.mark.parametrize("template", ["qwen3_nothink", "qwen3"])
@pytest.mark.parametrize("strip_think", [False, True])
def test_ids_equal_llamafactory(tiny_qwen3, tiny_tokenizer, template, strip_think):
    messages = without_think(CONVERSATION) if strip_think else CONVERSATION
    ours = ChatFormat.for_template(tiny_tokenizer, template).render_ids(messages, TOOLS)
    assert ours == llamafactory_ids(tiny_qwen3, template, messages, TOOLS)


@pytest.mark.parametrize("with_system", [True, False])
def test_smollm2_ids_equal_llamafactory_given_no_tools(tiny_smollm2, with_system):
    """smollm2 lists no tools and keeps tool calls verbatim: LLaMA-Factory's smollm2 template, given no tools
    and every assistant message as a plain reply (what the SFT export gives it), encodes the same ids."""
    from transformers import AutoTokenizer

    messages = CONVERSATION if with_system else CONVERSATION[1:]
    chat = ChatFormat.for_template(AutoTokenizer.from_pretrained(tiny_smollm2), "smollm2")
    ours = chat.render_ids(messages, TOOLS)
    assert ours == llamafactory_ids(tiny_smollm2, "smollm2", messages, None)


def test_smollm2_renders_tool_results_as_user_turns_after_smollms_default_system():
    text = render(CONVERSATION[1:4], TOOLS, "smollm2")
    assert text.startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face.<|im_end|>\n<|im_start|>user\nHow many singers"
    )
    assert (
        "</tool_call><|im_end|>\n<|im_start|>user\nResult: [(4,)]\n\nVerify this result: café ✓"
        "<|im_end|>\n<|im_start|>assistant\n"
    ) in text
    assert "<tools>" not in text and "<tool_response>" not in text  # no tool list, no response tags
    given = render(CONVERSATION[:2], TOOLS, "smollm2")
    assert given.startswith(f"<|im_start|>system\n{CONVERSATION[0]['content']}<|im_end|>\n<|im_start|>user\n")


def test_thinking_template_adds_an_empty_think_block_only_where_missing():
    plain = render(CONVERSATION, TOOLS, "qwen3_nothink")
    thinking = render(CONVERSATION, TOOLS, "qwen3")
    assert thinking.count(EMPTY_THINK) == 1  # only the last assistant message has no <think>
    assert thinking.replace(EMPTY_THINK, "", 1) == plain


def test_rendered_text_layout():
    text = render(CONVERSATION[:4], TOOLS)
    assert text.startswith("<|im_start|>system\nYou are an SQLite analyst.")
    assert tools_block(TOOLS) in text
    assert '{"type": "function", "function": {"name": "memory_retrieve"' in text  # bare schema wrapped
    assert "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nResult: [(4,)]" in text
    assert text.endswith("café ✓\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert not render([{"role": "user", "content": "hi"}]).startswith("<|im_start|>system")


# Marked by hand: its model fixture is asked for by name at run time, so tests/conftest.py cannot see it.
@pytest.mark.model
@pytest.mark.parametrize(
    ("model", "template"), [("tiny_qwen3", "qwen3_nothink"), ("tiny_smollm2", "smollm2")]
)
def test_incremental_ids_equal_the_whole_conversation(model, template, request):
    from transformers import AutoTokenizer

    tiny_tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(model))
    chat = ChatFormat(tiny_tokenizer, template)
    ids = chat.prompt_ids(CONVERSATION[:2], TOOLS)
    for index in range(2, len(CONVERSATION)):
        message = CONVERSATION[index]
        if message["role"] == "assistant":  # what a model generates: the text, then <|im_end|>
            ids += tiny_tokenizer.encode(message["content"], add_special_tokens=False) + [chat.end_of_turn_id]
        else:
            ids += chat.observation_ids(message)
        if message["role"] == "tool":
            assert ids == chat.prompt_ids(CONVERSATION[: index + 1], TOOLS)
    assert ids + tiny_tokenizer.encode("\n", add_special_tokens=False) == chat.render_ids(CONVERSATION, TOOLS)


@pytest.mark.parametrize("upto", [2, 4, 6])
def test_tokenizer_chat_template_agrees(tiny_tokenizer, upto):
    messages = CONVERSATION[:upto]
    by_template = tiny_tokenizer.apply_chat_template(
        messages, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert by_template == render(messages, TOOLS)
    closed = CONVERSATION[: upto + 1]
    assert tiny_tokenizer.apply_chat_template(closed, tools=TOOLS, tokenize=False) == render(closed, TOOLS)


def test_roles_must_alternate():
    with pytest.raises(ValueError, match="message 2 has role 'user'"):
        segments(
            [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
            ]
        )
    with pytest.raises(ValueError, match="expected user or tool"):
        segments([{"role": "assistant", "content": "a"}])


def test_prompt_and_observation_roles_checked(tiny_tokenizer):
    chat = ChatFormat(tiny_tokenizer)
    with pytest.raises(ValueError, match="must end with a user or tool"):
        chat.prompt_ids(CONVERSATION[:3])
    with pytest.raises(ValueError, match="observation"):
        chat.observation_ids({"role": "assistant", "content": "x"})
    with pytest.raises(ValueError, match="unsupported chat template"):
        ChatFormat.for_template(tiny_tokenizer, "mistral")


def test_auto_refuses_templates_it_cannot_follow_token_by_token(tiny_tokenizer):
    import copy

    from mtsql.core.chat_format import AutoChatFormat

    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = None
    with pytest.raises(UsageError, match="no chat_template"):
        AutoChatFormat(tokenizer)
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} END\n{% endfor %}"
    with pytest.raises(UsageError, match="not a special token"):
        AutoChatFormat(tokenizer)
    # a template whose header counts the messages renders the earlier ones differently once more follow
    tokenizer.chat_template = (
        "{{ messages | length }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(UsageError, match="renders earlier messages differently"):
        AutoChatFormat(tokenizer)


def test_auto_on_the_tiny_qwen3_is_its_chatml(tiny_tokenizer):
    auto, named = ChatFormat.for_template(tiny_tokenizer, "auto"), ChatFormat(tiny_tokenizer)
    assert auto.prompt_ids(CONVERSATION[:2], TOOLS) == named.prompt_ids(CONVERSATION[:2], TOOLS)
    assert auto.observation_ids(CONVERSATION[3]) == named.observation_ids(CONVERSATION[3])
    assert auto.end_of_turn_id == named.end_of_turn_id
