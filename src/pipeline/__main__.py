"""Entry point: ``python -m pipeline [overrides]`` (Hydra). See docs/pipeline.md."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from pipeline.config import CONFIG_DIR, register_configs
from pipeline.validation import InvalidInputError

log = logging.getLogger("pipeline")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from pipeline.runner import run

    try:
        run(cfg)
    except InvalidInputError as exc:
        # One clear paragraph instead of a traceback; Hydra marks the job failed (non-zero exit).
        log.error("%s", exc)
        print(f"error: {exc}", file=sys.stderr)
        raise


if __name__ == "__main__":
    register_configs()
    main()
