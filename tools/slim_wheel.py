"""A wheel without the shared libraries a GPU machine does not load: ``python tools/slim_wheel.py WHEEL KEEP...``.

bitsandbytes' wheel holds one library per CUDA and ROCm version (43 MB for 0.50.2), and the ``device`` tool carries
at most 64 MiB of a working tree to a GPU machine (README.md, "Recording real-GPU figures").  This rewrites ``WHEEL``
in place with only the ``.so`` files whose names contain one of ``KEEP`` (``cuda130 _cpu``: the CUDA 13.0 library and
the CPU one), and drops the others' lines from the wheel's ``RECORD``, so that pip installs it as it is.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def slim(wheel: Path, keep: list[str]) -> list[str]:
    """Rewrite ``wheel`` without the ``.so`` members that name none of ``keep``; return the names dropped.

    Raises:
        ValueError: if ``keep`` would keep no ``.so`` file at all (a wrong version named).
    """
    with zipfile.ZipFile(wheel) as old:
        members = old.infolist()
        libraries = [m.filename for m in members if m.filename.endswith(".so")]
        dropped = [name for name in libraries if not any(k in name for k in keep)]
        if libraries and len(dropped) == len(libraries):
            raise ValueError(f"{wheel.name}: no library names any of {keep}: {', '.join(libraries)}")
        contents = {m.filename: old.read(m) for m in members if m.filename not in dropped}
    gone = set(dropped)
    for name in contents:
        if name.endswith(".dist-info/RECORD"):
            lines = contents[name].decode().splitlines()
            contents[name] = ("\n".join(line for line in lines if line.split(",")[0] not in gone) + "\n").encode()
    slimmed = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED) as new:
        for name, data in contents.items():
            new.writestr(name, data)
    slimmed.replace(wheel)
    return dropped


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python tools/slim_wheel.py WHEEL KEEP...")
    path = Path(sys.argv[1])
    before = path.stat().st_size
    names = slim(path, sys.argv[2:])
    print(f"{path.name}: {len(names)} libraries dropped, {before / 2**20:.1f} -> {path.stat().st_size / 2**20:.1f} MiB")
