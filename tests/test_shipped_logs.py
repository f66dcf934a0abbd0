"""The symbolic logs shipped with the package (``helpers/symbolic_logs/``, :mod:`helpers.log_names`): named by what
makes them, current, read after the user's directory, turned off with it, and exact.

Fast: the list of modules that names a log is ``.importlinter``'s layers from :mod:`helpers.symbolic` down; every
shipped file is named by today's code and versions (else ``make symbolic-logs`` was forgotten); a log made in a
temporary shipped directory answers as a concrete trace; ``off`` turns both directories off; the user's directory
wins.  Slow (``tests/conftest.py``): shipped logs of the lessons evaluated at drawn points equal concrete traces.
"""

import configparser
import dataclasses
import json
import pathlib
import random
import shutil

import pytest

from helpers import evaluated, log_names, profile, symbolic_store
from helpers.config import StepConfig
from helpers.models import resolve_model

REPO = pathlib.Path(__file__).resolve().parents[1]
RUN = "run `make symbolic-logs` (tools/ship_symbolic_logs.py) and commit helpers/symbolic_logs/"


def _layers_from_symbolic_down() -> list[str]:
    """The modules and packages of ``.importlinter``'s ``layers`` contract at and below ``helpers.symbolic``, in order,
    without the ``helpers.`` prefix."""
    parser = configparser.ConfigParser()
    parser.read(REPO / ".importlinter")
    lines = [line.strip() for line in parser["importlinter:contract:layers"]["layers"].splitlines() if line.strip()]
    below = lines[lines.index("helpers.symbolic"):]
    return [name.strip().removeprefix("helpers.") for line in below for name in line.replace(":", "|").split("|")]


def test_the_modules_that_name_a_log_are_the_layers_from_symbolic_down():
    assert list(log_names.MAKERS) == _layers_from_symbolic_down()
    assert all((REPO / "helpers" / f"{m}.py").is_file() or (REPO / "helpers" / m).is_dir() for m in log_names.MAKERS)


def test_the_variables_are_the_ones_the_tests_set():
    from conftest import SHIPPED_LOGS

    assert SHIPPED_LOGS == log_names.SHIPPED_VARIABLE


def test_the_shipped_logs_are_current(tmp_path, monkeypatch, shipped_logs):
    """Each shipped file is named by what today's code and versions give its configuration, and loads: an engine
    changed without ``make symbolic-logs`` fails here (its logs would be ignored, never used)."""
    monkeypatch.setenv(log_names.VARIABLE, str(tmp_path))  # an empty user directory: the shipped file is read
    files = sorted(log_names.SHIPPED.glob("*.pickle"))
    assert files, f"no symbolic log is shipped: {RUN}"
    for path in files:
        config = symbolic_store.configuration(path)
        assert log_names.name(config) == path.name, f"{path.name} was made by other code or versions: {RUN}"
        assert symbolic_store.load(config, None), f"{path.name} cannot be read back (helpers.symbolic_store)"
    for path in sorted(log_names.SHIPPED.glob("*.json")):  # the plain form, beside its pickle and named alike
        assert path.with_suffix(".pickle") in files, f"{path.name} has no pickle beside it: {RUN}"
        key = json.loads(path.read_text())["key"]
        assert key == log_names.key_text(symbolic_store.configuration(path.with_suffix(".pickle"))), \
            f"{path.name} was made by other code or versions: {RUN}"
    assert not list(log_names.SHIPPED.glob("*.part")), f"a half-written file is shipped: {RUN}"


def test_a_function_given_as_an_option_names_its_log_by_its_source():
    from helpers.teaching import setups

    config = StepConfig(model="gpt2", batch_size=2, seq_len=16, loss=setups.shifted_loss, device="simulated")
    assert log_names.option_hash(config) != log_names.option_hash(config.replace(loss="auto"))
    assert log_names.option_hash(config.replace(loss="auto")) == log_names.option_hash(StepConfig(device="simulated"))
    assert log_names.option_hash(config) == log_names.option_hash(config.replace(loss=setups.vit_output_sum))  # one file
    assert log_names.name(config) != log_names.name(config.replace(loss="auto"))


SMALL = dict(model="mlp", device="simulated")


@pytest.fixture(scope="module")
def one_log(tmp_path_factory) -> pathlib.Path:
    """A checked log of a small step (:data:`SMALL`, batch 4) made as the ship script makes one: the user's directory
    pointed at an empty one, every configuration traced symbolically at its first point; the file."""
    made = tmp_path_factory.mktemp("made")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(log_names.VARIABLE, str(made))
        patch.setattr(evaluated, "AT_POINT", 1)
        patch.setattr(profile, "EVALUATE", True)
        profile.forget_kept()
        profile.profile_step(batch_size=4, **SMALL)
        profile.forget_kept()
    (path,) = made.glob("*.pickle")
    return path


