"""Run and sweep directories that never collide.

Hydra names a run's directory after the current second, so two runs launched in the same
second (a shell loop, two terminals, two cluster jobs) used to share it: the second run's
``results.csv`` overwrote the first's beside the first's config. ``${unique_dir:<base>}``
(used by ``hydra.run.dir`` and ``hydra.sweep.dir`` in ``conf/config.yaml``) instead *claims*
a directory atomically: it creates ``<base>`` with an exclusive ``mkdir`` and, if another
process got there first, ``<base>_1``, ``<base>_2``, ... The resolver is cached (like Hydra's
``${now:}``), so every read of the same config, and every job of a sweep (Hydra copies the
master config's resolver cache into each job's config), gets the same directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

RESOLVER = "unique_dir"


def claim_directory(base: str | os.PathLike, max_tries: int = 10_000) -> str:
    """Create and return ``base`` or the first free ``base_<n>``; atomic across processes.

    Raises
    ------
    OSError
        The parent cannot be created (permissions, read-only file system) or no free name
        was found in ``max_tries`` attempts.
    """
    base = Path(base).expanduser()
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(max_tries):
        candidate = base if n == 0 else base.with_name(f"{base.name}_{n}")
        try:
            candidate.mkdir()  # exclusive: exactly one process succeeds for each name
        except FileExistsError:
            continue
        return str(candidate)
    raise OSError(f"no free directory name next to {base} after {max_tries} attempts")


def _resolve(base: str) -> str:
    """The resolver: like :func:`claim_directory`, but an unusable location ends the command with
    one paragraph (Hydra resolves ``hydra.run.dir`` before the pipeline's own error handling)."""
    try:
        return claim_directory(base)
    except OSError as exc:
        raise SystemExit(
            f"error: the run directory {base} cannot be created ({type(exc).__name__}: {exc.strerror or exc}). "
            "Point the outputs at a writable place with paths.log_dir=<dir> (or PIPELINE_LOG_DIR=<dir>)."
        ) from None


def register_resolver() -> None:
    """Register ``${unique_dir:...}`` with OmegaConf (idempotent)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve, use_cache=True)


register_resolver()
