"""CPU seconds of a step traced once with symbolic batch and sequence (:mod:`helpers.symbolic`) and evaluated at new
points, beside today's concrete ``profile_step``, printed as issue 50's table of targets.

For each configuration of :data:`CONFIGURATIONS`: the concrete step at the first point (traced, or written from
shallow traces by :mod:`helpers.depth`), the symbolic trace once, the first evaluation (which compiles the log's
expressions into one function and checks it against sympy's substitution) and the evaluation at each further point
(:meth:`helpers.symbolic.SymbolicStep.evaluate`), each checked to equal a concrete trace in every field
(:func:`helpers.evaluated.differs`).  For the 8B steps also what the fine-tuning widget asks: ``profile_step`` at a new
point once the log is kept (a batch or sequence change), and the largest batch at 2,048 tokens on an A100 80 GB
(:func:`helpers.batch.largest_fit`, its answer and the batch beyond confirmed by concrete traces), each beside the same
question answered concretely, as before this issue.  Also the log kept on disk and read back
(:mod:`helpers.symbolic_store`, "load s"), what a later process pays instead of the symbolic trace; no other log on
disk is read (``$GPU_MEMORY_SYMBOLIC_CACHE`` is set to ``off``).  CPU time (``time.process_time``), which a loaded machine inflates
less than wall time.  The first configuration also pays the imports.  Lesson 09's run, the command line's cold answer
and ``make test`` are rows of the issue's table that this script does not measure.

Run ``python benchmarks/symbolic_step.py [--only NAME]``.
"""

import argparse
import contextlib
import os
import tempfile
import time

_8B = "meta-llama/Llama-3.1-8B"
_STEADY = dict(amp=True, amp_dtype="bfloat16", lora_rank=16, lora_targets=("q_proj", "v_proj"), checkpoint=1,
               steady_state=True)
#: name -> (model, options, points (batch, sequence or None)).
CONFIGURATIONS = {
    "ResNet18 by batch": ("resnet18", {}, [(32, None), (8, None), (100, None), (7, None)]),
    "GPT-2, batch and sequence": ("gpt2", {}, [(4, 256), (2, 1000), (8, 128), (3, 77)]),
    "8B LoRA, steady state, checkpointing": (_8B, dict(_STEADY, param_dtype="bfloat16"),
                                             [(2, 2048), (2, 1000), (4, 4096), (3, 8192)]),
    "8B QLoRA (NF4), steady state, checkpointing": (_8B, dict(_STEADY, quantization="nf4", param_dtype="bfloat16"),
                                                    [(2, 2048), (2, 1000), (4, 4096), (3, 8192)]),
}
#: Issue 50's targets: seconds for a new point of an 8B step; the symbolic trace over the concrete one; the widget's
#: change and search, in seconds.
MAX_POINT_S, MAX_TRACE_RATIO, MAX_CHANGE_S, MAX_SEARCH_S = 0.2, 2.0, 0.3, 1.0
SEARCH_CARD = "A100 80 GB"


def _cpu(call):
    start = time.process_time()
    result = call()
    return result, time.process_time() - start


@contextlib.contextmanager
def _concrete_only():
    """``profile_step`` as before this issue: every answer written or traced (:func:`helpers.evaluated.answer` made to
    give none, and :func:`helpers.evaluated.remember` to keep nothing), for today's figures."""
    from helpers import evaluated

    answer, remember = evaluated.answer, evaluated.remember
    evaluated.answer = lambda config, spec, many=False, new_traces=True: None
    evaluated.remember = lambda config, profile: profile
    try:
        yield
    finally:
        evaluated.answer, evaluated.remember = answer, remember


def _widget(config) -> dict:
    """What the fine-tuning widget asks of one 8B step, today and with symbolic logs: a new batch (3 at 3,000 tokens),
    and the largest batch at 2,048 tokens (CPU seconds, and the answer, which must agree)."""
    from helpers.batch import Estimate, largest_fit
    from helpers.gpus import GPU_CARDS
    from helpers.profile import forget_kept, many_points, obtain_concrete, profile_step

    def search():
        at = lambda b: Estimate.of(profile_step(config(b, 2048)))  # noqa: E731
        confirm = lambda b: Estimate.of(obtain_concrete(config(b, 2048)))  # noqa: E731
        return largest_fit(at, 1, 64, GPU_CARDS[SEARCH_CARD], SEARCH_CARD, start=2, confirm_at=confirm)[0]

    out = {}
    forget_kept()
    with many_points():  # the first concrete; the second keeps the log (helpers.evaluated.AT_POINT_WHEN_MANY)
        profile_step(config(2, 2048)), profile_step(config(2, 1000))
        change, out["change_s"] = _cpu(lambda: profile_step(config(3, 3000)))
    out["largest"], out["search_s"] = _cpu(search)
    with _concrete_only():
        forget_kept()
        today, out["today_change_s"] = _cpu(lambda: profile_step(config(3, 3000)))
        forget_kept()
        out["today_largest"], out["today_search_s"] = _cpu(search)
    assert change.peak_allocated_bytes == today.peak_allocated_bytes and out["largest"] == out["today_largest"]
    forget_kept()
    return out


