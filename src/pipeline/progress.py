"""The progress bar class of every long loop in the package (tqdm).

``tqdm.auto`` inside a Jupyter kernel without ipywidgets warns "IProgress not found. Please
update jupyter and ipywidgets" and then falls back to the console bar anyway, which Jupyter
draws fine. Here the widget bar is chosen only when ipywidgets is installed, so a notebook
gets no warning; everywhere else the console bar (``tqdm.std``). ``python -m pipeline``
turns a console bar written to a log file or a pipe into plain lines
(:class:`pipeline.app.console.ProgressLines`).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings


def _notebook_widgets() -> bool:
    """Whether this is a Jupyter kernel that can draw tqdm's widget bars (ipywidgets installed)."""
    return "ipykernel.zmqshell" in sys.modules and importlib.util.find_spec("ipywidgets") is not None


if _notebook_widgets():  # pragma: no cover - needs a kernel with ipywidgets
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TqdmExperimentalWarning: "Using tqdm.autonotebook.tqdm in notebook mode"
        from tqdm.notebook import tqdm
else:
    from tqdm.std import tqdm

__all__ = ["tqdm"]
