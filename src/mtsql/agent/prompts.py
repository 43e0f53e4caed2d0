"""Every text the environment shows the model: system prompts, the question, tool observations.

The tool schemas themselves (``tools.TOOL_SCHEMAS``) go to the chat template's ``tools=``; the
system prompt still spells out the exact tag syntax so that a template without a tool section
(plain ChatML) gives the model the same protocol.
"""

from __future__ import annotations

from collections.abc import Sequence

ROLE = (
    "You are an expert SQLite analyst talking with a user about one database. A question may build on "
    "the earlier questions of the conversation: it can narrow, extend, re-sort or replace what was asked "
    "before. Answer the current question with one SQLite query."
)

LONG_STEPS = """Work step by step, one step per message:
1. Write a candidate query and run it:
   <tool_call>{{"name": "exec_sql", "arguments": {{"sql": "SELECT ..."}}}}</tool_call>
2. Judge the result you get back. Write <exec_verify>pass</exec_verify> if the query ran, returns the \
columns the question asks for and the rows are plausible. Otherwise write \
<exec_verify>no_pass</exec_verify> and run a corrected query.
3. If the conversation has earlier questions, after a pass retrieve the dialogue memory:
   <tool_call>{{"name": "memory_retrieve", "arguments": {{}}}}</tool_call>
   Check that your query is consistent with the earlier turns and write \
<memory_verify>pass</memory_verify>, or <memory_verify>no_pass</memory_verify> and run a corrected query.
4. Give the final query: <answer_sql>SELECT ...</answer_sql>. This ends your work on the question.

Rules:
{think_rule}- A verdict goes at the start of the message that follows the tool result, before the next action.
- One action per message: a single <tool_call> or the <answer_sql>.
- You have at most {max_turns} messages for this question; answer before they run out.
- Queries run read-only; results are shortened to {result_chars} characters."""

SHORT_STEPS = """Reply with one message that ends with the query: <answer_sql>SELECT ...</answer_sql>.
{think_rule}No tools are available."""

THINK_RULE = "- Start every message with your reasoning inside <think>...</think>.\n"
SHORT_THINK_RULE = "Reason first inside <think>...</think>, then give the query.\n"

EXEC_CHECKLIST = """Verify this result:
- Did the query run without an error?
- Does it return exactly the columns the question asks for, nothing missing and nothing extra?
- Is an empty result or a NULL value really expected here?
Write <exec_verify>pass</exec_verify> or <exec_verify>no_pass</exec_verify>. On no_pass, run a corrected \
query with exec_sql. On pass, {next_step}"""

MEMORY_CHECKLIST = """Check the candidate query against the earlier turns:
- Tables: does it read the tables the conversation is about, joined on the right keys?
- Columns: does it select what the current question asks for?
- Conditions: are the earlier filters kept, unless the current question drops or changes them?
- Ordering and limits: kept from the earlier turns unless the question changes them?
- Does its result answer the current question in the context of the conversation?
Write <memory_verify>pass</memory_verify> or <memory_verify>no_pass</memory_verify>. On no_pass, run a \
corrected query with exec_sql. On pass, give the final query in <answer_sql>...</answer_sql>."""

NO_EARLIER_TURNS = ("There are no earlier turns: this is the first question of the conversation. No verdict is "
                    "needed; give the final query in <answer_sql>...</answer_sql>.")
NEXT_MEMORY = "call memory_retrieve to check the query against the earlier turns."
NEXT_ANSWER = "give the final query in <answer_sql>...</answer_sql>."
LAST_MESSAGE = "This is your last message for this question: give the final query in <answer_sql>...</answer_sql>."
FORMAT_REMINDER = (
    "Write {think}any verdict tag, then exactly one <tool_call>{{...}}</tool_call> or one "
    "<answer_sql>...</answer_sql>."
)


def system_prompt(*, mode: str, max_turns: int, result_chars: int, thinking: bool) -> str:
    """The rules of the task: the step-by-step tool protocol (long) or a direct answer (short)."""
    if mode == "short":
        steps = SHORT_STEPS.format(think_rule=SHORT_THINK_RULE if thinking else "")
    else:
        steps = LONG_STEPS.format(think_rule=THINK_RULE if thinking else "", max_turns=max_turns,
                                  result_chars=result_chars)
    return f"{ROLE}\n\n{steps}"


def user_prompt(*, schema: str, question: str, history: Sequence[tuple[str, str | None]],
                show_history_sql: bool) -> str:
    """Schema, the earlier questions (with their SQL in the short mode), and the current question."""
    parts = [f"Database schema:\n{schema}"]
    if history:
        lines = ["Earlier questions in this conversation:"]
        for number, (question_text, sql) in enumerate(history, 1):
            lines.append(f"{number}. {question_text}")
            if show_history_sql:
                lines.append(f"   SQL: {sql if sql else '(no query was given)'}")
        parts.append("\n".join(lines))
    else:
        parts.append("This is the first question of the conversation.")
    parts.append(f"Current question: {question}")
    return "\n\n".join(parts)


def exec_observation(*, question: str, sql: str, result: str, has_history: bool) -> str:
    """The exec_sql tool response: recap, result or error, then what to verify and do next."""
    checklist = EXEC_CHECKLIST.format(next_step=NEXT_MEMORY if has_history else NEXT_ANSWER)
    return f"Question: {question}\nSQL: {sql}\nResult:\n{result}\n\n{checklist}"


def memory_observation(*, turns: Sequence[tuple[str, str | None, str, str]], question: str,
                       candidate: str | None, candidate_clauses: str) -> str:
    """The memory_retrieve tool response: each earlier turn (question, SQL, clauses, result), the
    candidate query, then the coherence checklist. ``turns`` holds (question, sql, clauses, result)."""
    if not turns:
        return f"Current question: {question}\n\n{NO_EARLIER_TURNS}"
    lines = ["Earlier turns of this conversation:"]
    for number, (question_text, sql, clauses, result) in enumerate(turns, 1):
        lines.append(f"Turn {number}\n  Question: {question_text}")
        if sql:
            shown = result.replace("\n", "\n    ")
            lines.append(f"  SQL: {sql}\n  Clauses: {clauses}\n  Result:\n    {shown}")
        else:
            lines.append("  SQL: (no query was given)")
    lines.append(f"\nCurrent question: {question}")
    if candidate:
        lines.append(f"Candidate query: {candidate}\n  Clauses: {candidate_clauses}")
    else:
        lines.append("Candidate query: none yet (run one with exec_sql first)")
    return "\n".join(lines) + f"\n\n{MEMORY_CHECKLIST}"


def protocol_error(reason: str, *, thinking: bool) -> str:
    """The response to a message that could not be parsed into one action."""
    reminder = FORMAT_REMINDER.format(think="your reasoning in <think>...</think>, " if thinking else "")
    return f"Your message could not be used: {reason}.\n{reminder}"


def with_last_message_warning(text: str) -> str:
    return f"{text}\n\n{LAST_MESSAGE}"
