"""The pinned versions that the code, its docstrings and the lessons cite, stated once.

A docstring says "the pinned PyTorch" and means :data:`TORCH`; a lesson that names a version names one of these.
``requirements.txt`` is the install's truth; ``tests/test_versions.py`` fails when this module disagrees with it, and
when a lesson, ``docs/`` or ``README.md`` cites a version of these packages that is neither the pin nor a listed
historical citation.
"""

from __future__ import annotations

#: Distribution name (as in ``requirements.txt``) -> pinned version.
PINS = {
    "torch": "2.14.1",
    "torchvision": "0.29.1",
    "transformers": "5.23.0",
    "peft": "0.21.2",
    "accelerate": "1.15.0",
    "torchao": "0.18.0",
    "bitsandbytes": "0.50.2",
    "scikit-learn": "1.9.1",
    "matplotlib": "3.11.2",
    "ipywidgets": "8.1.9",
    "jupyterlab": "4.6.6",
    "nbval": "0.11.0",
}

TORCH = PINS["torch"]
TORCHVISION = PINS["torchvision"]
TRANSFORMERS = PINS["transformers"]
PEFT = PINS["peft"]
TORCHAO = PINS["torchao"]
BITSANDBYTES = PINS["bitsandbytes"]
