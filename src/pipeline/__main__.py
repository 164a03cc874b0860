"""Entry point: ``python -m pipeline [overrides]`` (Hydra). See docs/pipeline.md."""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from pipeline.app.config import CONFIG_DIR, register_configs
from pipeline.validation import InvalidInputError


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
