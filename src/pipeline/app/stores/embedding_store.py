"""A persistent store of embeddings, keyed per input item (docs/encoders.md, "Embedding store").

``<paths.cache_dir>/embeddings/<encoder>-<id>/`` holds the embeddings one encoder (and the layer it
returns) made, where ``<id>`` is the hash of the encoder's identity: its key config, the
checkpoint's sha256 when it was trained, the model it actually loaded (``model_used``) and the
layer. Every row is keyed by the content hash of its input item (:func:`item_hashes`: an image's
or a table row's bytes, shape and dtype; a text's UTF-8), so any later run on any subset of the
same data finds its rows here and embeds nothing new.

Layout::

    meta.json                 the encoder identity (a store naming another one is refused), width
    shards/<name>.npy         float32 (rows, width): one finished chunk, written atomically
    shards/<name>.json        its record: the item hash of every row, rows, width, sha256, seq
    .lock                     filelock held while a shard is committed or dropped

The index (item hash -> shard, row) is the union of the records, later commits winning. A shard is
written under a temporary name and renamed, then its record; a run killed in between leaves a
shard without a record, which the next open removes, so no half-written shard is ever read. Every
shard is checked against its record's sha256 when it is read: one that changed on disk is dropped
(a warning names the file) and its items are embedded again.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from pathlib import Path

import numpy as np

from pipeline.app.stores.cache import file_digest, fsync_path, write_file_atomic
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

FORMAT = 1
META = "meta.json"
SHARDS = "shards"


# ------------------------------------------------------------------ item keys
def item_hashes(inputs) -> list[str]:
    """The content hash (32 hex digits, BLAKE2b-128) of every input item.

    Texts: their UTF-8 bytes. Arrays (images (n, H, W, C), tables (n, d)): each row's bytes
    together with the row's shape and dtype, so the same pixels as uint8 and as float32, or
    reshaped, are different items.
    """
    if isinstance(inputs, (list, tuple)):
        out = []
        for i, text in enumerate(inputs):
            if not isinstance(text, str):
                raise InvalidInputError(f"text item {i} is a {type(text).__name__}, not a string; every text of a "
                                        "text dataset must be a string (empty strings are fine).")
            out.append(hashlib.blake2b(b"text\0" + text.encode("utf-8"), digest_size=16).hexdigest())
        return out
    arr = np.ascontiguousarray(inputs)
    if arr.ndim < 1 or arr.dtype == object:
        raise InvalidInputError(f"cannot key items of an array of shape {arr.shape} and dtype {arr.dtype}; the "
                                "embedding store keys numeric arrays (n, ...) row by row, or lists of texts.")
    prefix = f"array\0{arr.dtype.str}\0{arr.shape[1:]}\0".encode()
    rows = arr.reshape(len(arr), -1).view(np.uint8) if arr.size else arr.reshape(len(arr), 0)
    out = []
    for row in rows:
        h = hashlib.blake2b(prefix, digest_size=16)
        h.update(row.data)
        out.append(h.hexdigest())
    return out


def identity_id(identity: dict) -> str:
    """The store folder's name: ``<encoder name>-<20 hex digits of the identity's sha256>``."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(identity.get("encoder", "encoder")))
    return f"{name}-{digest}"


def _write_atomic(path: Path, data: bytes) -> None:
    write_file_atomic(path, data, suffix=".part")  # .part: what _remove_unfinished clears


def _describe(identity: dict) -> str:
    layer = identity.get("layer") or "its output"
    extra = [f"checkpoint sha256 {str(identity['checkpoint_sha256'])[:12]}..."] if identity.get("checkpoint_sha256") else []
    extra += [f"model {identity['model_used']}"] if identity.get("model_used") else []
    return f"{identity.get('encoder')} at {layer}" + (f" ({', '.join(extra)})" if extra else "")


