"""README's reading list and its sizes are true: held against the code, not against memory (issue 49).

README's "Reading the helpers" names the files that a simulated ``profile_step("resnet18", batch_size=128)`` runs to
count its bytes, and the other core files that step runs; this test runs that step in a fresh interpreter, traced line
by line (``sys.settrace``), and fails when the core files it runs differ from those README names, when a stated line
count is off, or when the step imports Hugging Face code.  It also holds the size limits (a module at most 600 lines
and a function at most 80; in the core 500 and 60) and the lines of each layer that README's layout section states.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "helpers"
README = (ROOT / "README.md").read_text()

#: The core: what every number rests on (issue 49); the part to keep small.
CORE = ("engine/", "allocator/", "techniques/", "models/", "config.py", "record.py", "written.py", "shallow.py",
        "depth.py", "symbolic.py", "symbolic_sizes.py", "symbolic_store.py", "symbolic_scope.py", "log_names.py",
        "plain_log.py", "plain_step.py", "evaluated.py", "step.py", "traced.py", "profile.py")
#: The command line, and the package's face (which only hands names on).
COMMAND_LINE = ("__main__.py", "check.py", "flags.py", "cli_batches.py", "cli_cold.py", "cli_defaults.py",
                "__init__.py")
#: What every layer reads: bytes and formatting, the cards, the weight formats, a snapshot file's bytes, a Hugging Face
#: config read from its name.
FOUNDATIONS = ("units.py", "errors.py", "palette.py", "versions.py", "gpus.py", "alignment.py", "formats.py",
               "snapshot_file.py", "hf_config.py")
#: The layers README's layout section counts, in its order: (name README gives it, is this file in it?).
LAYERS = (
    ("the core", lambda rel: rel.startswith(CORE)),
    ("foundations", lambda rel: rel in FOUNDATIONS),
    ("studies", lambda rel: "/" not in rel and rel not in COMMAND_LINE and not rel.startswith(CORE)
     and rel not in FOUNDATIONS),
    ("teaching", lambda rel: rel.startswith("teaching/")),
    ("the command line", lambda rel: rel in COMMAND_LINE),
)

#: What the traced step's interpreter runs: the core files with a line run inside a function (module bodies, run
#: at import, are not the step), and the Hugging Face modules imported by then.
_STEP = """
import json, sys
from pathlib import Path
root = str(Path("helpers").resolve())
from helpers import profile_step
ran = set()
def trace(frame, event, arg):
    code = frame.f_code
    if not code.co_filename.startswith(root) or code.co_name == "<module>":
        return None
    ran.add(code.co_filename)
    return None
sys.settrace(trace)
profile_step("resnet18", batch_size=128, device="simulated")
sys.settrace(None)
hf = sorted(m for m in sys.modules if m.split(".")[0] in ("transformers", "peft"))
print(json.dumps({"ran": sorted(str(Path(f).relative_to(Path(root).parent)) for f in ran), "hf": hf}))
"""


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def _rel(path: Path) -> str:
    return path.relative_to(HELPERS).as_posix()


def _section(title: str) -> str:
    """README's paragraphs from the one that starts with ``**title**`` to the next heading."""
    start = README.index(f"**{title}**")
    return README[start:README.index("\n## ", start)]


def _stated(count: str) -> int:
    return int(count.replace(",", ""))


def _close(stated: int, actual: int) -> bool:
    """A stated line count is true within 2% (or 10 lines): README need not change with every edit."""
    return abs(stated - actual) <= max(10, actual // 50)


def _traced_step() -> dict:
    result = subprocess.run([sys.executable, "-c", _STEP], cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                 "GPU_MEMORY_SYMBOLIC_CACHE": "off"})  # the step run, not read from a log
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_reading_list_names_the_files_the_step_runs_and_no_hugging_face_code():
    section = _section("Reading the helpers.")
    read = dict(re.findall(r"^\d+\. `(helpers/[\w/]+\.py)` \(([\d,]+) lines\)", section, re.M))
    also_run = section[section.index("**Also run"):]
    also = re.findall(r"`(helpers/[\w/]+(?:\.py|/))`", also_run[:also_run.find("\n\n")])
    total_files, total_lines = re.search(r"read these (\w+) files,\s+([\d,]+) lines in all", section).groups()
    words = ("one two three four five six seven eight nine ten".split())
    assert words.index(total_files) + 1 == len(read) and read and also
    assert _close(_stated(total_lines), sum(_lines(ROOT / f) for f in read))
    for name, count in read.items():
        assert _close(_stated(count), _lines(ROOT / name)), (name, count, _lines(ROOT / name))

    step = _traced_step()
    assert step["hf"] == [], f"the ResNet18 step imported Hugging Face code: {step['hf'][:5]}"
    core_ran = {f for f in step["ran"] if f.removeprefix("helpers/").startswith(CORE)}
    assert set(read) <= core_ran, f"named but not run: {sorted(set(read) - core_ran)}"
    unnamed = {f for f in core_ran - set(read) if not any(f == a or (a.endswith("/") and f.startswith(a))
                                                          for a in also)}
    assert not unnamed, f"run by the step, named nowhere in README's reading list: {sorted(unnamed)}"
    stale = [a for a in also if not any(f == a or (a.endswith("/") and f.startswith(a)) for f in core_ran)]
    assert not stale, f"README says the step runs these, and it does not: {stale}"


def test_no_module_or_function_passes_its_size_limit():
    """A module at most 600 lines and a function at most 80; in the core, 500 and 60."""
    over = []
    for path in sorted(HELPERS.rglob("*.py")):
        rel, text = _rel(path), path.read_text()
        module, function = (500, 60) if rel.startswith(CORE) else (600, 80)
        if len(text.splitlines()) > module:
            over.append(f"{rel}: {len(text.splitlines())} lines (limit {module})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > function:
                    over.append(f"{rel}: {node.name} {length} lines (limit {function})")
    assert not over, over


def test_the_layout_section_states_the_lines_of_each_layer():
    counts = {name: 0 for name, _ in LAYERS}
    for path in HELPERS.rglob("*.py"):
        rel = _rel(path)
        layer = [name for name, member in LAYERS if member(rel)]
        assert len(layer) == 1, (rel, layer)
        counts[layer[0]] += _lines(path)
    section = README[README.index("## Layout"):README.index("**Reading the helpers.**")]
    stated = dict(re.findall(r"^  ([a-z ]+?):\s+([\d,]+) lines", section, re.M))
    assert set(stated) == set(counts) | {"helpers in all"}, stated
    for name, actual in counts.items():
        assert _close(_stated(stated[name]), actual), (name, stated[name], actual)
    assert _close(_stated(stated["helpers in all"]), sum(counts.values()))
