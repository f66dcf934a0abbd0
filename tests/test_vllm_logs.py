"""helpers.teaching.vllm_logs: vLLM's published start-up logs, each consistent with itself, and the engine beside
them (issue 35's aim: the weights within 1%, the KV cache's tokens within 5% where the setup is fully stated; issue
53's: the activation peak within 10% and the tokens within 1% on the fully stated single-card logs, but float32's)."""

import math

import pytest

from helpers.formats import BY_FORMULA
from helpers.serving import kv_bytes_per_token
from helpers.teaching.vllm_logs import LOGS, engine_beside_logs
from helpers.units import GiB

#: The logs whose launch options are all stated or printed (llm-d-planner's v0.19.0 runs print their arguments).
FULLY_STATED = [log.name for log in LOGS if log.version.startswith("v0.19.0")]


@pytest.fixture(scope="module")
def rows():
    return {row.log.name: row for row in engine_beside_logs()}


@pytest.mark.parametrize("log", LOGS, ids=lambda log: log.name)
def test_each_log_adds_up_as_vllm_computes(log):
    """The logged figures obey vLLM's arithmetic (each rounded to 0.01 GiB as printed): total × utilization less
    weights, activation peak and non-torch memory is the KV cache; its tokens are its bytes over a token's bytes,
    whole blocks of 16; the concurrency is tokens over max_model_len."""
    logged, options = log.logged, log.options
    left = log.total_gib * options["gpu_memory_utilization"] - (
        logged["weights"] + logged["activation"] + logged["non_torch"])
    assert logged["kv"] == pytest.approx(left, abs=0.025)
    per_token = kv_bytes_per_token(log.model, options.get("dtype", "bfloat16"), options.get("kv_cache_dtype", "auto"))
    tokens = logged.get("tokens", 16 * logged.get("blocks", 0))
    if tokens:
        assert tokens % 16 == 0 and tokens * per_token / GiB == pytest.approx(max(logged["kv"], 0), abs=0.01)
    if "concurrency" in logged and tokens:
        assert logged["concurrency"] == pytest.approx(tokens / options["max_model_len"], abs=0.006)
    if "tokens" in logged or "blocks" in logged:
        assert log.refused == (tokens < options["max_model_len"])


@pytest.mark.slow
def test_the_engine_beside_the_logs(rows):
    for name, row in rows.items():
        engine, logged = row.engine(), row.log.logged
        # by formula (fp8, 4-bit GPTQ), vLLM's kernels may keep a little more (Marlin's workspace): 1.5%
        formula = row.log.options.get("quantization") in BY_FORMULA
        assert engine["weights"] == pytest.approx(logged["weights"], rel=0.015 if formula else 0.01), name
        assert (row.refusal is not None) == row.log.refused, name
    for name in FULLY_STATED:
        engine, logged = rows[name].engine(), rows[name].log.logged
        # v0.19.0's sampler pass over 1,024 requests sets the peak (three float32 [1024, vocab] tensors and the Triton
        # buffer): within 3%, and the tokens within 0.2%.  In float32 there is no float32 copy of the logits, and the
        # forward pass sets the peak: 18% under the logged one (as on its first pipeline stage, 0.91 GiB against 1.10,
        # tests/test_vllm_parallel.py; what was checked: helpers.teaching.vllm_logs): the tokens within 1.1%
        forward_bound = rows[name].log.options.get("dtype") == "float32"
        assert engine["activation"] == pytest.approx(logged["activation"], rel=0.18 if forward_bound else 0.03), name
        assert engine["activation"] < logged["activation"], name
        assert engine["tokens"] == pytest.approx(logged["tokens"], rel=0.011 if forward_bound else 0.002), name
        assert engine["concurrency"] == pytest.approx(logged["concurrency"], rel=0.011 if forward_bound else 0.002), \
            name
    for name in ("Llama-3.1-8B, RTX 3090, 20,000 tokens", "Llama-3.1-8B, RTX 3090, 29,000 tokens"):
        engine, logged = rows[name].engine(), rows[name].log.logged
        assert engine["activation"] == pytest.approx(logged["activation"], rel=0.1), name
        assert engine["blocks"] == pytest.approx(logged["blocks"], rel=0.07), name


def test_ten_logs_each_with_its_source_version_card_and_command():
    assert len(LOGS) >= 10 and len({log.name for log in LOGS}) == len(LOGS)
    for log in LOGS:
        assert log.url.startswith("https://github.com/") and log.version and log.gpu and log.command
        assert math.isfinite(log.total_gib) and {"weights", "activation", "non_torch", "kv"} <= set(log.logged)
