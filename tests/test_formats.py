"""helpers.formats: one definition per weight format, the figures each states held to the code that counts it."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from helpers import config, formats
from helpers.allocator.rules import round_up
from helpers.serving import formula_weight_bytes
from helpers.profile import profile_step
from helpers.techniques import bnb, torchao_nf4

#: A weight of whole blocks (and whole scale blocks): 4,096 x 4,096, as a Llama-3 8B attention projection.
N = K = 4096


def _linear(out_features: int, in_features: int) -> nn.Module:
    """One frozen linear layer on meta, the layer a format quantizes."""
    layer = nn.Linear(in_features, out_features, bias=False, device="meta")
    layer.weight.requires_grad_(False)
    return nn.Sequential(layer)


@pytest.mark.parametrize("name, per_weight", [
    ("nf4", lambda: sum(bnb.bnb_bytes(N * K, double_quant=False).values()) - 64),  # less the per-tensor code book
    ("fp4", lambda: sum(bnb.bnb_bytes(N * K, double_quant=False).values()) - 64),
    ("torchao-nf4", lambda: sum(v for k, v in torchao_nf4.nf4_bytes(N * K).items() if k not in ("mean", "code_book"))),
    ("int8", lambda: bnb.int8_bytes(N, K)["codes"]),  # the row scales are per row, not per weight
    ("int4", lambda: formula_weight_bytes(_linear(N, K), "int4", 2)),
    ("fp8", lambda: formula_weight_bytes(_linear(N, K), "fp8", 2) - round_up(4)),  # less the per-tensor scale
])
def test_each_formats_bytes_per_weight_is_what_its_library_code_counts(name, per_weight):
    assert per_weight() == formats.WEIGHT_FORMATS[name].bytes_per_weight * N * K


def test_the_figures_are_the_ones_lesson_09_states():
    by_name = {name: f.bytes_per_weight for name, f in formats.WEIGHT_FORMATS.items()}
    assert by_name["nf4"] == by_name["fp4"] == 0.5625 and round(by_name["torchao-nf4"], 2) == 0.52
    assert (by_name["int8"], by_name["fp8"], by_name["int4"], by_name["none"]) == (1.0, 1.0, 0.515625, None)


def test_every_program_reads_its_formats_from_the_one_vocabulary():
    from helpers import generation, serving

    for chosen in (formats.FOR_TRAINING, formats.FOR_GENERATION, formats.FOR_SERVING):
        assert set(chosen) <= set(formats.WEIGHT_FORMATS) and chosen[0] == "none"
    assert config.QUANTIZATIONS is formats.FOR_TRAINING == ("none", "nf4", "fp4", "torchao-nf4", "int8")
    assert formats.BY_FORMULA == ("fp8", "int4") and set(formats.BY_FORMULA) <= set(formats.FOR_SERVING)
    assert not set(formats.BY_FORMULA) & set(formats.FOR_TRAINING)  # what is not traced cannot be trained on
    assert (config.BNB_4BIT, config.BNB_QUANTIZATIONS) == (("nf4", "fp4"), ("nf4", "fp4", "int8"))
    assert not hasattr(serving, "QUANTIZATIONS") and not hasattr(generation, "WEIGHTS")
    assert all(f.source for f in formats.WEIGHT_FORMATS.values())


def test_each_program_refuses_a_format_it_does_not_take_naming_those_it_does():
    from helpers.generation import generation_memory
    from helpers.serving import vllm_startup

    with pytest.raises(ValueError, match="^quantization must be one of none, nf4, int8, got 'fp8'$"):
        generation_memory("HuggingFaceTB/SmolLM2-135M", 8, quantization="fp8")
    with pytest.raises(ValueError, match="^unknown quantization 'fp4'; use one of none, nf4, int8, fp8, int4$"):
        vllm_startup("HuggingFaceTB/SmolLM2-135M", quantization="fp4")
    with pytest.raises(ValueError, match="^unknown quantization 'int4'; use one of none, nf4, fp4, torchao-nf4, int8$"):
        config.StepConfig(model="mlp", quantization="int4")


def test_the_vocabulary_imports_no_torch():
    """The command line reads the formats through :mod:`helpers.config` when torch is broken."""
    code = "import sys, helpers.formats, helpers.config; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]


def test_float16_parameters_take_two_bytes_each_and_their_gradients_too():
    step = profile_step("mlp", 4, param_dtype="float16", device="simulated")
    expected = sum(round_up(2 * p.numel()) for p in nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).parameters())
    held = {c: sum(s.nbytes for s in step.storages.values() if s.category == c) for c in ("parameters", "gradients")}
    assert held == {"parameters": expected, "gradients": expected}
    assert torch.float16 is getattr(torch, step.config.param_dtype)
