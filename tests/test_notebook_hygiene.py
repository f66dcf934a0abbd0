"""Stored notebooks must be what a fresh top-to-bottom run produced (see NOTEBOOKS.md)."""

import json
import pathlib
import re

import pytest

LESSONS = sorted((pathlib.Path(__file__).parent.parent / "lessons").glob("*.ipynb"))


def test_lessons_exist():
    names = [p.name for p in LESSONS]
    for name in ("00_setup_check.ipynb", "01_mini_batching.ipynb", "01b_out_of_memory_and_deep_mlps.ipynb",
                 "02_linear_layer_gradients.ipynb", "03_resnet18_layer_by_layer.ipynb", "04_amp_and_checkpointing.ipynb",
                 "04b_offloading_and_real_gpus.ipynb", "06_allocator_and_fragmentation.ipynb",
                 "06a_fragmentation_and_reserved_memory.ipynb", "08_transformers_and_sequence_length.ipynb",
                 "08b_long_context_remedies_and_the_kv_cache.ipynb", "09_fine_tuning_on_one_gpu.ipynb",
                 "09b_longest_sequence_and_published_figures.ipynb", "10_serving_memory.ipynb",
                 "10b_serving_beyond_one_card.ipynb"):
        assert name in names


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_notebook_is_clean(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert "widgets" not in nb["metadata"], "saved widget state"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), "re-run top to bottom"
    for cell in code:
        for out in cell["outputs"]:
            assert out["output_type"] != "error" or "raises-exception" in cell["metadata"].get("tags", [])
            assert "image/svg+xml" not in out.get("data", {}), "use PNG figures"
            # a stored widget view shows "Error displaying widget" in a lesson opened unrun: keep the stand-in
            assert "application/vnd.jupyter.widget-view+json" not in out.get("data", {}), "stored widget view"
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            assert not re.search(r"/(root|home|work|tmp)/", text), "output shows a machine path"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_structure(path):
    """Questions, objectives, minutes up front; exercises with solutions; key points."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for heading in ("Questions", "Objectives", "minutes", "Exercise", "<details>", "Key points"):
        assert heading in text, heading
    skips = [c for c in nb["cells"] if "nbval-skip" in c["metadata"].get("tags", [])]
    assert skips == [], "a skipped cell must be listed with its reason in README.md"


#: nbval's cell tags that the lessons may use (nbval-skip is refused above).
NBVAL_TAGS = {"nbval-ignore-output", "raises-exception", "nbval-skip"}


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_every_unchecked_output_says_why(path):
    """nbval's markers are cell tags, unseen in a learner's cells, each with its reason beside it
    (``nbval_reason`` in the cell's metadata; ``# %% tags=[...] nbval_reason="..."`` in the source).
    A marker comment in a cell (``# NBVAL_IGNORE_OUTPUT``) would stand in the learner's code."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        assert not re.search(r"^\s*#\s*NBVAL_", source, flags=re.M), f"a marker comment: use a cell tag\n{source[:80]}"
        tags = set(cell["metadata"].get("tags", [])) & NBVAL_TAGS
        if tags:
            assert cell["cell_type"] == "code", f"{tags} on a {cell['cell_type']} cell"
            assert cell["metadata"].get("nbval_reason", "").strip(), f"{tags} without an nbval_reason\n{source[:80]}"
