"""The message protocol: one assistant message becomes one typed action. Never raises.

A valid message is (whitespace and free text between the parts are allowed):

    <think>reasoning</think>                     optional here; the env may require it
    <exec_verify>pass|no_pass</exec_verify>      verdict on the previous exec_sql result, if any
    <memory_verify>pass|no_pass</memory_verify>  verdict on the previous memory_retrieve result, if any
    exactly one of
      <tool_call>{"name": "exec_sql", "arguments": {"sql": "..."}}</tool_call>
      <tool_call>{"name": "memory_retrieve", "arguments": {}}</tool_call>
      <answer_sql>SELECT ...</answer_sql>

The verdicts and the action may come in any order after the reasoning; tags inside the reasoning
are ignored.

``protocol="release"`` reads messages as the released MTSQL-R1 checkpoints write them: both tools take
one ``code`` argument (``memory_retrieve``'s is the candidate query to check), and when a message
holds several ``<tool_call>`` blocks (or a call next to an ``<answer_sql>``) the first call that
parses is the action and the rest is ignored, as verl's tool loop runs only the first parsed call. A
leading ``</think>`` with no opening tag is accepted (templates that put ``<think>`` in the generation
prompt). Anything else is an ``invalid`` action
whose ``reason`` says what is wrong, for the env to feed back to the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

THINK, TOOL_CALL, ANSWER = "think", "tool_call", "answer_sql"
EXEC_VERIFY, MEMORY_VERIFY = "exec_verify", "memory_verify"
TAGS = (THINK, TOOL_CALL, ANSWER, EXEC_VERIFY, MEMORY_VERIFY)
VERDICTS = ("pass", "no_pass")

PROTOCOLS = ("mtsql", "release")
PROTOCOL_ARGUMENTS: dict[str, dict[str, tuple[str, ...]]] = {
    "mtsql": {"exec_sql": ("sql",), "memory_retrieve": ()},
    "release": {"exec_sql": ("code",), "memory_retrieve": ("code",)},
}
"""Each protocol's tools and their arguments (all strings, all required); ``tools.tool_schemas`` describes
the same."""

_TAG = re.compile(r"<(/?)(" + "|".join(TAGS) + r")>")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


@dataclass(frozen=True)
class Action:
    """What one assistant message does.

    ``kind`` is ``tool_call`` (``tool`` + ``arguments``), ``answer`` (``sql``) or ``invalid``
    (``reason``). ``sql`` is also set for an ``exec_sql`` call. Verdicts are ``pass``, ``no_pass`` or
    None (not stated). ``think`` is the reasoning text, None when the message has no reasoning block.
    """

    kind: str
    tool: str | None = None
    arguments: dict | None = None
    sql: str | None = None
    exec_verdict: str | None = None
    memory_verdict: str | None = None
    think: str | None = None
    reason: str | None = None
    ignored: int = 0

    @property
    def valid(self) -> bool:
        return self.kind != "invalid"


def parse_action(text: object, protocol: str = "mtsql") -> Action:
    """Turn one assistant message into an ``Action``; any malformed input is an ``invalid`` action."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if not isinstance(text, str):
        return Action("invalid", reason=f"a message must be text, got {type(text).__name__}")
    think, body, problem = _split_think(text)
    if problem:
        return _invalid(problem, think)
    blocks, problem = _blocks(body)
    if problem:
        return _invalid(problem, think)
    return _action(blocks, think, protocol)


def _invalid(reason: str, think: str | None) -> Action:
    return Action("invalid", think=think, reason=reason)


def _split_think(text: str) -> tuple[str | None, str, str | None]:
    """(reasoning or None, the rest, a problem or None). The reasoning must come first."""
    if not text.strip():
        return None, "", "the message is empty"
    opening = text.find("<think>")
    closing = text.find("</think>")
    if opening == -1 and closing == -1:
        return None, text, None
    if closing != -1 and (opening == -1 or closing < opening):  # opening tag was in the prompt
        head, body = text[:closing], text[closing + len("</think>") :]
        return head.strip(), body, _check_no_more_think(body)
    if text[:opening].strip():
        return None, text, "text before <think>: the reasoning block must come first"
    if closing == -1:
        return text[opening + len("<think>") :].strip(), "", "<think> is never closed with </think>"
    body = text[closing + len("</think>") :]
    return text[opening + len("<think>") : closing].strip(), body, _check_no_more_think(body)


def _check_no_more_think(body: str) -> str | None:
    if "<think>" in body or "</think>" in body:
        return "more than one <think> block: write one reasoning block at the start"
    return None


