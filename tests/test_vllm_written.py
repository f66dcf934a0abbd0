"""vLLM's profile run written from shallow traces (helpers.vllm_written, helpers.vllm_profile.profile_run): the same
weights, parameters and activation peak, to the byte, as the full trace; and the writing rules on logs made by hand."""

import pytest

from helpers import vllm_profile, vllm_written
from helpers.hf_config import load_config
from helpers.teaching.vllm_logs import LLAMA_33_70B
from helpers.vllm_rules import splits
from helpers.vllm_written import EDGE, NotRepeated, TracedRun, applies, peak_of, template, write_deltas, written_run

LLAMA, QWEN, SMOL = "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "HuggingFaceTB/SmolLM2-135M"


def _forbid_full_trace(monkeypatch):
    """Make profile_run fail if it falls back to the full trace: what it returns was written."""
    def full(*args, **kwargs):
        raise AssertionError("profile_run traced the run in full")
    monkeypatch.setattr(vllm_profile, "traced_profile_run", full)


# (model, tensor_parallel_size, pipeline_parallel_size, dtype, (quantization, double_quant), tokens, num_reqs,
#  num_sm, v0): the shipped 8B and 7B models, a tied head (SmolLM2), 4-bit (NF4, GPTQ/AWQ's int4), 8-bit (int8) and
#  fp8 weights, V0's run, a small card's budget, fewer than 8 requests (the sampler's sort), an A6000's 84 SMs, the 70B
#  config of lesson 10.  FAST: the benchmark's setup and a tied head over two stages; the rest in the slow group.
FAST = {
    "llama-8b-tp2": (LLAMA, 2, 1, "bfloat16", ("none", False), 8192, 1024, 132, False),
    "smol-tied-pp2": (SMOL, 1, 2, "bfloat16", ("none", False), 2048, 256, 132, False),
}
EVERY = {
    "llama-8b": (LLAMA, 1, 1, "bfloat16", ("none", False), 8192, 1024, 132, False),
    "llama-8b-tp4": (LLAMA, 4, 1, "bfloat16", ("none", False), 8192, 1024, 132, False),
    "llama-8b-pp2": (LLAMA, 1, 2, "bfloat16", ("none", False), 8192, 1024, 132, False),
    "llama-8b-tp2-pp2": (LLAMA, 2, 2, "bfloat16", ("none", False), 2048, 256, 132, False),
    "llama-8b-fp8": (LLAMA, 1, 1, "bfloat16", ("fp8", False), 8192, 1024, 132, False),
    "llama-8b-int4-84sm": (LLAMA, 1, 1, "float16", ("int4", False), 2048, 256, 84, False),
    "llama-8b-nf4": (LLAMA, 1, 1, "bfloat16", ("nf4", True), 2048, 256, 128, False),
    "llama-8b-int8": (LLAMA, 1, 1, "bfloat16", ("int8", False), 2048, 256, 128, False),
    "llama-8b-v0": (LLAMA, 1, 1, "bfloat16", ("none", False), 8192, 256, 132, True),
    "qwen-7b": (QWEN, 1, 1, "bfloat16", ("none", False), 8192, 1024, 132, False),
    "qwen-7b-tp2": (QWEN, 2, 1, "bfloat16", ("none", False), 8192, 1024, 132, False),
    "qwen-7b-tp4-float32": (QWEN, 4, 1, "float32", ("none", False), 2048, 4, 132, False),
    "smol-tied": (SMOL, 1, 1, "bfloat16", ("none", False), 2048, 256, 132, False),
    "llama-70b-tp4": (LLAMA_33_70B, 4, 1, "bfloat16", ("none", False), 8192, 1024, 132, False),
}


def _written_equals_full(case: tuple, monkeypatch) -> None:
    """Every rank's figures of ``case`` written (never traced in full) equal its full trace's, to the byte."""
    model, tp, pp, dtype, weights_format, tokens, num_reqs, num_sm, v0 = case
    label = model if isinstance(model, str) else "Llama-3.3-70B"
    for split in splits(load_config(model).get_text_config(), tp, pp):
        split = None if tp * pp == 1 else split
        args = (model, label, dtype, weights_format, tokens, num_reqs, num_sm, split, v0)
        full = vllm_profile.traced_profile_run(*args)
        with monkeypatch.context() as m:
            _forbid_full_trace(m)
            written = vllm_profile.profile_run(*args)
        assert written == full, (case, split)
        assert all(figure > 0 for figure in written)


@pytest.mark.parametrize("case", FAST, ids=list(FAST))
def test_the_written_run_equals_its_full_trace_to_the_byte(case, monkeypatch):
    _written_equals_full(FAST[case], monkeypatch)


@pytest.mark.parametrize("case", EVERY, ids=list(EVERY))
def test_every_setup_written_equals_its_full_trace_to_the_byte(case, monkeypatch):
    _written_equals_full(EVERY[case], monkeypatch)


def test_a_rank_of_few_layers_is_traced_in_full(monkeypatch):
    split = splits(load_config(LLAMA).get_text_config(), 1, 4)[0]  # 8 layers a stage
    assert applies(8, None) == f"below {vllm_written.MIN_LAYERS} layers, two shallow traces cost as much"
    assert applies(32, "its layer_types differ from layer to layer") == "its layer_types differ from layer to layer"
    assert applies(32, None) is None
    _forbid_full_trace(monkeypatch)
    with pytest.raises(AssertionError, match="traced the run in full"):
        vllm_profile.profile_run(LLAMA, LLAMA, "bfloat16", ("none", False), 2048, 256, 132, split)


