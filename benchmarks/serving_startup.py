"""Wall time of vLLM's start-up account (helpers.serving.vllm_startup) of an 8B model at 8,192 tokens.

Prints the time of the first account (transformers imported, the model built and traced), then the median of
several more, each obtained anew (the kept runs forgotten first: the profile run written from its 3- and 4-layer
traces, :mod:`helpers.vllm_written`, where it applies), the same traced in full (``helpers.vllm_written.MIN_LAYERS``
set above the layers: the route before issue 53's target), each in wall seconds and in the process's CPU seconds (what
other processes on a shared machine change least), the account itself, and the process's peak RSS.  Targets: an 8B
account at 8,192 tokens in at most 2 s when warm, on a 2-core CPU, in under 3 GiB.  Run with
``python benchmarks/serving_startup.py [--runs N] [--model NAME] [--tokens N] [--tp N] [--pp N]``: with ``--tp`` or
``--pp`` the account of one rank over several GPUs (issue 53's target: at most 1 s warm for an 8B at ``--tp 2``).
Read ``/proc/loadavg`` beside it: wall times on a loaded machine are longer.
"""

import argparse
import resource
import statistics
import time

import torch

from helpers import profile, serving, vllm_written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B")
    parser.add_argument("--tokens", type=int, default=8192, help="max_num_batched_tokens of the profile run")
    parser.add_argument("--tp", type=int, default=1, help="tensor_parallel_size")
    parser.add_argument("--pp", type=int, default=1, help="pipeline_parallel_size")
    args = parser.parse_args()

    def account():
        return serving.vllm_startup(args.model, max_model_len=8192, max_num_batched_tokens=args.tokens,
                                    tensor_parallel_size=args.tp, pipeline_parallel_size=args.pp)

    def anew() -> tuple[list[float], list[float], serving.StartupAccount]:
        """Wall and CPU seconds of ``args.runs`` new accounts (the kept runs forgotten before each), and the last."""
        walls, cpus = [], []
        for _ in range(args.runs):
            profile.forget_kept()  # obtain it again: the time of a new account, not of a kept one
            wall, cpu = time.perf_counter(), time.process_time()
            again = account()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        return walls, cpus, again

    start = time.perf_counter()
    result = account()
    first = time.perf_counter() - start
    walls, cpus, written = anew()
    start = time.perf_counter()
    account()
    kept = time.perf_counter() - start
    minimum, vllm_written.MIN_LAYERS = vllm_written.MIN_LAYERS, 10**9
    full_walls, full_cpus, full = anew()
    vllm_written.MIN_LAYERS = minimum
    assert (written.weights_bytes, written.activation_peak_bytes) == (full.weights_bytes, full.activation_peak_bytes)

    def summary(what: str, walls: list[float], cpus: list[float]) -> str:
        return (f"{what}, over {args.runs} runs: median {statistics.median(walls):.3f} s (min {min(walls):.3f}, "
                f"max {max(walls):.3f}); CPU median {statistics.median(cpus):.3f} s")

    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print("\n".join(result.lines()))
    print(f"first account (imports, build, trace): {first:.2f} s")
    print(summary("warm, a new account (profile run written where it applies)", walls, cpus))
    print(summary("warm, a new account traced in full", full_walls, full_cpus) + " (the same bytes: asserted)")
    print(f"warm, the same account again (its profile run kept): {kept * 1000:.1f} ms")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(f"peak RSS of the process: {rss / 2**30:.2f} GiB (target: under 3 GiB)")


if __name__ == "__main__":
    main()
