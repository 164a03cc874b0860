"""Properties of texts measured on each text: lexicon categories, sentiment, readability and simple counts.

Pure: the lexicon (category -> words, e.g. empath's built-in categories ``Empath().cats``), the
sentiment function (e.g. VADER's compound score) and the readability function (e.g. textstat's
Flesch reading ease) are passed in already loaded, since loading them reads files; the
application builds them (:mod:`pipeline.app.concept_sets.measured_text`).

Tokens are runs of letters and digits, with inner hyphens and apostrophes (``e-mail``, ``don't``),
lower-cased, web addresses left out: ``re.findall(r"[a-z0-9]+(?:['-][a-z0-9]+)*", text.lower())``
once the addresses are removed (:func:`tokens`). Empath's own tokenizer
only splits on white space without lower-casing, so "Money," would miss the category there; here
it counts. Multi-word lexicon entries (with a space) never match a single token and are ignored.

- ``<category>_words``: tokens of the lexicon category per 100 tokens;
- ``sentiment``: the sentiment function's score of the whole text (VADER: compound, -1..1);
- ``readability``: the readability function's score (Flesch reading ease: higher is easier);
- ``length``: tokens;
- ``urls``: web addresses (``http://``, ``https://`` or ``www.``);
- ``numbers``: numbers (digit runs, with inner ``.`` or ``,``, not inside a word such as ``abc123``
  or an encoded blob, nor in a web address) per 100 tokens;
- ``exclamations``: exclamation marks per 100 tokens;
- ``uppercase``: share of the letters written in upper case.

Empty texts (no token) have NaN rates, sentiment and readability, with a note; their length and
counts are 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np

from pipeline.concepts.measures import Measure, Measurements
from pipeline.concepts.measures._notes import add_note, items_phrase
from pipeline.validation import InvalidInputError

WHO = "text_measurements"
#: the lexicon categories measured by default: what e-mails are about (empath's category names)
TEXT_CATEGORIES = ("money", "shopping", "business", "internet", "computer", "communication", "work", "programming")

TOKEN = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")
URL = re.compile(r"(?:https?://|www\.)[^\s<>\"']+", re.IGNORECASE)
NUMBER = re.compile(r"(?<![^\W_])\d+(?:[.,]\d+)*(?![^\W_])")  # not inside a word: "abc123", base64 blobs
LETTER = re.compile(r"[^\W\d_]")  # any letter


def tokens(text: str) -> list[str]:
    """The lower-cased word tokens of ``text`` (letters and digits, inner hyphens and apostrophes), web addresses
    left out (they are counted by ``urls``; "www.shop.example" is no shopping word)."""
    return TOKEN.findall(URL.sub(" ", text).lower())


def _m(name, description, unit, split):
    return Measure(name, description, unit, split, "text")


COUNT_MEASURES = (
    _m("length", "length of the text in word tokens", "words", "tertiles"),
    _m("urls", "web addresses in the text (http://, https:// or www.)", "urls", "presence"),
    _m("numbers", "numbers (digit runs) per 100 words", "per 100 words", "tertiles"),
    _m("exclamations", "exclamation marks per 100 words", "per 100 words", "presence"),
    _m("uppercase", "share of the letters written in upper case", "share of letters", "tertiles"),
)
SENTIMENT = _m("sentiment", "sentiment of the whole text (the sentiment function's score; VADER compound -1..1)",
               "score", "tertiles")
READABILITY = _m("readability", "readability of the text (the readability function's score; Flesch reading ease, "
                 "higher is easier)", "score", "tertiles")


def category_measure(category: str) -> Measure:
    """The measure of one lexicon category: its words per 100 words."""
    return _m(f"{category}_words", f"words of the lexicon category '{category}' per 100 words", "per 100 words",
              "tertiles")


def text_measurements(texts, *, lexicon: Mapping | None = None, categories=None,
                      sentiment: Callable[[str], float] | None = None,
                      readability: Callable[[str], float] | None = None) -> Measurements:
    """Measure lexicon categories, sentiment, readability and simple counts of each text.

    Parameters
    ----------
    texts : sequence of str, length n
        The texts (a list, tuple or 1-D array of str).
    lexicon : mapping of str to iterable of str, optional
        Category name -> its words (e.g. ``empath.Empath().cats``); without it, no category measures.
    categories : sequence of str, optional
        The lexicon's categories to measure; default :data:`TEXT_CATEGORIES` (with a lexicon).
    sentiment : callable, optional
        ``sentiment(text) -> float`` (e.g. ``lambda t: SentimentIntensityAnalyzer().polarity_scores(t)["compound"]``);
        without it, no ``sentiment`` measure.
    readability : callable, optional
        ``readability(text) -> float`` (e.g. ``textstat.flesch_reading_ease``); without it, no
        ``readability`` measure.

    Returns
    -------
    Measurements
        ``values`` of shape (n, k): one ``<category>_words`` column per category, then
        ``sentiment`` and ``readability`` (when given), then ``length``, ``urls``, ``numbers``,
        ``exclamations`` and ``uppercase``. NaN where undefined (an empty text; a function that
        raised or returned no number on a text), each with a note.

    Raises
    ------
    InvalidInputError
        For images or numbers instead of texts, a single str, items that are not str (naming
        them), no texts, a lexicon that is no mapping of words, categories it lacks, and
        functions that are not callable.
    """
    texts = _check_texts(texts)
    index, names = _category_index(lexicon, categories)
    for name, fn in (("sentiment", sentiment), ("readability", readability)):
        if fn is not None and not callable(fn):
            raise InvalidInputError(f"{WHO}: {name} must be a function text -> number (or None); got "
                                    f"{type(fn).__name__}.")
    n = len(texts)
    words = [tokens(t) for t in texts]
    length = np.array([len(w) for w in words], dtype=np.float64)
    empty = length == 0
    per_100 = 100.0 / np.where(empty, np.nan, length)
    columns, measures, notes = [], [], {}

    if index is not None:
        counts = np.zeros((n, len(names)))
        for i, ws in enumerate(words):
            for w in ws:
                for c in index.get(w, ()):
                    counts[i, c] += 1
        columns += list((counts * per_100[:, None]).T)
        measures += [category_measure(c) for c in names]
    for measure, fn in ((SENTIMENT, sentiment), (READABILITY, readability)):
        if fn is not None:
            columns.append(_score(fn, texts, empty, measure.name, notes))
            measures.append(measure)
    letters = np.array([len(LETTER.findall(t)) for t in texts], dtype=np.float64)
    upper = np.array([sum(ch.isupper() for ch in t) for t in texts], dtype=np.float64)
    columns += [length,
                np.array([len(URL.findall(t)) for t in texts], dtype=np.float64),
                np.array([len(NUMBER.findall(URL.sub(" ", t))) for t in texts]) * per_100,
                np.array([t.count("!") for t in texts]) * per_100,
                np.where(letters > 0, upper / np.maximum(letters, 1), np.nan)]
    measures += list(COUNT_MEASURES)

    rates = [m.name for m in measures if m.unit == "per 100 words"]
    add_note(notes, rates, "empty texts (no word) have no rate per 100 words.", empty, n, "text")
    for m in (SENTIMENT, READABILITY):
        if m in measures:
            add_note(notes, [m.name], "an empty text (no word) has no score.", empty, n, "text")
    add_note(notes, ["uppercase"], "texts without letters have no share of upper-case letters.", letters == 0, n,
             "text")
    return Measurements(np.column_stack(columns), tuple(measures), notes)


def _check_texts(texts) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise InvalidInputError(f"{WHO} measures a sequence of texts, but it was given a single "
                                f"{type(texts).__name__}; pass a list, e.g. [text].")
    if isinstance(texts, np.ndarray) and texts.dtype.kind in "biufc":
        raise InvalidInputError(f"{WHO} measures texts, but it was given a numeric array of shape {texts.shape} "
                                "(images or features?). For digit images use digit_measurements, for object images "
                                "silhouette_measurements (pipeline.concepts.measures).")
    try:
        texts = list(texts)
    except TypeError:
        raise InvalidInputError(f"{WHO} measures a sequence of texts; got {type(texts).__name__}.") from None
    if not texts:
        raise InvalidInputError(f"{WHO}: no texts to measure; pass at least one text.")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        kinds = sorted({type(texts[i]).__name__ for i in bad})
        hint = (" They look like images or numbers: for images use digit_measurements or silhouette_measurements."
                if all(isinstance(texts[i], (int, float, np.number, np.ndarray, list)) for i in bad) else
                " Convert them (e.g. decode bytes, or replace None with '').")
        raise InvalidInputError(f"{WHO}: {items_phrase(bad, len(texts), 'item')} are not str but "
                                f"{', '.join(kinds)}.{hint}")
    return texts


def _category_index(lexicon, categories):
    """``(term -> category column indices, category names)``, or ``(None, [])`` without a lexicon."""
    if lexicon is None:
        if categories is not None:
            raise InvalidInputError(f"{WHO}: categories={list(categories)} were asked for without a lexicon; pass "
                                    "lexicon={category: words} (e.g. empath.Empath().cats).")
        return None, []
    if not isinstance(lexicon, Mapping):
        raise InvalidInputError(f"{WHO}: the lexicon must be a mapping of category -> words (e.g. "
                                f"empath.Empath().cats); got {type(lexicon).__name__}.")
    names = list(TEXT_CATEGORIES if categories is None else
                 ([categories] if isinstance(categories, str) else categories))
    missing = [c for c in names if c not in lexicon]
    if missing or not names:
        raise InvalidInputError(f"{WHO}: the lexicon has no categor{'y' if len(missing) == 1 else 'ies'} "
                                f"{missing or '(none asked for)'}; choose among its {len(lexicon)} categories, e.g. "
                                f"{sorted(lexicon)[:12]}.")
    index: dict = {}
    for column, name in enumerate(names):
        words = lexicon[name]
        if isinstance(words, str) or not all(isinstance(w, str) for w in words):
            raise InvalidInputError(f"{WHO}: the lexicon's category {name!r} must be a list of words (str); got "
                                    f"{type(words).__name__}.")
        for word in {w.lower() for w in words if w and " " not in w}:
            index.setdefault(word, []).append(column)
    return index, names


def _score(fn, texts, empty, name, notes) -> np.ndarray:
    """``fn`` on every non-empty text, NaN (with a note) where it raises or returns no finite number."""
    out = np.full(len(texts), np.nan)
    failed, errors = [], []
    for i, text in enumerate(texts):
        if empty[i]:
            continue
        try:
            raw = fn(text)
        except Exception as exc:  # a user's function: one note for all its failures, the rest goes on
            failed.append(i)
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, float, np.integer, np.floating)):
            raise InvalidInputError(
                f"{WHO}: the {name} function must return one number per text, but on text {i} it returned "
                f"{type(raw).__name__} {str(raw)[:80]}. Wrap it, e.g. lambda t: analyzer.polarity_scores(t)"
                "['compound'] for VADER.")
        value = float(raw)
        if np.isfinite(value):
            out[i] = value
        else:
            failed.append(i)
            errors.append(f"returned {value}")
    add_note(notes, [name], f"the {name} function failed on them (first: {errors[0] if errors else ''}).",
             failed, len(texts), "text")
    return out
