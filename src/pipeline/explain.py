"""Entry point: ``python -m pipeline.explain <run-dir> dataset=<option> [overrides] [output=<dir>] [show=N]``.

A finished run applied to new data (docs/explain.md): writes ``explanations.parquet``,
``generalisation.csv`` and ``report.html`` and prints a short table. ``<run-dir>`` is a run
directory or a saved explainer folder; the other arguments are ``python -m pipeline``
overrides naming the data (``dataset=...``, ``dataset.*``, ``paths.*``; any other override is
refused, naming what it reads) plus ``output=<dir>`` (default
``<run>/explanations/<dataset>-<time>/``), ``show=<rows>`` (console rows, default 10),
``latents=true`` (the dataset's rows are already the encoder's latents) and
``positional=true`` (a table's columns taken in order, not found by name).
"""

from __future__ import annotations

import os
import sys

from pipeline.threads import openmp_environment

for _name, _value in openmp_environment().items():
    os.environ.setdefault(_name, _value)

USAGE = __doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1]


def main(argv: list[str] | None = None) -> int:
    import logging

    from pipeline.app.console import TqdmConsoleHandler
    from pipeline.app.explainer.explain_options import parse_own, split_arguments
    from pipeline.app.explain_run import explain_run
    from pipeline.validation import InvalidInputError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    run_dir, rest = argv[0], argv[1:]
    own, overrides = split_arguments(rest)
    handler = TqdmConsoleHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        explain_run(run_dir, overrides, **parse_own(own))
    except InvalidInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
