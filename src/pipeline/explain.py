"""Entry point: ``python -m pipeline.explain <run-dir> dataset=<option> [overrides] [output=<dir>] [show=N]``.

A finished run applied to new data (docs/explain.md): writes ``explanations.parquet``,
``generalisation.csv`` and ``report.html`` and prints a short table. ``<run-dir>`` is a run
directory or a saved explainer folder; the other arguments are ``python -m pipeline``
overrides naming the data (``dataset=...``, ``dataset.*``, ``paths.*``) plus ``output=<dir>``
(default ``<run>/explanations/<dataset>-<time>/``), ``show=<rows>`` (console rows, default 10)
and ``latents=true`` (the dataset's rows are already the encoder's latents).
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
    from pipeline.app.explain_run import OWN_KEYS, explain_run
    from pipeline.validation import InvalidInputError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    run_dir, rest = argv[0], argv[1:]
    own = dict(a.split("=", 1) for a in rest if "=" in a and a.split("=", 1)[0] in OWN_KEYS)
    overrides = [a for a in rest if not ("=" in a and a.split("=", 1)[0] in OWN_KEYS)]
    handler = TqdmConsoleHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        show = int(own.get("show", 10))
        latents = str(own.get("latents", "false")).lower() in ("1", "true", "yes")
        explain_run(run_dir, overrides, output=own.get("output"), show=show, latents=latents)
    except ValueError as exc:
        if not isinstance(exc, InvalidInputError):
            print(f"error: show must be a whole number of rows ({exc}).", file=sys.stderr)
            return 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
