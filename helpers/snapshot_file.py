"""Reading a memory snapshot's file safely: a pickle of plain data, within a stated size (lesson 06b).

``torch.cuda.memory._dump_snapshot(path)`` pickles the dictionary ``torch.cuda.memory._snapshot()`` returns.  A file
from elsewhere may be anything, so :func:`load_snapshot` reads it with three guards, each refusing in one line
(:class:`SnapshotError`):

* no pickle runs code: any class the file names is refused (:class:`_Unpickler`; a snapshot holds only
  dictionaries, lists, tuples, strings and numbers);
* a gzipped file is inflated in chunks and refused as soon as it passes :data:`MAX_SNAPSHOT_BYTES` (a small file that
  inflates to gigabytes of zeros is refused at once, holding no more than the cap), as is a plain file larger than it;
* what it holds must be shaped as ``torch.cuda.memory._snapshot()`` shapes it (:func:`_malformed`).
"""

from __future__ import annotations

import io
import pickle
import zlib
from pathlib import Path

from .units import MiB, fmt_mib

#: The largest snapshot, inflated, that :func:`load_snapshot` reads: 256 MiB.  The largest the course makes (the
#: QLoRA step of Llama-3.1 8B with checkpointing, ``lessons/data/snapshots/``) is 6.6 MiB inflated (0.44 MiB
#: gzipped), so a step recorded with C++ stacks or several steps fit many times over.
MAX_SNAPSHOT_BYTES = 256 * MiB
#: Bytes inflated at a time from a gzipped file.
_CHUNK = 4 * MiB
#: A pickle of protocol 2 or later (``_dump_snapshot`` writes Python's default, 4 or 5) begins with this opcode.
_PROTO = 0x80


class SnapshotError(ValueError):
    """Not a memory snapshot that can be explained (one line says why)."""


