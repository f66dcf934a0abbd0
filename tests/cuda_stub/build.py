"""Compile the stub driver (``cuda_stub.c``) and run scripts with it preloaded (issue 23).

Shared by the tests that use PyTorch's own CUDA code as an oracle
(``tests/test_allocator_oracle.py``: the caching allocator;
``tests/test_whole_step_reference.py``: a whole training step through CUDA's
dispatch) through the session fixture ``cuda_stub`` in ``tests/conftest.py``,
so that one pytest session compiles the stub once.  Also usable outside pytest
(``benchmarks/whole_step_reference.py``): :func:`build` returns ``None`` and
the reason where the stub cannot be built.

The stub is compiled with the system ``cc`` into a directory as
``libcuda.so.1`` (and ``libnvidia-ml.so.1``, the same file), beside the cuBLAS
stub ``libcublas_stub.so`` (``cublas_stub.c``), and both are loaded with
``LD_PRELOAD`` in a subprocess only (:func:`stub_env`), never in the process
that compiles it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

STUB = Path(__file__).parent


def cuda_includes() -> list[Path] | None:
    """Directories with ``cuda.h``/``cuda_runtime_api.h`` and ``crt/host_defines.h``.

    The pinned wheel's packages ship them: ``nvidia/cu13/include`` (without
    ``crt/``) and triton's ``backends/nvidia/include`` (with it).
    """
    import torch

    site = Path(torch.__file__).resolve().parents[1]
    candidates = sorted(site.glob("nvidia/*/include")) + [site / "triton/backends/nvidia/include",
                                                          Path("/usr/local/cuda/include")]
    api = next((d for d in candidates if (d / "cuda.h").is_file() and (d / "cuda_runtime_api.h").is_file()), None)
    crt = next((d for d in candidates if (d / "crt" / "host_defines.h").is_file()), None)
    return None if api is None or crt is None else [api, crt]


def why_not() -> str | None:
    """Why the stub cannot be built and used here (one line), or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the stub driver needs Linux's LD_PRELOAD (this is {sys.platform})"
    if shutil.which("cc") is None:
        return "no C compiler (cc) to build the stub driver"
    import torch

    if torch.version.cuda is None:
        return "a CPU-only torch wheel: it has no CUDA code to test against"
    if cuda_includes() is None:
        return "no CUDA headers (cuda.h, crt/host_defines.h) in the wheel's packages"
    return None


def build(out: Path) -> Path:
    """Compile the stub into the directory ``out``; return ``out``.

    Raises:
        RuntimeError: if it cannot be built here (:func:`why_not`) or does not compile.
    """
    reason = why_not()
    if reason is not None:
        raise RuntimeError(reason)
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([shutil.which("cc"), "-O1", "-shared", "-fPIC", "-w", "-Wl,-soname,libcuda.so.1",
                           *(f"-I{d}" for d in cuda_includes()), "-o", str(out / "libcuda.so.1"),
                           str(STUB / "cuda_stub.c")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the stub driver did not compile:\n{done.stderr[-2000:]}")
    done = subprocess.run([shutil.which("cc"), "-O1", "-shared", "-fPIC", "-w", "-o", str(out / "libcublas_stub.so"),
                           str(STUB / "cublas_stub.c")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the cuBLAS stub did not compile:\n{done.stderr[-2000:]}")
    link = out / "libnvidia-ml.so.1"
    if not link.exists():
        link.symlink_to("libcuda.so.1")
    return out


def stub_env(stub: Path, **extra: str) -> dict[str, str]:
    """The environment of a subprocess that runs with the stub in ``stub`` preloaded.

    ``extra`` adds variables (``STUB_CUDA_CAPACITY``, ``PYTORCH_CUDA_ALLOC_CONF``, ...).
    ``PYTORCH_ALLOC_CONF`` of this process is dropped, so that it cannot change the run.
    """
    env = dict(os.environ, LD_PRELOAD=f"{stub / 'libcuda.so.1'} {stub / 'libcublas_stub.so'}",
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(stub), os.environ.get("LD_LIBRARY_PATH")])),
               OMP_NUM_THREADS="1", **extra)
    env.pop("PYTORCH_ALLOC_CONF", None)
    return env
