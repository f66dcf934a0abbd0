"""Symbolic logs kept on disk (issue 50): a log traced, and checked equal to a concrete answer, in one process is
loaded by the next without tracing again.

One file per configuration without its batch size and sequence length (:func:`helpers.symbolic.key`), named by a
hash of that configuration and of what the log was made by: the installed torch, transformers, peft and bitsandbytes
(their distributions' versions, read without importing them) and the source of this package (:func:`code_hash`, a
hash of every ``helpers/**/*.py``, so an edited engine never reads an older engine's logs).  The file holds the
configuration's :class:`helpers.symbolic.SymbolicStep` of each regime met (batch 1, a side of a guard), written by
:func:`save` only after :mod:`helpers.evaluated` has checked the log's evaluation equal to a concrete answer.

Where: :func:`directory`, ``$GPU_MEMORY_SYMBOLIC_CACHE`` if set (``off`` or ``0``: no logs on disk), else
``$XDG_CACHE_HOME/gpu-memory-lessons/symbolic`` (``~/.cache`` when ``XDG_CACHE_HOME`` is unset, as the XDG base
directory specification says).  A file that cannot be read, was written by another version or holds another
configuration (a hash collision) is ignored, and the next log checked replaces it; a directory that cannot be written
keeps nothing, silently: the answer is the same either way, only slower.

The file is a pickle read by :class:`_Unpickler`, which builds only sympy's, this package's and a few builtin types (and
torch's dtypes), so a foreign file cannot run code while it is read (``pickle``'s documentation, "Restricting
Globals").
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import io
import os
import pathlib
import pickle
import tempfile

import torch

from .symbolic import SymbolicStep, key

#: The environment variable that moves the directory (a path) or turns logs on disk off (``off``, ``0``).
VARIABLE = "GPU_MEMORY_SYMBOLIC_CACHE"
#: The distributions whose versions name a log: what the engine traces through.
DISTRIBUTIONS = ("torch", "transformers", "peft", "bitsandbytes")
#: The first bytes of every file: this format's name and version.
MAGIC = b"gpu-memory-lessons symbolic log 1\n"


def directory() -> pathlib.Path | None:
    """Where the logs are kept (the module's list), or None where ``$GPU_MEMORY_SYMBOLIC_CACHE`` turns them off."""
    chosen = os.environ.get(VARIABLE)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "0", "off", "no", "false") else pathlib.Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "gpu-memory-lessons" / "symbolic"


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 of the installed versions of :data:`DISTRIBUTIONS` and of every ``.py`` file of this package (path and
    bytes, in sorted order): what a log was made by."""
    digest = hashlib.sha256()
    for name in DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\n".encode())
    root = pathlib.Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _stable(value) -> str:
    """A text naming ``value`` the same in every process: a function by its module and name (its ``repr`` holds an
    address), a tuple item by item, anything else by ``repr``."""
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_stable, value)) + ")"
    if callable(value) and hasattr(value, "__qualname__") and not isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def name(config) -> str:
    """The file name of ``config``'s logs: a hash of :func:`code_hash` and of its configuration without batch and
    sequence (:func:`helpers.symbolic.key`), field by field."""
    fields = key(config)
    text = code_hash() + "".join(f"\n{f.name}={_stable(getattr(fields, f.name))}" for f in dataclasses.fields(fields))
    return hashlib.sha256(text.encode()).hexdigest()[:32] + ".pickle"


#: Builtins a log is made of (containers and numbers; nothing that calls or imports).
_BUILTINS = {"set", "frozenset", "tuple", "list", "dict", "int", "float", "complex", "bool", "str", "bytes", "slice",
             "range"}


class _Unpickler(pickle.Unpickler):
    """Builds only what a log is made of: sympy's and this package's classes and functions, torch's dtypes, and
    :data:`_BUILTINS`; anything else is an error (a foreign file)."""

    def find_class(self, module: str, name: str):
        top = module.split(".")[0]
        if top in ("sympy", "helpers", "mpmath", "collections", "copyreg", "fractions"):
            return super().find_class(module, name)
        if module == "builtins" and name in _BUILTINS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a symbolic log")


def load(config, spec) -> list[SymbolicStep]:
    """The checked symbolic steps of ``config``'s configuration kept on disk (each regime met), ``spec`` (its model,
    :func:`helpers.models.resolve_model`) attached; ``[]`` where there are none, logs on disk are off, or the file
    cannot be read or is another configuration's."""
    where = directory()
    if where is None:
        return []
    try:
        data = (where / name(config)).read_bytes()
        if not data.startswith(MAGIC):
            return []
        steps = _Unpickler(io.BytesIO(data[len(MAGIC):])).load()
        if not isinstance(steps, list) or not all(isinstance(s, SymbolicStep) for s in steps):
            return []
        if any(key(s.config) != key(config) for s in steps):
            return []
        return [dataclasses.replace(s, spec=spec) for s in steps]
    except Exception:  # absent, unreadable, truncated, foreign: as if there were none
        return []


def save(config, steps: list[SymbolicStep]) -> bool:
    """Keep ``steps`` (symbolic steps of ``config``'s configuration, each checked equal to a concrete answer) on disk,
    replacing the file; written to a temporary file first, then renamed, so that a reader never sees half of one.
    Returns whether it was written (not where logs on disk are off or the directory cannot be written)."""
    where = directory()
    if where is None or not steps:
        return False
    kept = [dataclasses.replace(s, spec=None) for s in steps]  # the model is resolved again when loaded
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, suffix=".part", delete=False) as f:
            f.write(MAGIC)
            pickle.dump(kept, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(f.name, where / name(config))
        return True
    except Exception:  # not writable, full, a step that cannot be pickled: keep nothing
        with_part = locals().get("f")
        if with_part is not None:
            pathlib.Path(with_part.name).unlink(missing_ok=True)
        return False