def test_shallow_runs_that_do_not_repeat_are_traced_in_full(monkeypatch):
    """The full trace profile_run falls back to is made once, inside profile_run, and recorded as it returns: the
    same arguments, its answer returned as it is (a second full trace of the same run, made beside it to compare,
    would repeat this one to the byte: traced_profile_run is a deterministic function of its arguments)."""
    def not_repeated(*args):
        raise NotRepeated("two middle layers differ")
    traced, full = vllm_profile.traced_profile_run, []

    def recorded(*args):
        full.append((args, traced(*args)))
        return full[-1][1]
    args = (SMOL, SMOL, "bfloat16", ("none", False), 512, 8, 132)
    monkeypatch.setattr(vllm_written, "written_run", not_repeated)
    monkeypatch.setattr(vllm_profile, "traced_profile_run", recorded)
    answer = vllm_profile.profile_run(*args)
    assert [called for called, _ in full] == [(*args, None, False)]  # once, for the run asked (one card, V1)
    assert answer is full[0][1] and all(figure > 0 for figure in answer)


# -- the rules on logs made by hand -------------------------------------------------------------------------------
def test_the_peak_is_the_highest_running_sum():
    assert peak_of([("alloc", 512), ("alloc", 1024), ("free", -512), ("alloc", 1024), ("free", -2048)]) == 2048
    assert peak_of([]) == 0 and peak_of([("free", -512)]) == 0
    assert peak_of([("alloc", 512), ("resize", -512), ("resize", 1536)]) == 1536


def _run(depth: int, *, grow: int = 0, odd_middle: bool = False, after: tuple = (("free", -100),)) -> TracedRun:
    """A made-up run of ``depth`` layers: 100 bytes before; each layer allocates 300 (and keeps ``grow`` of them),
    the first frees nothing before it, the others free their input (100); the last's input is freed after it."""
    deltas, starts, ends = [("alloc", 100)], [], []
    for i in range(depth):
        starts.append(len(deltas))
        deltas += [("alloc", 300), ("alloc", 100)]
        deltas += [("free", -300 + grow)] if not (odd_middle and i == 2) else [("free", -200)]
        ends.append(len(deltas))
        if 0 < i < depth - 1:
            deltas.append(("free", -100))
    deltas += [("free", -100), *after]
    return TracedRun(depth, tuple(deltas), tuple(starts), tuple(ends), 10 + 7 * depth, 1000 + 512 * depth,
                     peak_of(deltas))


def test_a_run_written_at_depth_as_traced_at_that_depth():
    low, high = (_run(d, grow=64) for d in vllm_written.DEPTHS)
    for layers in (5, 12, 80):
        assert write_deltas(template(low, high), layers) == list(_run(layers, grow=64).deltas)
        assert written_run(low, high, layers) == (10 + 7 * layers, 1000 + 512 * layers,
                                                  _run(layers, grow=64).peak)
    # the peak grows with the layers: at the last layer's output, the embedding's output (100), the last layer's input
    # (100), the 64 bytes each layer before it kept, and the last layer's 300 + 100
    assert written_run(low, high, 80)[2] == 100 + 100 + 79 * 64 + 400


def test_runs_that_do_not_repeat_are_refused():
    low, high = (_run(d) for d in vllm_written.DEPTHS)
    with pytest.raises(NotRepeated, match="two middle layers differ"):
        template(low, _run(high.depth, odd_middle=True))
    with pytest.raises(NotRepeated, match="before or after the layers"):
        template(low, _run(high.depth, after=(("free", -100), ("alloc", 512))))
    with pytest.raises(NotRepeated, match="did not each run once"):
        template(low, TracedRun(high.depth, high.deltas, high.starts[:-1], high.ends, 0, 0, 0))
    with pytest.raises(NotRepeated, match="two depths"):
        template(low, low)
    with pytest.raises(NotRepeated, match="does not write the 4-layer run again"):  # its traced peak is not its log's
        written_run(low, TracedRun(*[getattr(high, f) for f in ("depth", "deltas", "starts", "ends", "parameters",
                                                                "weights")], high.peak + 512), 32)
    assert EDGE == 1 and vllm_written.DEPTHS == (3, 4)


def test_the_first_quantized_run_of_a_process_counts_what_the_next_ones_do():
    """bitsandbytes and peft make tensors as they are imported; imported first inside a traced run (a fresh process's
    first NF4 weights), they were counted as that run's (2 KiB more weights), which writing from shallow runs would
    multiply by the layers.  They are imported outside the step's dispatch modes (helpers.techniques.bnb)."""
    import subprocess
    import sys

    code = ("import sys; assert 'bitsandbytes' not in sys.modules and 'peft' not in sys.modules\n"
            "from helpers.vllm_profile import traced_profile_run\n"
            f"args = ({SMOL!r}, {SMOL!r}, 'bfloat16', ('nf4', True), 64, 1, 132)\n"
            "first, second = traced_profile_run(*args), traced_profile_run(*args)\n"
            "assert first == second, (first, second)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
