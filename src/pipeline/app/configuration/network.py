"""Is the model hub reachable? A fast probe run before CLIP / SBERT weights are fetched.

Without network, huggingface_hub retries every request with back-off (1, 2, 4, 8 ... s), so a
run with no offline flag used to wait ~48 s (CLIP) or ~72 s (SBERT) before failing or falling
back. :func:`prepare_hub_access` instead sends one HTTP request to the hub (through the
proxy, when one is configured) with a short deadline, DNS included; without an answer it
switches the process to offline mode (``HF_HUB_OFFLINE`` & co), so the libraries use their
local caches or the offline fallback at once. The result is cached per process; with
``offline=true`` nothing is probed and nothing waits.
"""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger(__name__)

#: seconds allowed for one probe (name resolution, connection and the first answer)
PROBE_TIMEOUT = 2.0
#: ``url[,url]`` overriding the probed endpoints (tests, unusual mirrors)
PROBE_ENV = "PIPELINE_HUB_PROBE"

_results: dict[tuple, bool] = {}
_lock = threading.Lock()


def hub_endpoints() -> list[str]:
    """The URLs the probe asks: ``PIPELINE_HUB_PROBE`` (comma-separated) if set, else the Hugging
    Face endpoint (``HF_ENDPOINT``, default https://huggingface.co), from which both
    sentence-transformers and open_clip fetch their weights."""
    urls = os.environ.get(PROBE_ENV) or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    return [u.strip() if "://" in u else f"https://{u.strip()}" for u in urls.split(",") if u.strip()]


def _answers(url: str, timeout: float) -> bool:
    """Whether an HTTP HEAD of ``url`` gets any answer (even an error status) within ``timeout`` s.

    Goes through the configured proxy like the downloads do. Name resolution has no timeout of
    its own, so the request runs in a thread that is abandoned at the deadline. Any answer
    counts: a network that accepts connections but never answers (a captive portal, a
    firewall dropping packets) counts as unreachable, as it would make the downloads hang.
    """
    import ssl
    import urllib.error
    import urllib.request

    result: list[bool] = []
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # reachability, not trust

    def attempt():
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout, context=context).close()
            result.append(True)
        except urllib.error.HTTPError:
            result.append(True)  # a server answered
        except Exception:  # noqa: BLE001 - an abandoned probe must never raise in its thread: past
            # the deadline urllib may find its socket already torn down ('NoneType' object has no
            # attribute 'setsockopt'), which pytest and threading.excepthook print as a traceback
            result.append(False)

    worker = threading.Thread(target=attempt, daemon=True, name="hub-probe")
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])


def hub_reachable(endpoints: list[str] | None = None, timeout: float = PROBE_TIMEOUT) -> bool:
    """True if any endpoint answers an HTTP request within ``timeout`` s (cached per process)."""
    endpoints = list(endpoints or hub_endpoints())
    key = tuple(endpoints)
    with _lock:
        if key in _results:
            return _results[key]
        start = time.perf_counter()
        ok = any(_answers(url, timeout) for url in endpoints)
        _results[key] = ok
        log.info("hub probe %s: %s (%.2fs)", ", ".join(endpoints), "reachable" if ok else "unreachable",
                 time.perf_counter() - start)
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
    from pipeline.app.configuration.environment import configure_model_caches

    if offline or offline_requested():
        configure_model_caches(None, offline=True)
        return False
    if hub_reachable():
        return True
    endpoints = ", ".join(hub_endpoints())
    log.warning("the model hub (%s) cannot be reached; loading %s offline (local caches / offline fallback). "
                "Set offline=true (or PIPELINE_OFFLINE=true) to skip this check.", endpoints, what)
    configure_model_caches(None, offline=True)
    return False
