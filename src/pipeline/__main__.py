"""Entry point: ``python -m pipeline [overrides]`` (Hydra). See docs/pipeline.md."""

from __future__ import annotations

import os
import sys

from pipeline.threads import CPU_CODE_PATHS, cpu_code_path_environment, openmp_environment  # noqa: E402 - light


def code_path_setting(argv: list[str]) -> str:
    """The run's ``cpu_code_path`` as the command line (``cpu_code_path=native``) or the environment
    (``PIPELINE_CPU_CODE_PATH``) gives it, before Hydra composes anything: the variables must be set
    before torch and MKL load. A value that is not a setting is left for the config check to report."""
    for arg in reversed(argv):
        if arg.lstrip("+").startswith("cpu_code_path="):
            value = arg.split("=", 1)[1]
            return value if value in CPU_CODE_PATHS else "native"
    value = os.environ.get("PIPELINE_CPU_CODE_PATH", "native")
    return value if value in CPU_CODE_PATHS else "native"


# The OpenMP variables pipeline.threads decides (idle threads sleep instead of spinning) and the
# CPU code paths that decide the numbers (cpu_code_path, docs/pipeline.md); set before the OpenMP
# runtime, torch and MKL load; a user's value wins.
for _name, _value in {**openmp_environment(), **cpu_code_path_environment(code_path_setting(sys.argv[1:]))}.items():
    os.environ.setdefault(_name, _value)

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from pipeline.app.configuration.config import CONFIG_DIR, register_configs  # noqa: E402
from pipeline.app.stores.writing import WriteFailedError  # noqa: E402
from pipeline.validation import InvalidInputError  # noqa: E402


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from pipeline.app.console import progress_as_lines
    from pipeline.app.running.runner import run

    progress_as_lines()  # stderr to a log file or pipe: progress bars as plain lines, not \r redraws

    try:
        run(cfg)
    except (InvalidInputError, WriteFailedError) as exc:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # the sweeper records the failed job (status.json has the error) and the others go on
        # A single run: one clear paragraph instead of a traceback, non-zero exit.
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


def check_command_line() -> None:
    """Misspelt group options in any form (``explainer=[mmdt,carrt]``): one ``error:`` line that
    lists the valid ones, before Hydra composes anything; so does a misspelt key
    (``clustering.n_cluster=5``: did you mean clustering.n_clusters?); ``<group>.params.<name>=v``
    works without a ``+`` (see :func:`pipeline.app.startup.checks.params_overrides_as_upserts`)."""
    from pipeline.app.startup.checks import check_group_choices, check_override_keys, params_overrides_as_upserts

    try:
        check_group_choices(sys.argv[1:], CONFIG_DIR)
        check_override_keys(sys.argv[1:], CONFIG_DIR)
    except InvalidInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    sys.argv[1:] = params_overrides_as_upserts(sys.argv[1:])


def guard_hydra_writes() -> None:
    """Hydra writes ``.hydra/config.yaml`` & co. before the run starts; on a full disk that is one
    ``error:`` paragraph (the directory, the bytes) like the run's own writes, not a traceback.
    A log record that cannot be written is dropped instead of printing a traceback per record
    (the next file the run writes reports the full disk)."""
    import logging

    import hydra.core.utils as hydra_utils
    from omegaconf import OmegaConf

    from pipeline.app.stores.writing import MOVE_OUTPUTS, write_failed

    original = hydra_utils._save_config

    def save_config(cfg, filename, output_dir):
        try:
            original(cfg, filename, output_dir)
        except OSError as exc:
            target = os.path.join(str(output_dir), filename)
            if os.path.exists(target):
                os.unlink(target)  # a truncated copy must not pass for the run's config
            err = write_failed(exc, output_dir, len(OmegaConf.to_yaml(cfg).encode()), filename, MOVE_OUTPUTS)
            raise SystemExit(f"error: {err}") from None

    hydra_utils._save_config = save_config
    logging.raiseExceptions = False


def exit_at_once() -> None:
    """End a finished run without tearing down its modules one by one: the threads are joined and
    the exit handlers run (multiprocessing's, Dask's, logging's: every file is flushed and closed)
    as at any exit, then the process ends. Python's own teardown of the thousands of modules a run
    imports (torch, scikit-learn, matplotlib, numba) took 0.5-0.9 s after every run, a third of a
    rerun whose files are restored. Where these hooks are missing, the usual exit."""
    import atexit
    import threading

    shutdown, run_handlers = getattr(threading, "_shutdown", None), getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_handlers is None:
        return
    shutdown()  # non-daemon threads joined, as at any exit
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    register_configs()
    check_command_line()
    guard_hydra_writes()
    main()
    exit_at_once()
