"""What names a symbolic log (:mod:`helpers.log_names`): the code of its makers, not their prose.

:func:`helpers.log_names.code_text` drops docstrings, comments, blank lines and trailing whitespace, and keeps every
other change (a code line, a string that is no docstring, a default, a decorator, indentation); its comments are
:mod:`tokenize`'s in every source file of the project; :func:`~helpers.log_names.code_hash` and
:func:`~helpers.log_names.option_hash` hash it, so a docstring edit of the engine keeps the shipped logs' names.
(That the shipped logs are named by today's code is ``tests/test_shipped_logs.py``'s.)
"""

import io
import pathlib
import shutil
import sys
import tokenize
import types

import pytest

from helpers import log_names
from helpers.config import StepConfig
from helpers.log_names import code_text

REPO = pathlib.Path(__file__).resolve().parents[1]

#: A module with every kind of docstring, comments, and strings that are no docstring.
SOURCE = '''"""The module's docstring."""

import functools

LIMIT = 4  # a comment after code
# a comment on its own line


class Block:
    """One line."""

    size: int = 8

    def forward(self, x, scale=2.0):
        """Several lines.

        Args:
            x: a tensor.
        """
        if x is None:
            raise ValueError(f"no input for {self.size} # not a comment")
        return x * scale


async def gather(parts):
    \'\'\'An async docstring.\'\'\'
    "a string that is the second statement, no docstring"
    return [part for part in parts]


@functools.cache
def table():
    return {"#": 1, 'key': "value"}
'''


def _edited(old: str, new: str) -> str:
    assert SOURCE.count(old) == 1, old
    return SOURCE.replace(old, new)


@pytest.mark.parametrize("old, new", [
    ('"""The module\'s docstring."""', '"""Another module docstring,\n\nof two paragraphs."""'),
    ('"""One line."""', '"""One line, edited."""'),
    ("Several lines.\n\n        Args:", "Several lines,\n        reworded.\n\n        Args:"),
    ("'''An async docstring.'''", '"""A new async docstring."""'),
    ("# a comment after code", "# another comment, 'quoted'"),
    ("# a comment on its own line", "# a comment on its own line\n    # and one more, indented"),
    ("LIMIT = 4  # a comment after code", "LIMIT = 4"),
    ("\n\nclass Block:", "\n\n\n\n\nclass Block:"),
    ("    size: int = 8\n", "    size: int = 8   \n\n"),
    ("return x * scale", "return x * scale\t "),
], ids=["module docstring", "class docstring", "def docstring", "async def docstring", "comment changed",
        "comment added", "comment removed", "blank lines added", "trailing spaces and a blank line", "trailing tab"])
def test_prose_and_layout_do_not_change_the_code_text(old, new):
    assert code_text(_edited(old, new)) == code_text(SOURCE)


@pytest.mark.parametrize("old, new", [
    ("LIMIT = 4", "LIMIT = 5"),
    ("def forward(self, x, scale=2.0):", "def forward(self, x, scale=3.0):"),
    ('f"no input for {self.size} # not a comment"', 'f"no input for {self.size} # edited"'),
    ('"a string that is the second statement, no docstring"', '"an edited second statement"'),
    ("@functools.cache\n", "@functools.lru_cache\n"),
    ("        return x * scale", "            return x * scale"),
    ('{"#": 1, ', '{"# ": 1, '),
    ("'key'", '"key"'),
], ids=["code line", "default value", "f-string", "second statement string", "decorator", "indentation",
        "a # in a string", "quotes"])
def test_any_other_change_changes_the_code_text(old, new):
    assert code_text(_edited(old, new)) != code_text(SOURCE)


def test_the_code_text_holds_the_code_and_no_prose():
    text = code_text(SOURCE)
    assert "docstring" not in text.replace("no docstring", "") and "comment after" not in text
    assert 'f"no input for {self.size} # not a comment"' in text and "LIMIT = 4\n" in text
    assert all(line and line == line.rstrip() for line in text.split("\n"))
    assert "    size: int = 8\n    def forward(self, x, scale=2.0):\n        if x is None:" in text
    assert code_text(SOURCE.replace("\n", "\r\n")) == text  # a Windows checkout


def test_a_docstring_sharing_its_line_with_code():
    source = 'def f(): "doc"; return 1\n'
    assert code_text(source) == "def f(): ; return 1"
    assert code_text('def f(): "another doc"; return 1  # said\n') == code_text(source)
    assert code_text('def f(): "doc";  return 1\n') != code_text(source)  # whitespace inside a line counts
    assert code_text('def f(): "doc"; return 2\n') != code_text(source)
    assert code_text('def f(): return 1; "doc"\n') != code_text(source)  # a last statement is no docstring
    assert code_text('def g(): "é"; return "ü"\n') == 'def g(): ; return "ü"'  # ast's columns are UTF-8 bytes


