"""Where the symbolic logs on disk are kept and what names each file (:mod:`helpers.symbolic_store`): the directory,
a hash of what made a log (the libraries' versions and this package's source) and of its configuration.

No torch import: the command line's cold answer (:mod:`helpers.cli_cold`) finds its file with it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import os
import pathlib

from .symbolic_scope import key

#: The environment variable that moves the directory (a path) or turns logs on disk off (``off``, ``0``).
VARIABLE = "GPU_MEMORY_SYMBOLIC_CACHE"
#: The distributions whose versions name a log: what the engine traces through.
DISTRIBUTIONS = ("torch", "transformers", "peft", "bitsandbytes")


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


def key_text(config) -> str:
    """What names ``config``'s logs: :func:`code_hash`, then its configuration without batch and sequence
    (:func:`helpers.symbolic_scope.key`), field by field, one per line."""
    fields = key(config)
    return code_hash() + "".join(f"\n{f.name}={_stable(getattr(fields, f.name))}" for f in dataclasses.fields(fields))


def name(config, suffix: str = ".pickle") -> str:
    """The file name of ``config``'s logs: a hash of :func:`key_text`, then ``suffix`` (``.pickle``: the symbolic
    steps, :mod:`helpers.symbolic_store`; ``.json``: their plain form, :mod:`helpers.plain_log`)."""
    return hashlib.sha256(key_text(config).encode()).hexdigest()[:32] + suffix
