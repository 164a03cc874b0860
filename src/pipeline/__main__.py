"""Entry point: ``python -m pipeline [overrides]`` (Hydra). See docs/pipeline.md."""

from __future__ import annotations

import os
import sys

from pipeline.threads import openmp_environment  # noqa: E402 - light: os, sys, contextvars

# The OpenMP variables pipeline.threads decides (idle threads sleep instead of spinning); set
# before the OpenMP runtime loads; a user's value wins.
for _name, _value in openmp_environment().items():
    os.environ.setdefault(_name, _value)

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from pipeline.app.config import CONFIG_DIR, register_configs  # noqa: E402
from pipeline.validation import InvalidInputError  # noqa: E402


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from pipeline.app.runner import run

    try:
        run(cfg)
    except InvalidInputError as exc:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # the sweeper records the failed job (status.json has the error) and the others go on
        # A single run: one clear paragraph instead of a traceback, non-zero exit.
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    register_configs()
    main()
