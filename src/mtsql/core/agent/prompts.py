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
   <tool_call>{{"name": "exec_sql", "arguments": {{"{argument}": "SELECT ..."}}}}</tool_call>
2. Judge the result you get back. Write <exec_verify>pass</exec_verify> if the query ran, returns the \
columns the question asks for and the rows are plausible. Otherwise write \
<exec_verify>no_pass</exec_verify> and run a corrected query.
3. If the conversation has earlier questions, after a pass retrieve the dialogue memory{memory_about}:
   <tool_call>{{"name": "memory_retrieve", "arguments": {memory_arguments}}}</tool_call>
   Check that your query is consistent with the earlier turns and write \
<memory_verify>pass</memory_verify>, or <memory_verify>no_pass</memory_verify> and run a corrected query.
4. Give the final query: <answer_sql>SELECT ...</answer_sql>. This ends your work on the question.

Rules:
{think_rule}- A verdict goes at the start of the message that follows the tool result, before the next action.
- One action per message: a single <tool_call> or the <answer_sql>.
- You have at most {max_messages} messages for this question; answer before they run out.
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

FAILED_CHECKLIST = """The query did not run: the database refused it (the error above).
Write <exec_verify>pass</exec_verify> or <exec_verify>no_pass</exec_verify>. On no_pass, run a corrected \
query with exec_sql."""

NO_EARLIER_TURNS = (
    "There are no earlier turns: this is the first question of the conversation. No verdict is "
    "needed; give the final query in <answer_sql>...</answer_sql>."
)
NEXT_MEMORY = "call memory_retrieve to check the query against the earlier turns."
NEXT_ANSWER = "give the final query in <answer_sql>...</answer_sql>."
HINT_PREFIX = "Hint: "  # env.error_hint: the line after a missing-name error that names what exists
SUGGESTION_PREFIX = "With it the query reads: "  # env.error_hint: the next line, when a name was meant
LAST_MESSAGE = (
    "This is your last message for this question: give the final query in <answer_sql>...</answer_sql>."
)
FORMAT_REMINDER = (
    "Write {think}any verdict tag, then exactly one <tool_call>{{...}}</tool_call> or one "
    "<answer_sql>...</answer_sql>."
)


def system_prompt(
    *, mode: str, max_messages: int, result_chars: int, thinking: bool, protocol: str = "mtsql"
) -> str:
    """The rules of the task: the step-by-step tool protocol (long) or a direct answer (short); under
    the release protocol both tools take the query as ``code``."""
    if mode == "short":
        steps = SHORT_STEPS.format(think_rule=SHORT_THINK_RULE if thinking else "")
    else:
        release = protocol == "release"
        steps = LONG_STEPS.format(
            think_rule=THINK_RULE if thinking else "",
            max_messages=max_messages,
            result_chars=result_chars,
            argument="code" if release else "sql",
            memory_about=" with the query to check" if release else "",
            memory_arguments='{"code": "SELECT ..."}' if release else "{}",
        )
    return f"{ROLE}\n\n{steps}"


def with_evidence(question: str, evidence: str) -> str:
    """The question, and on the next line BIRD's evidence when the item has one (as BIRD-style prompts
    show it); a question without evidence is shown alone."""
    return f"{question}\nEvidence: {evidence.strip()}" if evidence.strip() else question


def user_prompt(
    *,
    schema: str,
    question: str,
    history: Sequence[tuple[str, str | None]],
    show_history_sql: bool,
    evidence: str = "",
) -> str:
    """Schema, the earlier questions (with their SQL in the short mode), and the current question with
    its evidence (BIRD's external knowledge; none shown when there is none)."""
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
    parts.append(f"Current question: {with_evidence(question, evidence)}")
    return "\n\n".join(parts)


def exec_observation(
    *, question: str, sql: str, result: str, has_history: bool, refused: bool = False
) -> str:
    """The exec_sql tool response: recap, result or error, then what to verify and do next. ``refused``
    (``env.error_hint``, a query that raised an error): the next step named is a corrected query only, since
    small models copy the tool an observation names last (docs/method.md)."""
    checklist = (
        FAILED_CHECKLIST
        if refused
        else EXEC_CHECKLIST.format(next_step=NEXT_MEMORY if has_history else NEXT_ANSWER)
    )
    return f"Question: {question}\nSQL: {sql}\nResult:\n{result}\n\n{checklist}"