def _ship(one_log: pathlib.Path, tmp_path: pathlib.Path, monkeypatch) -> pathlib.Path:
    """:func:`one_log`'s file shipped in a temporary shipped directory (:data:`helpers.log_names.SHIPPED`), which it
    returns."""
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    shutil.copy(one_log, shipped / one_log.name)
    monkeypatch.setattr(log_names, "SHIPPED", shipped)
    monkeypatch.setenv(log_names.VARIABLE, str(tmp_path / "user"))
    return shipped


def test_a_shipped_log_answers_a_first_question_as_a_concrete_trace(one_log, tmp_path, monkeypatch, shipped_logs):
    shipped, user = _ship(one_log, tmp_path, monkeypatch), tmp_path / "user"
    assert log_names.directories() == [user, shipped]
    first = profile.profile_step(batch_size=8, **SMALL)  # a new process's first question: no trace
    assert evaluated.was_evaluated(first)
    assert evaluated.differs(first, profile.obtain_concrete(first.config)) is None
    assert not user.exists() or not list(user.iterdir())  # read, not copied: save writes the user's directory only
    monkeypatch.setenv(log_names.SHIPPED_VARIABLE, "off")  # the shipped logs alone off
    assert log_names.directories() == [user]
    profile.forget_kept()
    assert not evaluated.was_evaluated(profile.profile_step(batch_size=8, **SMALL))


def test_off_turns_the_users_and_the_shipped_logs_off(one_log, tmp_path, monkeypatch, shipped_logs):
    _ship(one_log, tmp_path, monkeypatch)
    config = StepConfig(batch_size=8, **SMALL)
    assert symbolic_store.load(config, None)
    for off in ("off", "0"):
        monkeypatch.setenv(log_names.VARIABLE, off)
        assert log_names.directories() == [] and log_names.directory() is None
        assert symbolic_store.load(config, None) == []
        profile.forget_kept()
        assert not evaluated.was_evaluated(profile.profile_step(batch_size=8, **SMALL))


def test_the_users_directory_wins_over_the_shipped_one(one_log, tmp_path, monkeypatch, shipped_logs):
    _ship(one_log, tmp_path, monkeypatch)
    user = tmp_path / "user"
    config = StepConfig(batch_size=8, **SMALL)
    (step,) = symbolic_store.load(config, None)
    assert symbolic_store.save(config, [dataclasses.replace(step, how="the user's own")])
    assert [s.how for s in symbolic_store.load(config, None)] == ["the user's own"]
    (user / log_names.name(config)).write_bytes(b"garbage")  # unreadable: the shipped one answers
    assert [s.how for s in symbolic_store.load(config, None)] == [step.how]


def _shipped(want) -> list:
    """The shipped configurations for which ``want(config)`` holds, with their steps."""
    found = []
    for path in sorted(log_names.SHIPPED.glob("*.pickle")):
        config = symbolic_store.configuration(path)
        if want(config):
            found.append((config, symbolic_store.load(config, resolve_model(config.model, config.num_classes,
                                                                             config.name))))
    return found


#: Shipped configurations the slow test evaluates: one CNN, Llama-3.1 8B with LoRA, one published setup (a loss of
#: helpers.teaching), each by what picks it, the first by file name.  The published setup is Llama-2 7B's LoRA step
#: (peft's, in bfloat16, checkpointing): the first of all published setups by file name changes whenever the logs are
#: made again, and was LLaMA 65B's QLoRA step, whose concrete trace alone took 36 s of this test's 42.
PICKED = {
    "a torchvision CNN": lambda c: c.model in ("resnet18", "mobilenet_v2") and c.seq_len is None,
    "Llama-3.1 8B LoRA": lambda c: "Llama-3.1-8B" in str(c.model) and c.lora_rank > 0 and c.quantization == "none",
    "a published setup": lambda c: (callable(c.loss) and c.loss.__module__.startswith("helpers.teaching")
                                    and c.model == "meta-llama/Llama-2-7b-hf" and c.quantization == "none"),
}


@pytest.mark.parametrize("what", list(PICKED))
def test_a_shipped_log_evaluated_at_a_drawn_point_equals_a_concrete_trace(what, shipped_logs):
    found = [(c, steps) for c, steps in _shipped(PICKED[what]) if steps]
    assert found, f"no shipped log of {what}: {RUN}"
    config, steps = found[0]
    rng, step = random.Random(50), next((s for s in steps if not s.fixed), steps[0])
    for _ in range(50):  # a point inside the log's region: its ranges (drawn small, for the concrete trace), guards
        sizes = {name: rng.randint(low, min(high, 8 if name == "B" else 1024))
                 for name, (low, high) in step.ranges.items()}
        point = config.replace(batch_size=sizes.get("B", 1), seq_len=sizes.get("S", 1) if config.seq_len else None)
        if step.outside(point) is None:
            break
    assert step.outside(point) is None, f"no point drawn inside the region of {what}'s log"
    assert evaluated.differs(step.evaluate(point), profile.obtain_concrete(point)) is None
