"""Where the symbolic logs on disk are kept and what names each file (:mod:`helpers.symbolic_store`): the directories,
a hash of what made a log (the libraries' versions and the code, not the prose, of the source that makes or evaluates
one: :func:`code_text`) and of its configuration.

Two directories are read, in order (:func:`directories`): the user's (:func:`directory`: ``$GPU_MEMORY_SYMBOLIC_CACHE``,
else ``$XDG_CACHE_HOME/gpu-memory-lessons/symbolic``), where every log checked in a process is written, then the logs
shipped with this package (:data:`SHIPPED`, made by ``tools/ship_symbolic_logs.py``, ``make symbolic-logs``), so that
the lessons' configurations are evaluated from checked logs on a first run.  ``$GPU_MEMORY_SYMBOLIC_CACHE=off``
turns both off (no logs on disk at all); ``$GPU_MEMORY_SHIPPED_LOGS=off`` the shipped ones alone (a test of what a
machine without them does).

No torch import: the command line's cold answer (:mod:`helpers.cli_cold`) finds its file with it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.metadata
import os
import pathlib
import re
import sys

from .symbolic_scope import key

#: The environment variable that moves the user's directory (a path) or turns logs on disk off (``off``, ``0``).
VARIABLE = "GPU_MEMORY_SYMBOLIC_CACHE"
#: The environment variable that turns the shipped logs alone off (``off``, ``0``): the user's directory is still read.
SHIPPED_VARIABLE = "GPU_MEMORY_SHIPPED_LOGS"
#: The logs shipped with the package (``[tool.setuptools.package-data]`` in ``pyproject.toml``).
SHIPPED = pathlib.Path(__file__).resolve().parent / "symbolic_logs"
#: The distributions whose versions name a log: what the engine traces through (torchvision's models, peft's
#: adapters, bitsandbytes' kernels) and what a log is made of (sympy's expressions).
DISTRIBUTIONS = ("torch", "torchvision", "transformers", "peft", "bitsandbytes", "sympy")
#: The modules and packages of ``helpers`` whose source names a log: :mod:`helpers.symbolic` and every layer below it
#: in ``.importlinter``'s ``layers`` contract, in its order (``tests/test_shipped_logs.py`` checks the two agree).
MAKERS = ("symbolic", "plain_step", "depth", "traced", "step", "symbolic_sizes", "shallow", "written", "log_names",
          "symbolic_scope", "record", "techniques", "models", "engine", "allocator", "gpus", "config",
          "snapshot_file", "hf_config", "units", "errors", "palette", "versions", "alignment", "formats")
#: The data files below :data:`MAKERS` that a trace reads: the Hugging Face configs a model name resolves to.
MAKERS_DATA = ("models/hf_configs/*.json",)
_OFF = ("", "0", "off", "no", "false")


def directory() -> pathlib.Path | None:
    """The user's directory of logs (the module's list), where every checked log is written; None where
    ``$GPU_MEMORY_SYMBOLIC_CACHE`` turns logs on disk off."""
    chosen = os.environ.get(VARIABLE)
    if chosen is not None:
        return None if chosen.strip().lower() in _OFF else pathlib.Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "gpu-memory-lessons" / "symbolic"


def directories() -> list[pathlib.Path]:
    """The directories a log is looked for in, in order: the user's (:func:`directory`), then the shipped one
    (:data:`SHIPPED`); none where ``$GPU_MEMORY_SYMBOLIC_CACHE`` is ``off``, only the user's where
    ``$GPU_MEMORY_SHIPPED_LOGS`` is ``off``.  The one place that says which are read."""
    user = directory()
    if user is None:
        return []
    shipped = os.environ.get(SHIPPED_VARIABLE, "on").strip().lower() not in _OFF
    return [user] + ([SHIPPED] if shipped and SHIPPED != user else [])


def _maker_files() -> list[pathlib.Path]:
    """The source files of :data:`MAKERS` (a module's file, or every ``.py`` of a package) and :data:`MAKERS_DATA`."""
    root = pathlib.Path(__file__).resolve().parent
    files = []
    for module in MAKERS:
        single = root / f"{module}.py"
        files.extend([single] if single.is_file() else sorted((root / module).rglob("*.py")))
    for pattern in MAKERS_DATA:
        files.extend(sorted(root.glob(pattern)))
    return files


#: The nodes whose first statement, where it is a string constant, is a docstring (:func:`ast.get_docstring`).
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
#: A string literal or a comment, whichever a scan from the left meets first (outside both, Python code holds no quote
#: and no ``#``); a comment is group 1, to the line's end.  A string ends at its first unescaped quote (one, or three,
#: as it began), whatever its prefix: a backslash escapes a quote in a raw string too.  Python 3.12's f-strings may
#: nest their own quotes, which this does not follow: ``requires-python`` is 3.10, where they cannot.
_STRING_OR_COMMENT = re.compile("|".join((
    r"'''(?:\\.|[^\\])*?'''", r'"""(?:\\.|[^\\])*?"""',  # triple-quoted: may span lines
    r"'(?:\\.|[^'\\\n])*'", r'"(?:\\.|[^"\\\n])*"',  # one quote: a line, or more after a backslash
    r"(#[^\n]*)")), re.DOTALL)


def _docstrings(node: ast.AST):
    """The docstring statements (``ast.Expr``) of ``node`` and of the modules, classes and functions in it, as
    :func:`ast.get_docstring` finds them.  Expressions are not searched: none holds a class or a ``def`` (a lambda has
    no docstring), and they are most of a tree's nodes."""
    if isinstance(node, _DOCUMENTED) and ast.get_docstring(node, clean=False) is not None:
        yield node.body[0]
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.expr):
            yield from _docstrings(child)


