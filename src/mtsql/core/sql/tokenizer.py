"""SQL tokenization exactly as the official Spider/SParC/CoSQL evaluators do it.

1. every ``'`` becomes ``"``; an odd number of quotes is an error;
2. each quoted literal (pairs of quotes, last pair first) is replaced by a placeholder word;
3. the text goes through NLTK's ``word_tokenize`` (Punkt sentence splitting, then the Treebank word
   tokenizer on each sentence) and every token is lower-cased;
4. placeholders are replaced by their literal (original case, with its quotes);
5. ``!``/``>``/``<`` followed by a separate ``=`` token are merged into one operator.

``word_tokenize`` needs NLTK's ``punkt_tab`` data. When it is installed we use it as is; when it is
not (offline machines), Punkt runs with the English model's abbreviations, collocations and sentence
starters embedded in :mod:`mtsql.core.sql._punkt_english` (see that module for the one difference).
"""

from __future__ import annotations

import functools

from mtsql.core.sql.errors import SqlParseError


def tokenize(sql: str) -> list[str]:
    """Official token list of ``sql`` (lower-cased, string literals kept whole with their quotes)."""
    text = str(sql).replace("'", '"')
    quotes = [i for i, char in enumerate(text) if char == '"']
    if len(quotes) % 2:
        raise SqlParseError("unbalanced quotes")
    literals: dict[str, str] = {}
    for pos in range(len(quotes) - 1, 0, -2):
        start, end = quotes[pos - 1], quotes[pos]
        placeholder = f"__val_{start}_{end}__"
        literals[placeholder] = text[start : end + 1]
        text = text[:start] + placeholder + text[end + 1 :]
    tokens = [literals.get(word.lower(), word.lower()) for word in _word_tokenize(text)]
    return _merge_comparison_operators(tokens)


def _merge_comparison_operators(tokens: list[str]) -> list[str]:
    """Join ``!``/``>``/``<`` with a following ``=`` token, scanning from the last ``=`` backwards.

    The previous token is looked up with Python indexing, so an ``=`` in first position looks at the
    last token, as the official code does.
    """
    positions = [i for i, tok in enumerate(tokens) if tok == "="]
    for pos in reversed(positions):
        before = tokens[pos - 1]
        if before in ("!", ">", "<"):
            tokens = tokens[: pos - 1] + [before + "="] + tokens[pos + 1 :]
    return tokens


def _word_tokenize(text: str) -> list[str]:
    splitter, words, boundary = _nltk_tokenizers()
    if boundary.search(text) is None:  # no possible sentence end: Punkt returns the text, right-stripped
        return words.tokenize(text.rstrip())
    return [token for sentence in splitter.tokenize(text) for token in words.tokenize(sentence)]


@functools.cache
def _nltk_tokenizers():
    """(sentence splitter, Treebank word tokenizer, Punkt's possible-sentence-end pattern), built on
    first use (NLTK is slow to import)."""
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktLanguageVars, PunktParameters, PunktSentenceTokenizer

    try:
        from nltk.tokenize.punkt import PunktTokenizer

        splitter = PunktTokenizer("english")
    except LookupError:
        from mtsql.core.sql import _punkt_english

        params = PunktParameters()
        params.abbrev_types = set(_punkt_english.ABBREVIATIONS)
        params.collocations = set(_punkt_english.COLLOCATIONS)
        params.sent_starters = set(_punkt_english.SENTENCE_STARTERS)
        splitter = PunktSentenceTokenizer(params)
    return splitter, NLTKWordTokenizer(), PunktLanguageVars().period_context_re()
