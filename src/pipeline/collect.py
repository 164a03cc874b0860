"""Entry point: ``python -m pipeline.collect <sweep dir>`` gathers a multirun's results.

A thin command-line door into the application layer (like ``pipeline/__main__.py``); the
work is in :mod:`pipeline.app.sweep_command`.
"""

from __future__ import annotations

import sys

from pipeline.app.sweep_command import main

if __name__ == "__main__":
    sys.exit(main())