def test_a_hash_inside_a_string_is_no_comment():
    assert code_text('x = "a # b"  # c\n') == 'x = "a # b"'
    assert code_text("y = '''\n# a line of a string\n'''\n") == "y = '''\n# a line of a string\n'''"
    assert code_text(r'z = "\"# still a string" + r"\" # raw too"  # end' + "\n") == \
        r'z = "\"# still a string" + r"\" # raw too"'


def test_a_docstring_that_holds_a_comment():
    """A docstring of two concatenated strings with a comment between them: both cut, once."""
    source = 'def f():\n    ("one"  # between\n     "two")\n    return "é"  # ü\n'
    assert code_text(source) == 'def f():\n    return "é"'


def _comments_by_tokenize(source: str) -> list[tuple[int, int]]:
    lines, starts = source.split("\n"), [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    return [(starts[t.start[0] - 1] + t.start[1], starts[t.start[0] - 1] + t.end[1])
            for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]


def test_the_comments_cut_are_tokenizes_in_every_source_file():
    """:data:`helpers.log_names._STRING_OR_COMMENT` finds what :mod:`tokenize` calls comments, in every ``.py`` file of
    the package, its tests, tools, benchmarks and lessons, and in :data:`SOURCE`."""
    files = [path for folder in ("helpers", "tests", "tools", "benchmarks", "lessons")
             for path in sorted((REPO / folder).rglob("*.py"))]
    assert len(files) > 100
    for source in [SOURCE] + [path.read_text(encoding="utf-8") for path in files]:
        found = [m.span(1) for m in log_names._STRING_OR_COMMENT.finditer(source) if m.group(1)]
        assert found == _comments_by_tokenize(source)


def _copied_makers(tmp_path: pathlib.Path, monkeypatch) -> pathlib.Path:
    """A copy of the ``helpers`` sources that name a log, read by :mod:`helpers.log_names` in place of the package's
    (its ``__file__`` moved there); the copy's root."""
    root = tmp_path / "helpers"
    shutil.copytree(REPO / "helpers", root, ignore=shutil.ignore_patterns("symbolic_logs", "__pycache__", "*.pyc"))
    monkeypatch.setattr(log_names, "__file__", str(root / "log_names.py"))
    return root


def test_a_docstring_or_comment_edit_of_the_engine_keeps_the_code_hash(tmp_path, monkeypatch):
    root = _copied_makers(tmp_path, monkeypatch)
    before = log_names.code_hash.__wrapped__()
    assert before == log_names.code_hash()  # the copy is the package
    counting = root / "engine" / "counting.py"
    source = counting.read_text()
    assert source.startswith('"""') and "\nimport " in source  # a module docstring, then imports
    edited = source.replace('"""', '"""An edited docstring, then: ', 1).replace("\nimport ", "\n# why\nimport ", 1)
    counting.write_text(edited + "\n\n# a comment at the end\n")
    assert log_names.code_hash.__wrapped__() == before
    counting.write_text(source + "\nCHANGED = 1\n")
    assert log_names.code_hash.__wrapped__() != before
    counting.write_text(source)
    (root / "models" / "hf_configs" / "Llama-3.1-8B.json").write_text("{}")  # a data file: its bytes count
    assert log_names.code_hash.__wrapped__() != before


def test_an_options_module_is_named_by_its_code(tmp_path, monkeypatch):
    root = _copied_makers(tmp_path, monkeypatch)
    path = root / "an_option.py"

    def option_hash(source: str) -> str:
        path.write_text(source)
        module = types.ModuleType("helpers.an_option")
        module.__file__ = str(path)
        exec(compile(source, str(path), "exec"), module.__dict__)
        monkeypatch.setitem(sys.modules, module.__name__, module)
        return log_names.option_hash(StepConfig(model="gpt2", seq_len=16, loss=module.loss, device="simulated"))

    source = ('"""A loss."""\n\ndef loss(outputs, batch):\n    """The sum."""\n'
              '    return outputs.logits.float().sum()  # fp32\n')
    first = option_hash(source)
    assert option_hash(source.replace("The sum.", "The sum of the logits.").replace("# fp32", "# float32")) == first
    assert option_hash(source.replace(".float()", ".double()")) != first