class EmbeddingStore:
    """The store of one encoder identity under ``root`` (created on first use).

    Parameters
    ----------
    root : path
        ``<cache_dir>/embeddings/<identity_id(identity)>``.
    identity : dict
        What makes the embeddings: encoder name, layer, key config, checkpoint sha256,
        model_used. A folder whose ``meta.json`` records another identity is refused.
    """

    def __init__(self, root, identity: dict):
        from filelock import FileLock

        self.root = Path(root)
        self.identity = json.loads(json.dumps(identity, sort_keys=True, default=str))
        self.shards = self.root / SHARDS
        self.shards.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(self.root / ".lock"))
        with self.lock:
            self._check_meta()
            self._remove_unfinished()

    # -------------------------------------------------------------- metadata
    def _check_meta(self) -> None:
        path = self.root / META
        if not path.exists():
            _write_atomic(path, json.dumps({"format": FORMAT, "identity": self.identity, "width": None},
                                           indent=1, sort_keys=True).encode())
            return
        try:
            meta = json.loads(path.read_text())
            stored = meta["identity"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(
                f"the embedding store {self.root} has an unreadable {META} ({exc}), so which encoder wrote its "
                f"embeddings is unknown and they are not used. Delete the folder {self.root} to embed the data "
                "again.") from None
        if stored != self.identity or meta.get("format") != FORMAT:
            diff = sorted(k for k in set(stored) | set(self.identity) if stored.get(k) != self.identity.get(k))
            raise InvalidInputError(
                f"the embedding store {self.root} was written by {_describe(stored)}, but this run embeds with "
                f"{_describe(self.identity)} (they differ in: {', '.join(diff) or 'the store format'}). Embeddings "
                "of another encoder or layer are never mixed into a run. The folder's name is the hash of the "
                "encoder's identity, so this store was copied or renamed into place: move it back, or delete "
                f"{self.root} to embed the data again with this encoder.")

    def width(self) -> int | None:
        return json.loads((self.root / META).read_text()).get("width")

    def _set_width(self, width: int) -> None:
        path = self.root / META
        meta = json.loads(path.read_text())
        if meta.get("width") is None:
            meta["width"] = int(width)
            _write_atomic(path, json.dumps(meta, indent=1, sort_keys=True).encode())
        elif meta["width"] != width:
            raise InvalidInputError(
                f"the encoder returned {width}-wide embeddings but the store {self.root} holds "
                f"{meta['width']}-wide ones of the same encoder identity; the encoder is not deterministic in "
                f"its output shape. Delete {self.root} to start the store afresh.")

    def _remove_unfinished(self) -> None:
        """Temporary files and shards without a record: what a killed run left (under the lock)."""
        for part in self.shards.glob(".*.part"):
            part.unlink(missing_ok=True)
        for part in self.root.glob(".*.part"):
            part.unlink(missing_ok=True)
        for shard in self.shards.glob("*.npy"):
            if not shard.with_suffix(".json").exists():
                log.info("embedding store: removing %s, a shard whose run was killed before recording it", shard)
                shard.unlink(missing_ok=True)

    # -------------------------------------------------------------- index
    def records(self) -> list[dict]:
        """Every shard's record, oldest commit first."""
        out = []
        for path in self.shards.glob("*.json"):
            try:
                rec = json.loads(path.read_text())
                rec["name"] = path.stem
                out.append(rec)
            except (OSError, ValueError):
                log.warning("embedding store: the record %s is unreadable; its shard is dropped", path)
                self._drop(path.stem)
        return sorted(out, key=lambda r: (r.get("seq", 0), r["name"]))

    def index(self) -> dict[str, tuple[str, int]]:
        """item hash -> (shard name, row); a later commit of the same item wins."""
        with self.lock:
            out = {}
            for rec in self.records():
                for row, h in enumerate(rec["items"]):
                    out[h] = (rec["name"], row)
            return out

    def __len__(self) -> int:
        return len(self.index())

    # -------------------------------------------------------------- read / write
    def _drop(self, name: str) -> None:
        for suffix in (".npy", ".json"):
            (self.shards / f"{name}{suffix}").unlink(missing_ok=True)

    def _read_shard(self, rec: dict) -> np.ndarray | None:
        """The shard's array, or None (with a warning, shard dropped) if it changed since written."""
        path = self.shards / f"{rec['name']}.npy"
        problem = None
        try:
            digest = file_digest(path)
            if digest != rec.get("sha256"):
                problem = (f"its sha256 {digest[:12]}... is not the recorded {str(rec.get('sha256'))[:12]}... "
                           "(changed on disk since it was written)")
            else:
                arr = np.load(path, allow_pickle=False)
                if arr.dtype != np.float32 or arr.shape != (len(rec["items"]), rec.get("width")):
                    problem = f"it holds {arr.shape} {arr.dtype}, not the recorded ({len(rec['items'])}, {rec.get('width')}) float32"
        except FileNotFoundError:
            problem = "the file is missing"
        except (OSError, ValueError) as exc:
            problem = f"it cannot be read ({exc})"
        if problem is None:
            return arr
        log.warning("embedding store: shard %s is dropped: %s. Its %d items are embedded again.", path, problem,
                    len(rec["items"]))
        with self.lock:
            self._drop(rec["name"])
        return None

    def read(self, hashes: list[str]) -> tuple[np.ndarray | None, np.ndarray]:
        """``(Z, found)``: the stored rows of ``hashes`` (float32 (n, width), rows of items not found
        left zero; None when the store has no width yet) and a boolean mask of the items found.
        Every shard read is verified first; a changed one is dropped and its items reported missing."""
        n = len(hashes)
        for _ in range(100):  # a dropped shard's items may sit in an older shard too: look again
            index = self.index()
            width = self.width()
            found = np.zeros(n, dtype=bool)
            if width is None or not index:
                return None, found
            by_shard: dict[str, tuple[list[int], list[int]]] = {}
            for pos, h in enumerate(hashes):
                hit = index.get(h)
                if hit is not None:
                    rows = by_shard.setdefault(hit[0], ([], []))
                    rows[0].append(pos)
                    rows[1].append(hit[1])
            Z = np.zeros((n, width), dtype=np.float32)
            records = {r["name"]: r for r in self._records_named(by_shard)}
            dropped = False
            for name in sorted(by_shard):
                rec = records.get(name)
                arr = None if rec is None else self._read_shard(rec)
                if arr is None:
                    dropped = True
                    continue
                pos, rows = (np.asarray(v, dtype=np.int64) for v in by_shard[name])
                Z[pos] = arr[rows]
                found[pos] = True
            if not dropped:
                return Z, found
        return Z, found

    def _records_named(self, names) -> list[dict]:
        out = []
        for name in names:
            try:
                rec = json.loads((self.shards / f"{name}.json").read_text())
            except (OSError, ValueError):
                continue
            rec["name"] = name
            out.append(rec)
        return out

    def add(self, hashes: list[str], Z: np.ndarray) -> str:
        """Commit one finished chunk: the shard (temporary name, then renamed), then its record.
        Returns the shard's name (the hash of its items: the same chunk gets the same name)."""
        Z = np.ascontiguousarray(Z, dtype=np.float32)
        if Z.ndim != 2 or len(Z) != len(hashes):
            raise ValueError(f"{len(hashes)} item hashes for embeddings of shape {Z.shape}")
        name = hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:24]
        shard = self.shards / f"{name}.npy"
        buf = io.BytesIO()
        np.save(buf, Z)
        data = buf.getvalue()
        with self.lock:
            self._set_width(Z.shape[1])
            _write_atomic(shard, data)
            digest = hashlib.sha256(data).hexdigest()
            record = {"items": list(hashes), "rows": len(hashes), "width": int(Z.shape[1]), "sha256": digest,
                      "seq": time.time_ns()}
            _write_atomic(shard.with_suffix(".json"), json.dumps(record).encode())
            fsync_path(self.shards)
        return name


def store_root(cache_dir, identity: dict) -> Path:
    """``<cache_dir>/embeddings/<identity_id(identity)>``."""
    return Path(cache_dir).expanduser() / "embeddings" / identity_id(identity)


__all__ = ["EmbeddingStore", "identity_id", "item_hashes", "store_root"]