class _Unpickler(pickle.Unpickler):
    """A snapshot holds only dictionaries, lists, tuples, strings and numbers: refuse any class (so no pickle runs
    code)."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it holds a {module}.{name} object, which no memory snapshot does")


def _inflated(raw: bytes, name: str, max_bytes: int) -> bytes:
    """``raw`` inflated if it is gzipped (every member), in chunks of :data:`_CHUNK`, never past ``max_bytes``.

    Raises:
        SnapshotError: when the inflated bytes would pass ``max_bytes`` (as soon as they do), or the gzip stream is
            damaged or ends early.
    """
    if len(raw) > max_bytes:
        raise SnapshotError(f"{name}: larger than {fmt_mib(max_bytes)}, the most a snapshot may be here "
                            f"(helpers.snapshot_file.MAX_SNAPSHOT_BYTES); refused unread")
    if raw[:2] != b"\x1f\x8b":
        return raw
    out, rest = bytearray(), raw
    while rest:
        inflate = zlib.decompressobj(wbits=31)  # one gzip member
        try:
            data = inflate.decompress(rest, _CHUNK)
            while True:
                out += data
                if len(out) > max_bytes:
                    raise SnapshotError(f"{name}: inflates to more than {fmt_mib(max_bytes)}, the most a snapshot may "
                                        f"be here (helpers.snapshot_file.MAX_SNAPSHOT_BYTES); refused unread")
                if inflate.eof or not inflate.unconsumed_tail:
                    break
                data = inflate.decompress(inflate.unconsumed_tail, _CHUNK)
        except zlib.error:
            raise SnapshotError(f"{name}: a damaged gzip file (its compressed data does not inflate)") from None
        if not inflate.eof:
            raise SnapshotError(f"{name}: not a whole snapshot, the file ends early (its gzip stream stops): was it "
                                f"written or copied completely?")
        rest = inflate.unused_data if inflate.unused_data[:2] == b"\x1f\x8b" else b""
    return bytes(out)


def _unpickled(data: bytes, name: str):
    """The plain data pickled in ``data``; a file that is no pickle, a damaged or truncated one, refused in words."""
    if not data or data[0] != _PROTO:
        start = data[:12].decode("utf-8", "replace")
        raise SnapshotError(f"{name}: not a memory snapshot: not a pickle file (it starts {start!r}); "
                            f"torch.cuda.memory._dump_snapshot(path) writes one")
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except EOFError:
        raise SnapshotError(f"{name}: not a whole snapshot, the file ends early: was it written or copied "
                            f"completely?") from None
    except pickle.UnpicklingError as e:
        if "which no memory snapshot does" in str(e):
            raise SnapshotError(f"{name}: not a memory snapshot: {e}") from None
        reason = "ends early" if "truncated" in str(e) else "is damaged"
        raise SnapshotError(f"{name}: not a whole snapshot: a pickle that {reason} (its bytes stop making sense); "
                            f"was it written or copied completely?") from None
    except Exception:  # noqa: BLE001  whatever else damaged bytes make pickle raise (KeyError, ValueError...)
        raise SnapshotError(f"{name}: not a whole snapshot: a pickle that is damaged (its bytes stop making sense); "
                            f"was it written or copied completely?") from None


def load_snapshot(source: str | Path | bytes | dict, max_bytes: int = MAX_SNAPSHOT_BYTES) -> dict:
    """A snapshot dictionary from a file written by ``torch.cuda.memory._dump_snapshot`` (gzipped or not), its bytes,
    or the dictionary itself.

    Args:
        source: a path, the file's bytes, or the dictionary.
        max_bytes: the most bytes the pickle may have once inflated (:data:`MAX_SNAPSHOT_BYTES`).

    Raises:
        SnapshotError: for a missing file, one larger than ``max_bytes`` (inflated), a damaged or truncated one, a
            pickle of something else, or a dictionary without ``segments`` and ``device_traces``; one line, naming the
            file.
    """
    name = str(source) if isinstance(source, (str, Path)) else "the snapshot"
    raw = source
    if isinstance(source, (str, Path)):
        try:
            with open(source, "rb") as file:
                raw = file.read(max_bytes + 1)  # a plain pickle past the cap is refused unread; gzip is capped inflated
        except OSError as e:
            raise SnapshotError(f"{name}: cannot read it ({e.strerror or e})") from None
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = _unpickled(_inflated(bytes(raw), name, max_bytes), name)
    if not isinstance(raw, dict) or not {"segments", "device_traces"} <= raw.keys():
        what = f"dict with keys {sorted(map(str, raw))[:4]}" if isinstance(raw, dict) else type(raw).__name__
        raise SnapshotError(f"{name}: not a memory snapshot: a pickled {what}, without 'segments' and "
                            f"'device_traces' (torch.cuda.memory._snapshot()'s keys)")
    problem = _malformed(raw)
    if problem:
        raise SnapshotError(f"{name}: not a memory snapshot that PyTorch wrote: {problem}")
    return raw


def _malformed(snapshot: dict) -> str | None:
    """What in ``snapshot`` is not shaped as ``torch.cuda.memory._snapshot()`` shapes it, or None."""
    def fields(items, kind: str, needed: dict) -> str | None:
        if not isinstance(items, list):
            return f"a list of {kind.replace('entry', 'entrie')}s is a {type(items).__name__}"
        for item in items:
            wrong = [k for k, t in needed.items() if not isinstance(item, dict) or not isinstance(item.get(k), t)]
            if wrong:
                return f"a {kind} without {', '.join(map(repr, wrong))}: {str(item)[:80]}"
            frames = item.get("frames", [])
            if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
                return f"a {kind} whose frames are not dictionaries: {str(frames)[:80]}"
        return None

    traces, segments = snapshot["device_traces"], snapshot["segments"]
    if not isinstance(traces, list):
        return f"its device_traces are a {type(traces).__name__}, not a list per device"
    problem = fields(segments, "segment", {"address": int, "total_size": int, "blocks": list})
    problems = [problem] + ([] if problem else [fields(s["blocks"], "block", {"address": int, "size": int,
                                                                               "state": str}) for s in segments])
    problems += [fields(trace, "trace entry", {"action": str, "addr": int, "size": int}) for trace in traces]
    return next((p for p in problems if p), None)
