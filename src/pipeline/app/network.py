"""Is the model hub reachable? A fast probe run before CLIP / SBERT weights are fetched.

Without network, huggingface_hub retries every request with back-off (1, 2, 4, 8 ... s), so a
run with no offline flag used to wait ~48 s (CLIP) or ~72 s (SBERT) before failing or falling
back. :func:`prepare_hub_access` instead opens one TCP connection to the hub (or to the
HTTPS proxy, when one is configured) with a short timeout, DNS included; when that fails it
switches the process to offline mode (``HF_HUB_OFFLINE`` & co), so the libraries use their
local caches or the offline fallback at once. The result is cached per process; with
``offline=true`` nothing is probed and nothing waits.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: seconds allowed for name resolution + TCP connect of one probe
PROBE_TIMEOUT = 2.0
#: ``host:port[,host:port]`` overriding the probed endpoints (tests, unusual mirrors)
PROBE_ENV = "PIPELINE_HUB_PROBE"

_results: dict[tuple, bool] = {}
_lock = threading.Lock()


def hub_endpoints() -> list[tuple[str, int]]:
    """The (host, port) pairs a hub download would connect to first.

    ``PIPELINE_HUB_PROBE`` if set; else the HTTPS proxy if one is configured; else the
    Hugging Face endpoint (``HF_ENDPOINT``, default huggingface.co:443), from which both
    sentence-transformers and open_clip fetch their weights.
    """
    if os.environ.get(PROBE_ENV):
        pairs = []
        for item in os.environ[PROBE_ENV].split(","):
            host, _, port = item.strip().rpartition(":")
            pairs.append((host or port, int(port) if host else 443))
        return pairs
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlsplit(proxy if proxy else os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    default_port = 443 if url.scheme == "https" else 80
    return [(url.hostname or "huggingface.co", url.port or default_port)]


def _connect(host: str, port: int, timeout: float) -> bool:
    """One TCP connect with a hard deadline (getaddrinfo has no timeout of its own, so a thread)."""
    result: list[bool] = []

    def attempt():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    worker = threading.Thread(target=attempt, daemon=True, name=f"hub-probe-{host}")
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])


def hub_reachable(endpoints: list[tuple[str, int]] | None = None, timeout: float = PROBE_TIMEOUT) -> bool:
    """True if a TCP connection to any endpoint opens within ``timeout`` s (cached per process)."""
    endpoints = list(endpoints or hub_endpoints())
    key = tuple(endpoints)
    with _lock:
        if key in _results:
            return _results[key]
        start = time.perf_counter()
        ok = any(_connect(host, port, timeout) for host, port in endpoints)
        _results[key] = ok
        log.info("hub probe %s: %s (%.2fs)", ", ".join(f"{h}:{p}" for h, p in endpoints),
                 "reachable" if ok else "unreachable", time.perf_counter() - start)
        return ok


def offline_requested() -> bool:
    """True when the environment already says offline (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(k, "0").lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def prepare_hub_access(offline: bool | None = None, what: str = "model weights") -> bool:
    """Decide, within a couple of seconds, whether ``what`` may be fetched from the hub.

    Parameters
    ----------
    offline : bool or None
        The run's ``offline`` setting. True: never probe, never wait (offline mode is set).
        False or None: probe unless the environment already says offline; an unreachable
        hub switches the process to offline mode with a warning.
    what : str
        Named in the log messages (e.g. "SBERT model all-mpnet-base-v2").

    Returns
    -------
    bool
        True if downloads may be attempted, False if the process is (now) offline.
    """
    from pipeline.app.environment import configure_model_caches

    if offline or offline_requested():
        configure_model_caches(None, offline=True)
        return False
    if hub_reachable():
        return True
    endpoints = ", ".join(f"{h}:{p}" for h, p in hub_endpoints())
    log.warning("the model hub (%s) cannot be reached; loading %s offline (local caches / offline fallback). "
                "Set offline=true (or PIPELINE_OFFLINE=true) to skip this check.", endpoints, what)
    configure_model_caches(None, offline=True)
    return False


def needs_hub(encoder) -> bool:
    """True for encoders that fetch pretrained weights by name (CLIP tags, SBERT hub names)."""
    from pathlib import Path

    name = getattr(encoder, "name", None)
    if name == "clip":
        pretrained = getattr(encoder, "pretrained", None)
        return bool(pretrained) and not Path(str(pretrained)).expanduser().exists()
    if name == "sbert":
        return not Path(str(getattr(encoder, "model_name", ""))).expanduser().exists()
    return False
