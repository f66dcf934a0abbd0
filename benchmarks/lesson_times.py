"""How long each lesson takes to run top to bottom ("Run All"), and how much a learner reads in it.

For each committed lesson (``lessons/*.ipynb``, or the paths given), runs a
copy in a fresh kernel, as JupyterLab's "Run All" would, and prints the
seconds it took, beside what the stated duration has to cover: words of
prose (markdown, not counting the folded solutions), lines of code (not comments), the numbers printed by its
stored outputs, and its figures.  The stated duration is the lesson's own
"**Time:**" line.  Nothing is written back: the committed notebooks are left
as they are.

The run-all time is the machine's share of a learner's time; reading
(about 130 words a minute for technical prose), thinking about the outputs
and the exercises are the rest.  Measured on this project's 2-core machine
unless said otherwise; a laptop is usually faster.

Run with ``python benchmarks/lesson_times.py [NOTEBOOK ...]``.
"""

import json
import pathlib
import re
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: A number in an output: digits with thousands separators and decimals, not part of a word.
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")
#: The lesson's stated duration: its "**Time:**" line.
STATED = re.compile(r"\*\*Time:\*\*\s*([^*]*)")


def counts(nb: dict) -> dict:
    """Words of prose (folded ``<details>`` solutions left out), code lines, numbers printed and figures
    in a notebook's stored cells and outputs, and its stated duration."""
    words = code = numbers = figures = 0
    stated = ""
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            prose = re.sub(r"<details>.*?</details>", " ", source, flags=re.S)  # solutions are read after trying
            words += len(re.findall(r"\w+", re.sub(r"<[^>]+>", " ", prose)))
            stated = stated or next(iter(STATED.findall(source)), "").strip()
        elif cell["cell_type"] == "code":
            code += sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                text = "".join(out.get("text", [])) if out.get("output_type") == "stream" else ""
                if "image/png" in data:
                    figures += 1
                elif "text/plain" in data and "application/vnd.jupyter.widget-view+json" not in data:
                    text += "".join(data["text/plain"])
                numbers += len(NUMBER.findall(text))
    return {"words": words, "code_lines": code, "numbers_printed": numbers, "figures": figures, "stated": stated}


def run_all(path: pathlib.Path) -> float:
    """Seconds to run a copy of the notebook top to bottom in a fresh kernel, in the lessons' folder."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def main() -> None:
    paths = [pathlib.Path(p) for p in sys.argv[1:]] or sorted((ROOT / "lessons").glob("*.ipynb"))
    print(f"{'lesson':<45} {'words':>6} {'code':>5} {'numbers':>8} {'figures':>8} {'run-all':>9}  stated")
    total = 0.0
    for path in paths:
        c = counts(json.loads(path.read_text()))
        seconds = run_all(path)
        total += seconds
        print(f"{path.stem:<45} {c['words']:>6,} {c['code_lines']:>5} {c['numbers_printed']:>8} {c['figures']:>8} "
              f"{seconds:>8.0f}s  {c['stated'][:60]}", flush=True)
    print(f"all {len(paths)} lessons run top to bottom in {total / 60:.1f} minutes")


if __name__ == "__main__":
    main()