def measure(name: str) -> dict:
    """Time one configuration: the concrete step, the symbolic trace, its first evaluation and each further point."""
    from helpers import symbolic, symbolic_store
    from helpers.config import StepConfig
    from helpers.evaluated import differs
    from helpers.profile import forget_kept, obtain_concrete

    model, options, points = CONFIGURATIONS[name]

    def config(b, s):
        return StepConfig(model=model, batch_size=b, device="simulated", **options,
                          **({} if s is None else {"seq_len": s}))

    forget_kept()
    concrete, concrete_s = _cpu(lambda: obtain_concrete(config(*points[0])))
    step, trace_s = _cpu(lambda: symbolic.trace(config(*points[0])))
    first, first_s = _cpu(lambda: step.evaluate(config(*points[0])))
    with tempfile.TemporaryDirectory() as logs:  # the log kept on disk (helpers.symbolic_store), then read back
        os.environ["GPU_MEMORY_SYMBOLIC_CACHE"] = logs
        assert symbolic_store.save(step.config, [step])
        (loaded,), load_s = _cpu(lambda: symbolic_store.load(step.config, step.spec))
        os.environ["GPU_MEMORY_SYMBOLIC_CACHE"] = "off"
    assert differs(loaded.evaluate(config(*points[0])), concrete) is None
    assert differs(first, concrete) is None, differs(first, concrete)
    per_point = []
    for b, s in points[1:]:
        evaluated, seconds = _cpu(lambda: step.evaluate(config(b, s)))
        per_point.append(seconds)
        assert differs(evaluated, obtain_concrete(config(b, s))) is None, (b, s)
    result = {"name": name, "concrete_s": concrete_s, "trace_s": trace_s, "first_s": first_s, "load_s": load_s,
              "point_s": max(per_point), "guards": step.guards_named(), "how": step.how}
    if model == _8B:
        result.update(_widget(config))
    return result


def main() -> None:
    os.environ["GPU_MEMORY_SYMBOLIC_CACHE"] = "off"  # no log on disk but the ones measured: today's figures cold
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(CONFIGURATIONS), help="one configuration")
    args = parser.parse_args()
    names = [args.only] if args.only else list(CONFIGURATIONS)
    print(f"load average before: {_load()}")
    print(f"{'configuration':<46} {'concrete s':>10} {'symbolic trace s':>16} {'ratio':>6} {'1st eval s':>10} "
          f"{'new point s':>11} {'load s':>7}")
    results = []
    for name in names:
        r = measure(name)
        results.append(r)
        print(f"{name:<46} {r['concrete_s']:>10.2f} {r['trace_s']:>16.2f} {r['trace_s'] / r['concrete_s']:>6.1f} "
              f"{r['first_s']:>10.3f} {r['point_s']:>11.3f} {r['load_s']:>7.2f}  guards {r['guards'] or 'none'}")
    big = [r for r in results if "change_s" in r]
    ratio = max(r["trace_s"] / r["concrete_s"] for r in results)
    rows = [("the symbolic trace of a configuration, once (worst ratio)", f"<= {MAX_TRACE_RATIO}x its concrete",
             "-", f"{ratio:.1f}x")]
    if big:
        rows[:0] = [("a new (B, S), 8B LoRA/QLoRA steady step, log kept", f"<= {MAX_POINT_S} s",
                     f"{max(r['concrete_s'] for r in big):.2f} s", f"{max(r['point_s'] for r in big):.2f} s")]
        rows += [("fine-tuning widget: a batch or sequence change", f"<= {MAX_CHANGE_S} s",
                  f"{max(r['today_change_s'] for r in big):.2f} s", f"{max(r['change_s'] for r in big):.2f} s"),
                 (f"fine-tuning widget: largest batch at 2,048 tokens ({SEARCH_CARD})", f"<= {MAX_SEARCH_S} s",
                  f"{max(r['today_search_s'] for r in big):.2f} s", f"{max(r['search_s'] for r in big):.2f} s")]
    rows += [(what, target, "not measured here", "not measured here") for what, target in (
        ("lesson 09 run top to bottom", "<= 45 s"), ("the command line's cold answer, a shipped 8B config", "<= 3 s"),
        ("make test", "<= 10 min"))]
    print(f"\nissue 50's targets (CPU seconds on this machine):\n{'':<4}{'':<56} {'target':>18} {'today':>18} "
          f"{'symbolic':>18}")
    for what, target, today, now in rows:
        print(f"{'':<4}{what:<56} {target:>18} {today:>18} {now:>18}")
    print(f"load average after: {_load()}")


def _load() -> str:
    """The 1, 5 and 15 minute load averages (``/proc/loadavg``; the machine is shared), or why not."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError as e:
        return f"unknown ({e.strerror})"


if __name__ == "__main__":
    main()
