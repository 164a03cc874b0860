"""What ``python -m pipeline.explain`` reads from its command line, checked before any work.

The command applies a finished run: its encoder, clustering, concepts and trees are fixed in
the run's saved explainer, so an override of those (``explainer=[cart]``, ``clustering=kmeans``,
``encoder.*``) would be read by nothing. It reads only

* ``dataset=<option>`` and ``dataset.*``: the data to explain (any dataset option of
  ``python -m pipeline``, read through its ``load`` stage);
* ``paths.*``: where data, models (``paths.models_dir``) and the cache are; ``cache.enabled``;
* ``seed``: only with ``dataset.n_samples`` (which rows are drawn) or generated data;
* its own ``output=<dir>``, ``show=<rows>``, ``latents=true|false`` and ``positional=true|false``.

Anything else is one paragraph naming what it reads (:func:`check_overrides`); a value of its
own options that is not one (``latents=maybe``, ``show=-1``) or an ``output=`` that cannot be
created (an existing file, a path under a file, an unwritable folder) is one line
(:func:`parse_own`, :func:`check_output`).
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.validation import InvalidInputError

OWN_KEYS = ("output", "show", "latents", "positional")
READ = ("dataset=<option> and dataset.* (the data to explain), paths.* (data, models, cache), cache.enabled, seed "
        "(only with dataset.n_samples: which rows are drawn), and the command's own output=<dir>, show=<rows>, "
        "latents=true|false and positional=true|false")
#: why an override of a group of the run is read by nothing here
FIXED = {"explainer": "the run's trees", "clustering": "the run's reference clustering", "encoder": "the run's encoder",
         "concepts": "the run's concept set", "cav": "the run's CAVs", "counterfactuals": "the run's outputs",
         "fit": "the run's trees", "report": "the run's report files", "compute": "the run's chunked passes",
         "experiment": "the run's experiment", "study": "the run's experiment", "threads": "the run's thread count",
         "cpu_code_path": "the run's numbers", "offline": "the run's downloads", "task_name": "the run's name",
         "hydra": "the run's directories"}
_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def split_arguments(args: list[str]) -> tuple[dict, list[str]]:
    """(the command's own options, the overrides naming the data)."""
    own = dict(a.split("=", 1) for a in args if "=" in a and a.split("=", 1)[0] in OWN_KEYS)
    return own, [a for a in args if not ("=" in a and a.split("=", 1)[0] in OWN_KEYS)]


def parse_own(own: dict) -> dict:
    """``{output, show, latents, positional}`` from the command's own options; a bad value is one line."""
    out = {"output": own.get("output"), "show": 10, "latents": False, "positional": False}
    if "show" in own:
        try:
            out["show"] = int(own["show"])
        except ValueError:
            out["show"] = -1
        if out["show"] < 0:
            raise InvalidInputError(f"show={own['show']}: give the number of rows to print, a whole number >= 0 "
                                    "(e.g. show=10).")
    for key in ("latents", "positional"):
        if key in own:
            value = _BOOLS.get(str(own[key]).strip().lower())
            if value is None:
                raise InvalidInputError(f"{key}={own[key]}: give {key}=true or {key}=false.")
            out[key] = value
    if out["output"] is not None and not str(out["output"]).strip():
        raise InvalidInputError("output= is empty: give the folder to write the explanations into (a new one).")
    return out


def override_key(arg: str) -> str:
    """``dataset.path`` of ``+dataset.path=x``, ``explainer`` of ``explainer=[cart]``, ``hydra`` of ``hydra.run.dir=x``."""
    return arg.split("=", 1)[0].lstrip("+~").split("@")[0]


def check_overrides(overrides: list[str]) -> None:
    """Every override is one the command reads (the module docstring); else one paragraph."""
    for arg in overrides:
        if arg.startswith("-"):
            raise InvalidInputError(f"{arg}: python -m pipeline.explain takes no flags; it reads {READ}.")
        if "=" not in arg:
            raise InvalidInputError(f"{arg!r} is not an option (key=value); python -m pipeline.explain <run-dir> reads "
                                    f"{READ}.")
        key = override_key(arg)
        top = key.split(".")[0].split("/")[0]
        if top in ("dataset", "paths", "seed") or key == "cache.enabled":
            continue
        why = f"it sets {FIXED[top]}, which the saved explainer fixes (nothing is refitted)" if top in FIXED \
            else "nothing reads it"
        raise InvalidInputError(f"{arg}: python -m pipeline.explain does not read {key}: {why}. It reads {READ}. To "
                                "change the run itself, run python -m pipeline again and explain with the new run.")


def check_seed(overrides: list[str], cfg: dict) -> None:
    """``seed=`` is read only to draw ``dataset.n_samples`` rows or generate data; alone it changes nothing."""
    if not any(override_key(a) == "seed" for a in overrides):
        return
    from pipeline.app.configuration.instantiate import locate

    ds = cfg.get("dataset") or {}
    generated = ds.get("_target_") and getattr(locate(ds["_target_"], "dataset"), "generated_from_seed", False)
    if ds.get("n_samples") is None and not generated:
        raise InvalidInputError(f"seed={cfg.get('seed')}: python -m pipeline.explain reads seed only to draw "
                                "dataset.n_samples rows of the data (or to generate a synthetic dataset); here it "
                                "would change nothing (nothing is refitted). Leave it out, or give dataset.n_samples.")


def check_output(given) -> Path:
    """The folder ``output=`` names, which must be new (or an empty folder) and creatable; one line if not."""
    out = Path(str(given)).expanduser()
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"output={out} is a file, not a folder; give a new folder for the explanations.")
    if out.is_dir() and any(out.iterdir()):
        raise InvalidInputError(f"output={out} exists and is not empty; explanations never overwrite earlier ones. "
                                "Choose a new folder.")
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise InvalidInputError(f"output={out} cannot be created: {probe} is a file, not a folder. Give a folder "
                                "path whose parents are folders.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InvalidInputError(f"output={out} cannot be created: {probe} is not writable. Give a folder you may "
                                "write to.")
    return out


__all__ = ["OWN_KEYS", "check_output", "check_overrides", "check_seed", "parse_own", "split_arguments"]
