"""Trajectories -> a LLaMA-Factory sharegpt dataset with tools, checked with LLaMA-Factory's own pipeline.

One trajectory (OpenAI-style ``messages``) becomes one example::

    {"system": "...", "tools": "<JSON list of function schemas>",
     "conversations": [{"from": "human", "value": "..."},         # user message
                       {"from": "function_call", "value": "..."}, # assistant text with a <tool_call>
                       {"from": "observation", "value": "..."},   # tool result
                       {"from": "gpt", "value": "..."}]}          # assistant text without a tool call

Assistant texts are kept whole (reasoning, verdict tags, the tool call, the answer): LLaMA-Factory
trains every gpt/function_call turn and masks every human/observation turn. For a function_call
turn it re-renders the call as ``<tool_call>\\n{json}\\n</tool_call>`` after the rest of the text;
a family without Qwen's hermes tool section (``llama3``, ``auto``) gets no ``tools`` and every
assistant turn as ``gpt``, kept verbatim (LLaMA-Factory would rewrite a call into its own format);
``ExportStats.rewritten`` counts examples whose trained tokens therefore differ from the verbatim
conversation (``mtsql.core.chat_format``), which is what a rollout shows the model.

An example LLaMA-Factory would skip or crash on is dropped here, with its reason counted; the
token counts come from LLaMA-Factory's converter, template and supervised processor.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mtsql.base.errors import StageFailed
from mtsql.base.files import iter_jsonl, write_json, write_jsonl
from mtsql.core.agent.tools import TOOL_SCHEMAS
from mtsql.core.chat_format import AUTO, FAMILIES, TEMPLATES, ChatFormat

ROLE_TAGS = {"user": "human", "tool": "observation"}  # assistant -> gpt or function_call
SOURCE_TAGS = ("human", "observation")  # LLaMA-Factory wants these at even positions, the rest at odd
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ExportStats:
    """What was written. ``dropped``: reason -> count. Token figures are full, untruncated lengths."""

    examples: int
    dropped: dict[str, int] = field(default_factory=dict)
    over_cutoff: int = 0  # longer than cutoff_len: LLaMA-Factory would cut their later turns
    max_tokens: int = 0
    mean_tokens: float = 0.0
    rewritten: int | None = 0  # tool calls LLaMA-Factory re-renders unlike the verbatim text (None: unknown)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Tokenized:
    """One example as LLaMA-Factory encodes it: ``labels`` is -100 where no loss is taken."""

    input_ids: list[int]
    labels: list[int]


def export_sharegpt(
    trajectories: Iterable[dict],
    out_dir: Path,
    name: str = "mtsql_sft",
    *,
    tokenizer_path: str | Path,
    template: str,
    cutoff_len: int,
    tools: Sequence[dict] | None = None,
) -> ExportStats:
    """Write ``<name>.jsonl`` and ``dataset_info.json`` into ``out_dir``; drop (and count) examples
    LLaMA-Factory cannot use; count tokens with ``template`` and the tokenizer at ``tokenizer_path``.

    ``tools`` defaults to ``mtsql.core.agent.tools.TOOL_SCHEMAS``; pass ``()`` for tool-less (short) data.
    Raises ``StageFailed`` when nothing is left to train on, or LLaMA-Factory cannot tokenize.
    """
    if tools is None:
        tools = TOOL_SCHEMAS
    hermes = hermes_tools(template)
    tools_json = json.dumps(list(tools), ensure_ascii=False) if tools and hermes else ""
    given, rows, sources, dropped = 0, [], [], Counter()
    for trajectory in trajectories:
        given += 1
        messages = trajectory.get("messages") if isinstance(trajectory, dict) else None
        row, reason = to_sharegpt(messages, tools_json, function_calls=hermes)
        if reason:
            dropped[reason] += 1
        else:
            rows.append(row)
            sources.append(messages)
    if not rows:
        why = f"all {given} were dropped ({_reasons(dropped)})" if given else "the trajectory set is empty"
        raise StageFailed(
            f"no SFT examples to export to {out_dir}: {why}; sample and reject more trajectories"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / f"{name}.jsonl", rows)
    write_json(out_dir / "dataset_info.json", {name: dataset_entry(name)})
    encoded, tokenizer = encode_dataset(out_dir, name, tokenizer_path=tokenizer_path, template=template)
    if len(encoded) != len(rows):
        raise StageFailed(
            f"LLaMA-Factory kept {len(encoded)} of the {len(rows)} examples in {out_dir}: "
            "its log names the ones it skipped"
        )
    lengths = [len(e.input_ids) for e in encoded]
    return ExportStats(
        examples=len(rows),
        dropped=dict(sorted(dropped.items())),
        over_cutoff=sum(n > cutoff_len for n in lengths),
        max_tokens=max(lengths),
        mean_tokens=round(sum(lengths) / len(lengths), 1),
        rewritten=_count_rewritten(encoded, sources, tools, tokenizer, template),
    )


def hermes_tools(template: str) -> bool:
    """Whether ``template`` lists the tools in Qwen's hermes block and trains calls as function_call turns."""
    return template in FAMILIES and FAMILIES[template].hermes_tools


def llamafactory_template(template: str) -> str | None:
    """The ``template`` LLaMA-Factory is given for ``model.template``: None for ``auto`` (it then parses
    the tokenizer's chat template itself)."""
    return None if template == AUTO else template


def dataset_entry(name: str) -> dict:
    """The ``dataset_info.json`` entry registering ``<name>.jsonl`` (tags spelled out)."""
    return {
        "file_name": f"{name}.jsonl",
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
        "tags": {
            "role_tag": "from",
            "content_tag": "value",
            "user_tag": "human",
            "assistant_tag": "gpt",
            "observation_tag": "observation",
            "function_tag": "function_call",
            "system_tag": "system",
        },
    }


