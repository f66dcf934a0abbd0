"""The order in which the test files are handed to pytest-xdist's workers (``tests/conftest.py``: ``COSTS``,
``heaviest_files_first``, ``slow_reason``) and ``tools/test_costs.py``, which prints ``COSTS`` from a run's
``--durations=0`` lines.  Nothing is timed here."""

import pathlib
import sys
from types import SimpleNamespace

import pytest
from conftest import COSTS, SLOW, heaviest_files_first, slow_reason

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import test_costs  # noqa: E402


def test_every_file_in_the_table_exists_and_every_slow_group_names_one():
    assert COSTS, "COSTS is empty: every file would weigh a tenth of a second a test"
    for file, (fast, slow) in COSTS.items():
        assert (ROOT / file).is_file(), f"COSTS names {file}, which does not exist (tools/test_costs.py)"
        assert fast >= 0 and slow >= 0 and fast + slow >= 10, file
    for key in SLOW:
        assert (ROOT / key.partition("::")[0]).is_file(), key


@pytest.mark.parametrize("nodeid, slow", [
    ("tests/test_site.py::test_every_page_opens_clean", True),                                 # a whole file
    ("tests/test_depth.py::test_a_full_size_step_written_equals_its_full_trace[any case]", True),  # a test
    ("tests/test_depth.py::test_random_small_configurations_are_written_exactly", False),
    ("tests/test_symbolic_equality.py::test_a_cheap_step_evaluated_equals_its_concrete_trace"
     "[tiny Llama, the chunked loss, seed 50]", True),                                        # one parameter
    ("tests/test_symbolic_equality.py::test_a_cheap_step_evaluated_equals_its_concrete_trace[another]", False),
    ("lessons/01_mini_batching.ipynb::Cell 5", False),
])
def test_a_test_is_slow_where_the_table_says(nodeid, slow):
    assert (slow_reason(nodeid) is not None) == slow


def test_the_tool_sums_each_files_phases_apart_by_group():
    lines = ["============ slowest durations ============",
             "12.50s call     tests/test_depth.py::test_random_small_configurations_are_written_exactly",
             "0.50s setup    tests/test_depth.py::test_random_small_configurations_are_written_exactly",
             "30.25s call     tests/test_depth.py::test_a_full_size_step_written_equals_its_full_trace[Llama 8B, LoRA]",
             "2.00s teardown tests/test_site.py::test_every_page_opens_clean",
             "9.00s call     lessons/07_beyond_one_gpu.ipynb::Cell 7",
             "(3 durations < 0.005s hidden.  Use -vv to show these durations.)"]
    assert test_costs.costs(lines) == {"tests/test_depth.py": [13.0, 30.25], "tests/test_site.py": [0.0, 2.0]}


def _item(nodeid, slow=False):
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: object() if slow and name == "slow" else None)


def test_the_heaviest_file_goes_first_counting_the_groups_that_run():
    heavy_fast = [_item(f"tests/test_unlisted_{i}.py::test_{j}") for i in range(2) for j in range(3 + 200 * i)]
    items = [*heavy_fast,
             _item("tests/test_depth.py::test_random_small_configurations_are_written_exactly"),
             _item("tests/test_depth.py::test_a_full_size_step_written_equals_its_full_trace[x]", slow=True),
             _item("lessons/07_beyond_one_gpu.ipynb::Cell 0"), _item("lessons/07_beyond_one_gpu.ipynb::Cell 1"),
             _item("lessons/00_setup_check.ipynb::Cell 0")]

    def files(order):
        return list(dict.fromkeys(item.nodeid.partition("::")[0] for item in order))

    both = heaviest_files_first(items)
    assert [item.nodeid for item in both if "07_" in item.nodeid] == ["lessons/07_beyond_one_gpu.ipynb::Cell 0",
                                                                       "lessons/07_beyond_one_gpu.ipynb::Cell 1"]
    weight = {"tests/test_depth.py": sum(COSTS["tests/test_depth.py"]), "tests/test_unlisted_1.py": 20.3,
              "tests/test_unlisted_0.py": 0.3}
    listed = [f for f in files(both) if f in weight]
    assert listed == sorted(weight, key=weight.get, reverse=True)
    assert len(files(both)) == 5  # each file's items together
    assert files(both).index("lessons/07_beyond_one_gpu.ipynb") < files(both).index("lessons/00_setup_check.ipynb")
    fast_only = files(heaviest_files_first(items, slow=False))
    slow_only = files(heaviest_files_first(items, fast=False))
    depth_fast, depth_slow = COSTS["tests/test_depth.py"]
    assert (fast_only.index("tests/test_depth.py") < fast_only.index("tests/test_unlisted_1.py")) == (depth_fast > 20.3)
    assert slow_only[0] == "tests/test_depth.py" and depth_slow > 0