def code_text(source: str) -> str:
    """The code of a Python source file, as :func:`code_hash` and :func:`option_hash` hash it: ``source`` (the file's
    text) without its docstrings and comments, each line without trailing whitespace, blank lines dropped.

    What counts is everything else: every statement, name and value, a default, a decorator, the indentation of code,
    and every string that is not a docstring (an error message, an f-string, a string that is a function's second
    statement).  What does not: a docstring (the first statement of a module, class, function or async function
    where it is a string constant, as :func:`ast.get_docstring` defines it), a comment (a ``#`` inside a string is
    none), blank lines and trailing whitespace (inside a multi-line string literal too), and line endings (``\\r\\n``
    reads as ``\\n``).  Why: a log's name holds this text, so that an edit of the engine's prose keeps the shipped
    logs (:data:`SHIPPED`) named as they were, and used, instead of leaving every one of them unused until
    ``make symbolic-logs`` makes them again (about 32 CPU-minutes on the 2-core machine).

    The text is the same on every Python a learner may run (3.10 to 3.13), so that it names a log as the machine that
    shipped it did: it is cut at positions, never rebuilt from ``ast.dump`` (3.13 changed its output), ``ast.unparse``
    (its formatting changed between versions) or the token stream (3.12 tokenizes f-strings anew).  A docstring is
    where ``ast`` puts it (lines and columns, the columns UTF-8 byte offsets); a comment where
    :data:`_STRING_OR_COMMENT` finds it, a rule on the text alone, which ``tests/test_log_names.py`` checks gives
    :mod:`tokenize`'s ``COMMENT`` tokens in every source file of the project (in a tenth of tokenize's time: this
    runs in the command line's cold answer).

    Caveat: code that reads a docstring (``__doc__``) can change with a docstring edit that leaves this text as it was.
    In :data:`MAKERS` one place reads one: :func:`helpers.techniques.bnb._cuda_path` gives the class it makes its own
    docstring, which no log holds.

    Raises:
        SyntaxError: where ``source`` is not Python.
    """
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    lines = source.split("\n")
    starts = [0]  # the character offset where each line starts: line n at starts[n - 1]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(line: int, column: int) -> int:
        """The character offset of ``ast``'s ``line`` (from 1) and ``column`` (UTF-8 bytes)."""
        return starts[line - 1] + len(lines[line - 1].encode()[:column].decode())

    cuts = [(offset(doc.lineno, doc.col_offset), offset(doc.end_lineno, doc.end_col_offset))
            for doc in _docstrings(ast.parse(source))]
    cuts += [found.span(1) for found in _STRING_OR_COMMENT.finditer(source) if found.group(1)]
    kept, at = [], 0
    for start, end in sorted(cuts):  # a docstring may hold a comment, between the parts of a concatenated string
        kept.append(source[at:max(at, start)])
        at = max(at, end)
    kept.append(source[at:])
    return "\n".join(line.rstrip() for line in "".join(kept).split("\n") if line.strip())


