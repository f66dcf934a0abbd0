"""Pre-flight check for a workshop: ``python -m helpers check``.

Prints the versions of what the lessons use (against :data:`helpers.versions.PINS`; the Hugging Face and
quantization libraries with the lessons that need them, :data:`LESSON_PACKAGES`), the device and its memory, the
backend, and whether ResNet18 at batch 128 fits (one steady-state step, measured on a GPU; simulated otherwise, and
judged on each card by :func:`helpers.batch.card_verdicts`). Exit status 0 when the lessons will run, 1 when the
environment is broken, each problem printed with its fix; a version that differs from the pin is only a warning.
"""

from __future__ import annotations

import importlib
import platform
import sys

from .errors import first_line
from .versions import PINS

#: Packages the lessons import, with the fix to print when one fails to import.
PACKAGES = {
    "torch": f"pip install torch=={PINS['torch']} (or: make setup)",
    "torchvision": f"pip install torch=={PINS['torch']} torchvision=={PINS['torchvision']}: the two must be "
                   "a matching pair (a torchvision built for another torch fails on 'torchvision::nms')",
    "matplotlib": "pip install -r requirements.txt",
    "sklearn": f"pip install scikit-learn=={PINS['scikit-learn']}",
    "ipywidgets": f"pip install ipywidgets=={PINS['ipywidgets']}",
    "jupyterlab": f"pip install jupyterlab=={PINS['jupyterlab']}",
    "nbval": f"pip install nbval=={PINS['nbval']} (needed by the tests only)",
}
#: The Hugging Face and quantization libraries, with the lessons that need them (lessons 00 to 08 do not): 06b
#: simulates lesson 09's LoRA step beside its snapshot, 09 and 09b fine-tune with LoRA and QLoRA, 10 and 10b build the
#: served models.
#: Each is checked as :data:`PACKAGES` are; its fix names the lessons.
LESSON_PACKAGES = {
    "transformers": ("lessons 06b, 09, 09b, 10 and 10b", "Hugging Face models built from their configs"),
    "peft": ("lessons 06b, 09 and 09b", "LoRA adapters"),
    "accelerate": ("lessons 06b, 09 and 09b", "peft imports it"),
    "torchao": ("lessons 09 and 09b", "its 8-bit AdamW and NF4 weights"),
    "bitsandbytes": ("lessons 09, 09b and 10", "4-bit and 8-bit weights, paged optimizers"),
}
PACKAGES.update({name: f"pip install {name}=={PINS[name]} ({lessons} need it; the others run without it)"
                 for name, (lessons, _) in LESSON_PACKAGES.items()})
#: Import name -> distribution name in requirements.txt.
_DIST = {"sklearn": "scikit-learn"}


def _try_import(name: str):
    try:
        return importlib.import_module(name)
    except Exception as e:  # any failure to import is what we diagnose
        return e


def run_check(out=print) -> int:
    """Print the pre-flight report, each line through ``out``; return the exit status (0 ready, 1 broken)."""
    problems: list[str] = []
    warnings: list[str] = []
    out('Pre-flight check for "Where does my GPU memory go?"')
    out(f"  {'python':<12} {platform.python_version()} ({sys.executable})")
    modules = {}
    for name, fix in PACKAGES.items():
        module = _try_import(name)
        if isinstance(module, Exception):
            out(f"  {name:<12} BROKEN: {type(module).__name__}: {first_line(module)}")
            problems.append(f"{name} does not import. Fix: {fix}")
            continue
        modules[name] = module
        version = getattr(module, "__version__", "?")
        pin = PINS.get(_DIST.get(name, name))
        note = ""
        if pin and version.split("+")[0] != pin:
            note = f"  (requirements.txt pins {pin})"
            warnings.append(f"{name} {version} is not the pinned {pin}: the lessons run, "
                            f"but stored outputs may differ. Fix: pip install -r requirements.txt")
        out(f"  {name:<12} {version}{note}" + (f"  for {': '.join(LESSON_PACKAGES[name])}" if name in LESSON_PACKAGES else ""))

    if "torch" in modules:
        _device_report(modules["torch"], "torchvision" in modules, out, problems)

    for w in warnings:
        out(f"warning: {w}")
    for p in problems:
        out(f"problem: {p}")
    out("result: " + ("BROKEN, see the problems above" if problems else "ready for the lessons"))
    return 1 if problems else 0


def _device_report(torch, have_torchvision: bool, out, problems: list[str]) -> None:
    from .engine.backends import get_backend
    from .units import fmt_bytes, fmt_mib

    if torch.cuda.is_available():
        try:
            props = torch.cuda.get_device_properties(0)
            out(f"  {'device':<12} {props.name}, {fmt_bytes(props.total_memory, 'GiB')} "
                f"(CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s))")
        except Exception as e:  # a driver or device problem
            out(f"  {'device':<12} BROKEN: {e}")
            problems.append("PyTorch sees a GPU but cannot use it. Fix: check the NVIDIA driver "
                            "(nvidia-smi), or run the lessons without it: CUDA_VISIBLE_DEVICES= make lessons")
            return
    else:
        out(f"  {'device':<12} no GPU visible to PyTorch (CPU only)")
    runtime = get_backend("auto")
    meaning = ("real GPU counters" if runtime.measured
               else "fake tensors with a GPU's rules, on the CPU; see lesson 00")
    out(f"  {'backend':<12} {runtime.name} ({meaning})")
    if not have_torchvision:
        return
    from .batch import card_verdicts
    from .profile import DoesNotFit, profile_step

    try:  # a steady-state step, through optimizer.step(): what must fit (helpers.gpus.judge)
        step = profile_step("resnet18", 128, device=runtime.name, steady_state=True)
    except DoesNotFit as e:
        out(f"  {'ResNet18':<12} batch 128 does NOT fit on this GPU: {e.cuda_message}")
        return
    except Exception as e:  # the engine itself failing is a broken environment
        out(f"  {'ResNet18':<12} BROKEN: {type(e).__name__}: {first_line(e)}")
        problems.append("one ResNet18 training step failed. Fix: pip install -r requirements.txt "
                        "in a fresh environment (make setup)")
        return
    peak = step.peak_allocated_bytes
    if runtime.measured:
        out(f"  {'ResNet18':<12} batch 128 fits: peak {fmt_bytes(peak)} measured on this GPU")
    else:
        verdicts = card_verdicts(step)
        fit = [card + (" (tight)" if v.tight else "") for card, v in verdicts.items() if v.fits]
        first = next(iter(verdicts.values()))
        out(f"  {'ResNet18':<12} batch 128: whole-step peak {fmt_mib(peak)} simulated; fits "
            f"{', '.join(fit) or 'none of the listed GPUs'} ({first.judged})")