def _blocks(body: str) -> tuple[list[tuple[str, str]], str | None]:
    """The (tag, content) blocks outside the reasoning; a problem if tags are unbalanced or nested."""
    blocks: list[tuple[str, str]] = []
    open_tag: str | None = None
    start = 0
    for match in _TAG.finditer(body):
        closing, tag = match.group(1) == "/", match.group(2)
        if open_tag is None:
            if closing:
                return blocks, f"</{tag}> without a matching <{tag}>"
            open_tag, start = tag, match.end()
        elif closing and tag == open_tag:
            blocks.append((tag, body[start : match.start()]))
            open_tag = None
        else:
            return blocks, f"<{'/' if closing else ''}{tag}> inside <{open_tag}>: tags cannot be nested"
    if open_tag is not None:
        return blocks, f"<{open_tag}> is never closed with </{open_tag}>"
    return blocks, None


def _action(blocks: list[tuple[str, str]], think: str | None, protocol: str) -> Action:
    verdicts: dict[str, str] = {}
    calls = [content for tag, content in blocks if tag == TOOL_CALL]
    answers = [content for tag, content in blocks if tag == ANSWER]
    for tag in (EXEC_VERIFY, MEMORY_VERIFY):
        values = [content.strip() for t, content in blocks if t == tag]
        if len(values) > 1:
            return _invalid(f"more than one <{tag}> verdict", think)
        if values and values[0] not in VERDICTS:
            return _invalid(f"<{tag}> must contain pass or no_pass, got {_clip(values[0])!r}", think)
        if values:
            verdicts[tag] = values[0]
    common = {
        "exec_verdict": verdicts.get(EXEC_VERIFY),
        "memory_verdict": verdicts.get(MEMORY_VERIFY),
        "think": think,
    }
    if protocol == "release" and calls:
        return _first_call(calls, len(answers), common)
    if calls and answers:
        return _invalid("both a <tool_call> and an <answer_sql>: one action per message", think)
    if len(calls) > 1 or len(answers) > 1:
        return _invalid("more than one action: one <tool_call> or one <answer_sql> per message", think)
    if not calls and not answers:
        return _invalid("no action: end the message with a <tool_call> or an <answer_sql>", think)
    if answers:
        sql = _strip_fence(answers[0])
        if not sql:
            return _invalid("<answer_sql> is empty", think)
        return Action("answer", sql=sql, **common)
    name, arguments, problem = _tool_call(calls[0], PROTOCOL_ARGUMENTS[protocol])
    if problem:
        return _invalid(problem, think)
    return Action("tool_call", tool=name, arguments=arguments, sql=arguments.get("sql"), **common)


def _first_call(calls: list[str], answers: int, common: dict) -> Action:
    """Release protocol: the first call that parses is the action; the other blocks are ignored."""
    problems = []
    for index, content in enumerate(calls):
        name, arguments, problem = _tool_call(content, PROTOCOL_ARGUMENTS["release"])
        if problem:
            problems.append(problem)
            continue
        return Action(
            "tool_call",
            tool=name,
            arguments=arguments,
            sql=arguments["code"],
            ignored=len(calls) - index - 1 + answers,
            **common,
        )
    return _invalid(problems[0], common["think"])


def _tool_call(content: str, tools: dict[str, tuple[str, ...]]) -> tuple[str, dict, str | None]:
    """(name, arguments, problem) of a ``<tool_call>`` body."""
    try:
        call = json.loads(content)
    except (ValueError, RecursionError) as exc:
        return "", {}, f"the <tool_call> is not valid JSON ({_clip(str(exc), 80)})"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return "", {}, 'the <tool_call> must be a JSON object {"name": ..., "arguments": {...}}'
    name, arguments = call["name"], call.get("arguments", {})
    if set(call) - {"name", "arguments"}:
        return "", {}, f"unexpected keys in the <tool_call>: {sorted(set(call) - {'name', 'arguments'})}"
    if name not in tools:
        return "", {}, f"unknown tool {_clip(name)!r}: the tools are {', '.join(tools)}"
    if not isinstance(arguments, dict):
        return "", {}, f"the arguments of {name} must be a JSON object"
    expected = tools[name]
    if set(arguments) != set(expected):
        wanted = ", ".join(expected) or "no arguments"
        return "", {}, f"{name} takes {wanted}; got {sorted(arguments) or 'none'}"
    cleaned = {key: _strip_fence(value) if isinstance(value, str) else "" for key, value in arguments.items()}
    for key, value in cleaned.items():
        if not value:
            return "", {}, f"the '{key}' argument of {name} must be a non-empty string"
    return name, cleaned, None


def _strip_fence(sql: str) -> str:
    """The SQL without surrounding whitespace or a markdown code fence."""
    sql = sql.strip()
    match = _FENCE.match(sql)
    return match.group(1).strip() if match else sql


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