def to_sharegpt(
    messages: object, tools_json: str, *, function_calls: bool = True
) -> tuple[dict | None, str | None]:
    """(example, None) or (None, reason it cannot be trained on). ``function_calls`` off: a tool-call
    message is a ``gpt`` turn too."""
    if not isinstance(messages, list) or not messages:
        return None, "no messages"
    system = ""
    if isinstance(messages[0], dict) and messages[0].get("role") == "system":
        system, messages = messages[0].get("content"), messages[1:]
        if not isinstance(system, str):
            return None, "system content is not text"
    conversation = []
    for position, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role == "system":
            return None, "system message after the start"
        if role not in ("user", "tool", "assistant"):
            return None, f"unknown role {role!r}"
        if not isinstance(content, str):
            return None, f"{role} content is not text"
        if role == "assistant":
            tag, problem = _assistant_tag(content)
            if problem:
                return None, problem
            tag = tag if function_calls else "gpt"
        else:
            tag = ROLE_TAGS[role]
        if (tag in SOURCE_TAGS) != (position % 2 == 0):
            return None, "user/tool and assistant messages do not alternate"
        conversation.append({"from": tag, "value": content})
    if not conversation:
        return None, "no user message"
    if len(conversation) % 2:
        return None, "does not end with an assistant message"
    return {"conversations": conversation, "system": system, "tools": tools_json}, None


def _assistant_tag(content: str) -> tuple[str, str | None]:
    """gpt, or function_call for a message with one well-formed tool call (else a drop reason)."""
    if not content.strip():
        return "gpt", "empty assistant message"
    calls = _TOOL_CALL.findall(content)
    if not calls:
        return "gpt", None
    if len(calls) > 1:
        return "function_call", "more than one tool call in a message"
    try:
        call = json.loads(calls[0])
    except json.JSONDecodeError:
        return "function_call", "tool call is not valid JSON"
    if not (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("arguments"), dict)
    ):
        return "function_call", "tool call lacks a name or an arguments object"
    return "function_call", None


def _reasons(dropped: Counter) -> str:
    return ", ".join(f"{reason}: {count}" for reason, count in sorted(dropped.items()))


def encode_dataset(
    dataset_dir: Path, name: str, *, tokenizer_path: str | Path, template: str, cutoff_len: int = 10**9
) -> tuple[list[Tokenized], object]:
    """A registered sharegpt dataset encoded exactly as ``llamafactory-cli train`` does (its dataset
    registry, sharegpt converter, template and supervised processor), truncated at ``cutoff_len``:
    (the encoded examples, the tokenizer as LLaMA-Factory fixed it)."""
    from llamafactory.data.converter import get_dataset_converter
    from llamafactory.data.parser import get_dataset_list
    from llamafactory.data.processor import SupervisedDatasetProcessor
    from llamafactory.hparams import DataArguments

    tokenizer, chat_template, processor = _load_tokenizer(str(tokenizer_path), template)
    data_args = DataArguments(
        template=llamafactory_template(template),
        dataset=name,
        dataset_dir=str(dataset_dir),
        cutoff_len=cutoff_len,
    )
    attr = get_dataset_list([name], str(dataset_dir))[0]
    convert = get_dataset_converter(attr.formatting, attr, data_args)
    encoder = SupervisedDatasetProcessor(
        template=chat_template, tokenizer=tokenizer, processor=processor, data_args=data_args
    )
    aligned = [convert(row) for row in iter_jsonl(Path(dataset_dir) / attr.dataset_name)]
    batch = {key: [row[key] for row in aligned] for key in aligned[0]} if aligned else {"_prompt": []}
    encoded = encoder.preprocess_dataset(batch)
    return [
        Tokenized(ids, labels) for ids, labels in zip(encoded["input_ids"], encoded["labels"], strict=True)
    ], tokenizer


def _load_tokenizer(tokenizer_path: str, template: str) -> tuple:
    """(tokenizer, template, processor) as ``llamafactory-cli train`` loads them."""
    from llamafactory.data.template import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    try:
        modules = _tokenizer_modules(tokenizer_path)
        chat_template = get_template_and_fix_tokenizer(
            modules["tokenizer"], DataArguments(template=llamafactory_template(template))
        )
    except Exception as exc:  # LLaMA-Factory and transformers raise many types: quote the message
        raise StageFailed(
            f"LLaMA-Factory cannot load the tokenizer of {tokenizer_path} with template "
            f"'{template}': {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    return modules["tokenizer"], chat_template, modules["processor"]


@functools.lru_cache(maxsize=4)
def _tokenizer_modules(tokenizer_path: str) -> dict:
    """LLaMA-Factory's tokenizer (and processor) of a model folder, kept for reuse: a 150k-token
    tokenizer takes seconds to load."""
    from llamafactory.hparams import ModelArguments
    from llamafactory.model import load_tokenizer

    return load_tokenizer(ModelArguments(model_name_or_path=tokenizer_path))


def _count_rewritten(
    encoded: list[Tokenized], sources: list[list[dict]], tools: Sequence[dict], tokenizer, template: str
) -> int | None:
    """Examples whose LLaMA-Factory tokens differ from the verbatim chat-format rendering (None: a
    template ``mtsql.core.chat_format`` does not render, so there is nothing to compare with)."""
    if template not in TEMPLATES:
        return None
    chat = ChatFormat.for_template(tokenizer, template)
    return sum(
        e.input_ids != chat.render_ids(messages, tools) for e, messages in zip(encoded, sources, strict=True)
    )


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    return text if len(text) <= limit else text[: limit - 3] + "..."
