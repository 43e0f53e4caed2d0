"""The message parser: every valid shape, every named way to be invalid, and fuzzing (never raises)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtsql.core.agent.protocol import PROTOCOL_ARGUMENTS, PROTOCOLS, Action, parse_action
from mtsql.core.agent.tools import tool_schemas

TOOL_ARGUMENTS = PROTOCOL_ARGUMENTS["mtsql"]

EXEC = '<tool_call>\n{"name": "exec_sql", "arguments": {"sql": "SELECT count(*) FROM singer"}}\n</tool_call>'
MEMORY = '<tool_call>{"name": "memory_retrieve", "arguments": {}}</tool_call>'


def test_tool_call_with_reasoning_and_verdict():
    action = parse_action(
        f"<think>\nI count singers.\n</think>\n\n<exec_verify>no_pass</exec_verify>\n{EXEC}"
    )
    assert action == Action(
        "tool_call",
        tool="exec_sql",
        arguments={"sql": "SELECT count(*) FROM singer"},
        sql="SELECT count(*) FROM singer",
        exec_verdict="no_pass",
        think="I count singers.",
    )


def test_answer_with_memory_verdict_and_code_fence():
    action = parse_action(
        "<think>ok</think><memory_verify>pass</memory_verify>"
        "<answer_sql>\n```sql\nSELECT name FROM singer\n```\n</answer_sql>"
    )
    assert (action.kind, action.sql, action.memory_verdict, action.exec_verdict) == (
        "answer",
        "SELECT name FROM singer",
        "pass",
        None,
    )


def test_memory_call_without_arguments_key_and_no_think():
    action = parse_action('<tool_call>{"name": "memory_retrieve"}</tool_call>')
    assert (action.kind, action.tool, action.arguments, action.think) == (
        "tool_call",
        "memory_retrieve",
        {},
        None,
    )


def test_reasoning_whose_opening_tag_was_in_the_prompt():
    action = parse_action(f"I should run it.\n</think>\n{MEMORY}")
    assert action.valid and action.think == "I should run it."


def test_tags_inside_reasoning_are_ignored():
    action = parse_action(f"<think>maybe <answer_sql>x</answer_sql> or <tool_call>?</think>{MEMORY}")
    assert action.kind == "tool_call" and action.tool == "memory_retrieve"


def test_sql_with_comparison_operators_survives():
    sql = "SELECT a FROM t WHERE b < 3 AND c <> 4 AND d <= 5"
    assert parse_action(f"<answer_sql>{sql}</answer_sql>").sql == sql


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("<think>still thinking", "never closed"),
        ("hello <think>x</think>" + MEMORY, "must come first"),
        ("<think>a</think><think>b</think>" + MEMORY, "more than one <think>"),
        ("<think>a</think>just prose", "no action"),
        ("<answer_sql>SELECT 1", "never closed"),
        ('<tool_call>{"name": "exec_sql", "arguments": {"sql": "SEL', "never closed"),
        ("</answer_sql>", "without a matching"),
        ('<tool_call>{"name": "exec_sql", "arguments": {"sql": }}</tool_call>', "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        ('<tool_call>{"name": "drop_table", "arguments": {}}</tool_call>', "unknown tool"),
        ('<tool_call>{"name": "exec_sql", "arguments": {}}</tool_call>', "takes sql"),
        ('<tool_call>{"name": "exec_sql", "arguments": {"sql": "x", "db": "y"}}</tool_call>', "takes sql"),
        ('<tool_call>{"name": "exec_sql", "arguments": {"sql": 5}}</tool_call>', "non-empty string"),
        ('<tool_call>{"name": "exec_sql", "arguments": {"sql": "  "}}</tool_call>', "non-empty string"),
        ('<tool_call>{"name": "exec_sql", "arguments": "SELECT 1"}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "memory_retrieve", "arguments": {}, "id": 1}</tool_call>', "unexpected keys"),
        (EXEC + EXEC, "more than one action"),
        ("<answer_sql>a</answer_sql><answer_sql>b</answer_sql>", "more than one action"),
        (EXEC + "<answer_sql>SELECT 1</answer_sql>", "both a <tool_call> and an <answer_sql>"),
        (
            '<tool_call>{"name": "exec_sql", "arguments": {"sql": "<answer_sql>SELECT 1</answer_sql>"}}'
            "</tool_call>",
            "inside <tool_call>",
        ),
        ("<answer_sql>  </answer_sql>", "is empty"),
        ("<exec_verify>maybe</exec_verify>" + EXEC, "pass or no_pass"),
        (
            "<exec_verify>pass</exec_verify><exec_verify>pass</exec_verify>" + EXEC,
            "more than one <exec_verify>",
        ),
        ("<exec_verify>pass" + EXEC, "inside <exec_verify>"),
    ],
)
def test_invalid_messages_say_why(text, reason):
    action = parse_action(text)
    assert action.kind == "invalid" and not action.valid
    assert reason in action.reason


def test_non_text_input_is_invalid():
    assert parse_action(None).kind == "invalid"
    assert parse_action(b"<answer_sql>x</answer_sql>").kind == "invalid"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tool_schemas_match_the_parser(protocol):
    schemas, arguments = tool_schemas(protocol), PROTOCOL_ARGUMENTS[protocol]
    shapes = {s["function"]["name"]: tuple(s["function"]["parameters"]["required"]) for s in schemas}
    assert shapes == arguments
    for schema in schemas:
        assert set(schema["function"]["parameters"]["properties"]) == set(
            arguments[schema["function"]["name"]]
        )
    json.dumps(schemas)


VALID = [
    f"<think>x</think>{EXEC}",
    f"<think>y</think><exec_verify>pass</exec_verify>{MEMORY}",
    "<think>z</think><memory_verify>no_pass</memory_verify><answer_sql>SELECT 1</answer_sql>",
]
PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<answer_sql>",
    "</answer_sql>",
    "<exec_verify>",
    "</exec_verify>",
    "<memory_verify>",
    "</memory_verify>",
    "{",
    "}",
    '"',
    "pass",
    "no_pass",
    '"name"',
    '"exec_sql"',
    ":",
    "\x00",
    "\\",
    "\n",
]


def _check(action: Action) -> None:
    assert action.kind in ("tool_call", "answer", "invalid")
    assert (action.kind == "invalid") == (action.reason is not None)
    if action.kind == "tool_call":
        assert action.tool in TOOL_ARGUMENTS and set(action.arguments) == set(TOOL_ARGUMENTS[action.tool])
    if action.kind == "answer":
        assert action.sql and action.sql == action.sql.strip()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_random_text_never_raises(text):
    _check(parse_action(text))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID), st.data())
def test_mutated_valid_messages_never_raise(message, data):
    cut = data.draw(st.integers(0, len(message)))
    insert = data.draw(st.lists(st.sampled_from(PIECES) | st.text(max_size=5), max_size=4))
    where = data.draw(st.integers(0, len(message)))
    mutated = message[:where] + "".join(insert) + message[where:]
    _check(parse_action(mutated))
    _check(parse_action(message[:cut]))  # truncated mid-tag, mid-JSON, ...


def test_large_garbage_is_invalid_quickly():
    garbage = ("<tool_call>{" * 5000 + "x" * 40_000 + "</answer_sql>" * 1000)[:100_000]
    assert parse_action(garbage).kind == "invalid"
    nested = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    assert "not valid JSON" in parse_action(nested).reason
