"""Versions stated once: helpers.versions agrees with requirements.txt, and what the
lessons, docs/, README.md and helpers/ cite of a pinned package is the pin or a
historical citation listed here with its reason."""

import pathlib
import re

import pytest

from helpers.versions import PINS

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: How the texts name each pinned package (case-insensitive), -> its distribution name.
NAMES = {"pytorch": "torch", "torch": "torch", "torchvision": "torchvision", "transformers": "transformers",
         "peft": "peft", "accelerate": "accelerate", "torchao": "torchao", "scikit-learn": "scikit-learn",
         "matplotlib": "matplotlib", "ipywidgets": "ipywidgets", "jupyterlab": "jupyterlab", "nbval": "nbval"}
#: "<name> <version>" or "<name>==<version>"; a number followed by a unit is a size, not a version.
CITED = re.compile(r"\b(" + "|".join(map(re.escape, NAMES)) + r")(?: v?|==)(\d+\.\d+(?:\.\d+)?(?:\.?dev\d+|rc\d+)?)"
                   r"(?![\d.]*\s?(?:GiB|GB|MiB|MB|%))", re.I)
#: Deliberate historical citations: (file, "<name> <version>") -> why that version, not the pin.
HISTORICAL = {
    ("lessons/04_amp_and_checkpointing.py", "PyTorch 1.6"): "the release that brought torch.autocast (2020)",
    ("lessons/05b_gpt2_xl_accumulation_and_leaks.py", "PyTorch 2.9"):
        "the last release whose autocast caches under inference_mode (before pytorch #165068)",
    ("lessons/06_allocator_and_fragmentation.py", "PyTorch 1.13"): "the release of pytorch #86509 (lazy loading)",
    ("lessons/06_allocator_and_fragmentation.py", "PyTorch 2.10"): "the version unsloth-zoo #1053 measured",
    ("lessons/09_fine_tuning_on_one_gpu.py", "peft 0.8.2"): "the version peft #1514's reporter ran",
    ("lessons/09_fine_tuning_on_one_gpu.py", "PyTorch 2.8"):
        "from torch 2.8 on, transformers' TrainingArguments defaults to adamw_torch_fused (training_args.py)",
    ("helpers/cli_defaults.py", "torch 2.8"):
        "from torch 2.8 on, transformers' TrainingArguments defaults to adamw_torch_fused (training_args.py)",
    ("helpers/gpus.py", "PyTorch 1.13"): "the release of pytorch #86509 (lazy loading)",
    ("helpers/gpus.py", "PyTorch 2.10"): "the version unsloth-zoo #1053 measured",
    ("helpers/teaching/setups.py", "transformers 4.31"):
        "4.31 to 4.45: the releases whose Llama upcast its logits to float32 (the published figures' setups)",
    ("helpers/hf_config.py", "transformers 4.31.0.dev0"): "the version a published config.json was saved with",
    ("helpers/teaching/setups.py", "transformers 4.48"): "the version of fms-acceleration's benchmark",
    ("lessons/09b_longest_sequence_and_published_figures.py", "transformers 4.48"):
        "the version of fms-acceleration's benchmark",
    ("docs/instructor_guide.md", "transformers 4.48"): "the version of fms-acceleration's benchmark",
    ("lessons/06b_reading_a_gpu_snapshot.py", "PyTorch 2.11.0"): "the H200 recording's own PyTorch, not the pin",
    ("lessons/06b_reading_a_gpu_snapshot.py", "transformers 5.17.0"): "the H200 recording's transformers",
    ("lessons/06b_reading_a_gpu_snapshot.py", "peft 0.21.0"): "the H200 recording's peft",
    ("helpers/gpus.py", "torch 2.11"): "the PyTorch of the H200 whose threads per SM were measured",
    ("helpers/teaching/vllm_logs.py", "torch 2.10.0"): "the PyTorch that vLLM v0.19.0 requires, whose Inductor it runs",
    ("lessons/09b_longest_sequence_and_published_figures.py", "PyTorch 2.11.0"):
        "the GPU machine's own, with which make gpu-reference ran (2026-11-26)",
    ("lessons/09b_longest_sequence_and_published_figures.py", "transformers 5.17.0"):
        "the GPU machine's own, with which make gpu-reference ran (2026-11-26)",
    ("lessons/09b_longest_sequence_and_published_figures.py", "peft 0.21.0"):
        "the GPU machine's own, with which make gpu-reference ran (2026-11-26)",
    ("README.md", "transformers 5.17.0"): "the GPU machine's own, with which make gpu-reference ran (2026-11-26)",
    ("README.md", "peft 0.21.0"): "the GPU machine's own, with which make gpu-reference ran (2026-11-26)",
}


def requirements() -> dict[str, str]:
    text = (ROOT / "requirements.txt").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, flags=re.M))


def test_the_versions_module_states_the_pins_of_requirements_txt():
    pins = requirements()
    wrong = {name: (version, pins.get(name)) for name, version in PINS.items() if pins.get(name) != version}
    assert not wrong, f"helpers/versions.py disagrees with requirements.txt (module, requirements): {wrong}"


def texts():
    yield from sorted((ROOT / "lessons").glob("*.py"))
    yield from sorted((ROOT / "docs").rglob("*.md"))
    yield ROOT / "README.md"
    yield from sorted(p for p in (ROOT / "helpers").rglob("*.py") if p.name != "versions.py")


def citations():
    for path in texts():
        rel = path.relative_to(ROOT).as_posix()
        for m in CITED.finditer(path.read_text()):
            yield rel, m.group(0), NAMES[m.group(1).lower()], m.group(2)


def test_the_scan_finds_citations():
    found = {(rel, text) for rel, text, _, _ in citations()}
    assert ("lessons/09_fine_tuning_on_one_gpu.py", "peft 0.8.2") in found
    assert any(rel == "README.md" and dist == "torch" for rel, _, dist, _ in citations())


@pytest.mark.parametrize("rel", sorted({rel for rel, _ in HISTORICAL}))
def test_each_historical_citation_is_still_there(rel):
    """An allowlist entry whose citation was removed is dropped from the list, not kept silently."""
    found = {text for r, text, _, _ in citations() if r == rel}
    missing = [text for r, text in HISTORICAL if r == rel and text not in found]
    assert not missing, f"{rel} no longer cites {missing}: remove them from HISTORICAL"


def test_every_cited_version_is_the_pin_or_a_listed_historical_citation():
    """A lesson may shorten the pin to its release (``PyTorch 2.14`` for 2.14.1)."""
    stale = []
    for rel, text, dist, version in citations():
        pin = PINS[dist]
        if version == pin or pin.startswith(version + ".") or (rel, text) in HISTORICAL:
            continue
        stale.append(f"{rel}: {text!r} (pinned {dist} {pin})")
    assert not stale, "versions that are neither the pin nor a listed historical citation:\n" + "\n".join(stale)


def test_helpers_cite_the_pin_through_the_versions_module():
    """helpers/ says "the pinned PyTorch" (helpers.versions), never the pinned version by hand."""
    by_hand = [f"{rel}: {text!r}" for rel, text, dist, version in citations()
               if rel.startswith("helpers/") and version == PINS[dist]]
    assert not by_hand, "\n".join(by_hand)