def memory_observation(
    *,
    turns: Sequence[tuple[str, str | None, str, str]],
    question: str,
    candidate: str | None,
    candidate_clauses: str,
) -> str:
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


RELEASE_EXEC_STEPS = """Next:
1. Check the result: did the query run without an error? Are the returned columns in the schema and the \
ones the question asks for? Are there unexpected NULL values, an empty result or an error message?
2. Then write <exec_verify>pass</exec_verify> if the result is valid for the question, or \
<exec_verify>no_pass</exec_verify> if it shows an error, the wrong columns or implausible values.
3. On no_pass, reason step by step, correct the query and run the corrected one with exec_sql.
4. On pass, {next_step}"""

RELEASE_RESULT_LINE = "- Result: "
RELEASE_NEXT_MEMORY = (
    "call memory_retrieve with this query at least once, to check it against the earlier "
    "questions of the dialogue."
)
RELEASE_MEMORY_STEPS = """Check the candidate query for coherence with the dialogue:
1. Does it follow from the current question and the earlier ones? Where the current question changes \
something (columns, conditions, ordering), the query must change with it; elsewhere it must stay as before.
   Go through it clause by clause: the tables read, the selected columns, the conditions \
(WHERE / GROUP BY / HAVING), the ordering, the joins, and whether its result answers the current question.
2. Then write <memory_verify>pass</memory_verify> if it is coherent, or \
<memory_verify>no_pass</memory_verify> if it is not.
3. On no_pass, say what is wrong, correct the query and run the corrected one with exec_sql.
4. On pass, give the final query in <answer_sql>...</answer_sql>."""


def release_exec_observation(*, question: str, sql: str, result: str, has_history: bool) -> str:
    """The exec_sql response under the release protocol: a recap (question, query, result already
    cut), then the four verification steps."""
    steps = RELEASE_EXEC_STEPS.format(next_step=RELEASE_NEXT_MEMORY if has_history else NEXT_ANSWER)
    return f"Recap:\n- Current question: {question}\n- Query: {sql}\n{RELEASE_RESULT_LINE}{result}\n\n{steps}"


def release_memory_observation(
    *, question: str, candidate: str, result: str, turns: Sequence[tuple[str, str | None, str, str]]
) -> str:
    """The memory_retrieve response under the release protocol: the candidate with its result, then
    each earlier turn (question, SQL, Spider parse, first rows), then the coherence steps."""
    lines = [
        f"Current question: {question}",
        f"Candidate query: {candidate}",
        f"Its result: {result}",
        "",
        "Earlier turns, oldest first:" if turns else "Earlier turns: none, this is the first question.",
    ]
    for number, (question_text, sql, parsed, rows) in enumerate(turns, 1):
        lines.append(f"[Turn {number}] Question: {question_text}")
        if sql:
            lines.append(f"  SQL: {sql}\n  Parsed: {parsed}\n  First rows: {rows}")
        else:
            lines.append("  SQL: (no query was given)")
    return "\n".join(lines) + f"\n\n{RELEASE_MEMORY_STEPS}"


def cap_observation(text: str, max_chars: int | None) -> str:
    """``text`` cut in the middle to at most ``max_chars`` characters (None: unchanged), as verl cuts tool
    responses: the head and the tail kept around a marker."""
    if max_chars is None or len(text) <= max_chars:
        return text
    marker = "\n...(cut)...\n"
    keep = max(0, max_chars - len(marker))
    head = keep - keep // 2
    return text[:head] + marker + text[len(text) - keep // 2 :]


def protocol_error(reason: str, *, thinking: bool) -> str:
    """The response to a message that could not be parsed into one action."""
    reminder = FORMAT_REMINDER.format(think="your reasoning in <think>...</think>, " if thinking else "")
    return f"Your message could not be used: {reason}.\n{reminder}"


def with_last_message_warning(text: str) -> str:
    return f"{text}\n\n{LAST_MESSAGE}"