def _hashed(path: pathlib.Path) -> bytes:
    """What :func:`code_hash` and :func:`option_hash` hash of the file at ``path`` (below this package): its path, then
    its :func:`code_text` (a ``.py`` file) or its bytes (a data file)."""
    root = pathlib.Path(__file__).resolve().parent
    body = code_text(path.read_text(encoding="utf-8")).encode() if path.suffix == ".py" else path.read_bytes()
    return path.relative_to(root).as_posix().encode() + b"\0" + body + b"\0"


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 of what makes or evaluates a log: the installed versions of :data:`DISTRIBUTIONS` (read without
    importing them), the code of :data:`MAKERS`' source files (path and :func:`code_text`, in order: their docstrings,
    comments and blank lines do not count) and :data:`MAKERS_DATA` (path and bytes).

    Why this set is complete: a log is made by :func:`helpers.symbolic.trace` and evaluated by
    :meth:`helpers.symbolic.SymbolicStep.evaluate` (:mod:`helpers.plain_step` for the command line's plain form),
    and the ``layers`` contract of ``.importlinter``, which ``.ci/run`` checks, lets nothing at or below
    :mod:`helpers.symbolic` import a module above it (imports inside functions included): all the code that can run
    while a log is made or evaluated is in :data:`MAKERS` or in the distributions named.  The one exception is a
    ``helpers`` function or frozen dataclass given as an option (a published setup's loss), which the step calls:
    :func:`key_text` hashes its module's file into that configuration's name.  The modules above
    (:mod:`helpers.evaluated`, which decides when a log is traced and checks it, :mod:`helpers.symbolic_store`,
    whose format its ``MAGIC`` names, the teaching code, widgets, command line, serving) do not change a log's
    content, so editing them keeps the logs shipped valid."""
    digest = hashlib.sha256()
    for name in DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\n".encode())
    for path in _maker_files():
        digest.update(_hashed(path))
    return digest.hexdigest()


def _stable(value) -> str:
    """A text naming ``value`` the same in every process: a function by its module and name (its ``repr`` holds an
    address), a tuple item by item, anything else by ``repr``."""
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_stable, value)) + ")"
    if callable(value) and hasattr(value, "__qualname__") and not isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _option_modules(value) -> set[str]:
    """The ``helpers`` modules defining ``value`` (an option's value: a function or a dataclass instance, or a tuple of
    them), whose source the step runs; none for plain values."""
    if isinstance(value, tuple):
        return set().union(*map(_option_modules, value)) if value else set()
    module = getattr(value, "__module__", None) if (callable(value) or dataclasses.is_dataclass(value)) else None
    return {module} if isinstance(module, str) and module.split(".")[0] == "helpers" else set()


def option_hash(fields) -> str:
    """SHA-256 of the code (path and :func:`code_text`) of the ``helpers`` modules whose functions or dataclasses are
    options of ``fields`` (a :class:`helpers.config.StepConfig`), in order; of nothing where there are none.

    Raises:
        ValueError: where such a module has no source file (it cannot name a log).
    """
    digest = hashlib.sha256()
    for module in sorted(set().union(*(_option_modules(getattr(fields, f.name)) for f in dataclasses.fields(fields)))):
        path = getattr(sys.modules.get(module), "__file__", None)
        if path is None:
            raise ValueError(f"{module} has no source file: its options cannot name a symbolic log")
        digest.update(_hashed(pathlib.Path(path).resolve()))
    return digest.hexdigest()


def key_text(config) -> str:
    """What names ``config``'s logs: :func:`code_hash`, :func:`option_hash`, then its configuration without batch
    and sequence (:func:`helpers.symbolic_scope.key`), field by field, one per line."""
    fields = key(config)
    return code_hash() + "\n" + option_hash(fields) + "".join(
        f"\n{f.name}={_stable(getattr(fields, f.name))}" for f in dataclasses.fields(fields))


def name(config, suffix: str = ".pickle") -> str:
    """The file name of ``config``'s logs: a hash of :func:`key_text`, then ``suffix`` (``.pickle``: the symbolic
    steps, :mod:`helpers.symbolic_store`; ``.json``: their plain form, :mod:`helpers.plain_log`)."""
    return hashlib.sha256(key_text(config).encode()).hexdigest()[:32] + suffix
