"""Symbolic logs kept on disk (issue 50): a log traced, and checked equal to a concrete answer, in one process is
loaded by the next without tracing again.

One file per configuration without its batch size and sequence length (:func:`helpers.symbolic.key`), named by a
hash of that configuration and of what the log was made by (:func:`helpers.log_names.key_text`): the installed
versions of the libraries a trace runs through, the source of the modules that make or evaluate a log, and of any
``helpers`` function given as an option (:func:`helpers.log_names.code_hash`), so that an edited engine never reads an
older engine's logs.  The file holds the configuration's :class:`helpers.symbolic.SymbolicStep` of each regime met
(batch 1, a side of a guard), written by :func:`save` only after :mod:`helpers.evaluated` has checked the log's
evaluation equal to a concrete answer: :data:`MAGIC`, then, compressed with :mod:`lzma`, two pickles, the
configuration (:func:`configuration` reads it alone: what names the file) and the steps.

Where (:func:`helpers.log_names.directories`): the user's directory first, ``$GPU_MEMORY_SYMBOLIC_CACHE`` if set
(``off`` or ``0``: no logs on disk), else ``$XDG_CACHE_HOME/gpu-memory-lessons/symbolic`` (``~/.cache`` when
``XDG_CACHE_HOME`` is unset, as the XDG base directory specification says); then the logs shipped in the package
(``helpers/symbolic_logs/``, made by ``make symbolic-logs``).  :func:`save` writes the user's directory only.  A file
that cannot be read, was written by another version or holds another configuration (a hash collision) is ignored, and
the next log checked replaces it in the user's directory; a directory that cannot be written keeps nothing, silently:
the answer is the same either way, only slower.

Beside the pickle, a shipped Hugging Face config's log in plain values (:mod:`helpers.plain_log`), which the command
line reads without torch or sympy (:mod:`helpers.plain_step`).

The file is a pickle read by :class:`_Unpickler`, which builds only sympy's, this package's and a few builtin types (and
torch's dtypes), so a foreign file cannot run code while it is read (``pickle``'s documentation, "Restricting
Globals").
"""

from __future__ import annotations

import contextlib
import dataclasses
import lzma
import os
import pathlib
import pickle
import tempfile

import sympy
import torch

from . import plain_log
from .log_names import DISTRIBUTIONS, VARIABLE, code_hash, directories, directory, name  # noqa: F401 (these too)
from .symbolic import SymbolicStep, key

#: The first bytes of every file: this format's name and version (2: compressed, the configuration first).
MAGIC = b"gpu-memory-lessons symbolic log 2\n"
#: The ``lzma`` preset the files are written with (the ``xz`` format).  Llama-3.1 8B LoRA with checkpointing, steady
#: state: 0.91 MB as a pickle, 62 KB so (``gzip``: 127 KB), decompressed in 7.2 ms of the read
#: (``benchmarks/shipped_logs.py``).
PRESET = 6


#: Builtins a log is made of (containers and numbers; nothing that calls or imports).
_BUILTINS = {"set", "frozenset", "tuple", "list", "dict", "int", "float", "complex", "bool", "str", "bytes", "slice",
             "range"}


class _Unpickler(pickle.Unpickler):
    """Builds only what a log is made of: sympy's and this package's classes and functions, torch's dtypes and
    sympy functions (``torch/utils/_sympy/functions.py``: ``Mod``, ``CeilToInt``, which the sizes of a step with
    modular arithmetic hold), and :data:`_BUILTINS`; anything else is an error (a foreign file)."""

    def find_class(self, module: str, name: str):
        top = module.split(".")[0]
        if top in ("sympy", "helpers", "mpmath", "collections", "copyreg", "fractions"):
            return super().find_class(module, name)
        if module == "builtins" and name in _BUILTINS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module == "torch.utils._sympy.functions":  # PyTorch's sympy functions of sizes (Mod, CeilToInt, ...)
            found = super().find_class(module, name)
            if isinstance(found, type) and issubclass(found, sympy.Function):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a symbolic log")


@contextlib.contextmanager
def _reader(path: pathlib.Path):
    """A reader of the pickles in the file at ``path``, past its :data:`MAGIC` (decompressed as it is read): each call
    gives the next one, each read by an :class:`_Unpickler` of its own (a pickle's memo is its own); the file closed
    when the block ends.

    Raises:
        OSError, ValueError: where the file is absent, unreadable or of another format.
    """
    with open(path, "rb") as raw:
        if raw.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path.name} is not a symbolic log of this format")
        with lzma.LZMAFile(raw) as packed:
            yield lambda: _Unpickler(packed).load()


def configuration(path: pathlib.Path):
    """The configuration a log file was written for (its first pickle; the steps are not read): what
    :func:`helpers.log_names.name` names it by.

    Raises:
        OSError, ValueError, EOFError, pickle.UnpicklingError, lzma.LZMAError: where it cannot be read.
    """
    with _reader(path) as following:
        return following()


def load(config, spec) -> list[SymbolicStep]:
    """The checked symbolic steps of ``config``'s configuration kept on disk (each regime met), ``spec`` (its model,
    :func:`helpers.models.resolve_model`) attached, from the first directory that has a readable file of it
    (:func:`helpers.log_names.directories`: the user's, then the shipped logs); ``[]`` where there are none, logs on
    disk are off, or no file can be read or holds this configuration."""
    for where in directories():
        steps = _read(where / name(config), config)
        if steps:
            return [dataclasses.replace(s, spec=spec) for s in steps]
    return []


def _read(path: pathlib.Path, config) -> list[SymbolicStep]:
    """The steps in the file at ``path`` if it holds ``config``'s configuration; else ``[]``."""
    try:
        with _reader(path) as following:
            written, steps = following(), following()
        if key(written) != key(config) or not isinstance(steps, list) or not steps:
            return []
        if not all(isinstance(s, SymbolicStep) and key(s.config) == key(config) for s in steps):
            return []
        return steps
    except Exception:  # absent, unreadable, truncated, foreign: as if there were none
        return []


def save(config, steps: list[SymbolicStep]) -> bool:
    """Keep ``steps`` (symbolic steps of ``config``'s configuration, each checked equal to a concrete answer) on disk
    in the user's directory (:func:`helpers.log_names.directory`; ``tools/ship_symbolic_logs.py`` points it at the
    shipped one), replacing the file; written to a temporary file first, then renamed, so that a reader never sees
    half of one.  Returns whether it was written (not where logs on disk are off or the directory cannot be
    written)."""
    where = directory()
    if where is None or not steps:
        return False
    kept = [dataclasses.replace(s, spec=None) for s in steps]  # the model is resolved again when loaded
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, suffix=".part", delete=False) as f:
            f.write(MAGIC)
            with lzma.LZMAFile(f, "wb", preset=PRESET) as packed:
                pickle.dump(key(config), packed, protocol=pickle.HIGHEST_PROTOCOL)
                pickle.dump(kept, packed, protocol=pickle.HIGHEST_PROTOCOL)
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
