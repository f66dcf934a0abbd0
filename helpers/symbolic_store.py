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

Beside the pickle, a shipped Hugging Face config's log in plain values (:mod:`helpers.plain_log`), which the command
line reads without torch or sympy (:mod:`helpers.plain_step`).

The file is a pickle read by :class:`_Unpickler`, which builds only sympy's, this package's and a few builtin types (and
torch's dtypes), so a foreign file cannot run code while it is read (``pickle``'s documentation, "Restricting
Globals").
"""

from __future__ import annotations

import dataclasses
import io
import os
import pathlib
import pickle
import tempfile

import torch

from . import plain_log
from .log_names import DISTRIBUTIONS, VARIABLE, code_hash, directory, name  # noqa: F401 (this module's names too)
from .symbolic import SymbolicStep, key

#: The first bytes of every file: this format's name and version.
MAGIC = b"gpu-memory-lessons symbolic log 1\n"


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
    except Exception:  # not writable, full, a step that cannot be pickled: keep nothing
        with_part = locals().get("f")
        if with_part is not None:
            pathlib.Path(with_part.name).unlink(missing_ok=True)
        return False
    try:  # beside it, in plain values: what the command line's cold answer reads (helpers.plain_log)
        plain_log.write(where, config, steps)
    except Exception:  # an addition: without it the command line answers from the pickle, as before
        pass
    return True
