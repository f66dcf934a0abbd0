"""A non-editable install carries every module of helpers and its data, not only the top package."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_module_and_the_shipped_configs(tmp_path):
    source = tmp_path / "source"  # a copy: setuptools would reuse a build/ folder of the checkout
    shutil.copytree(ROOT / "helpers", source / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(source)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    packed = set(zipfile.ZipFile(wheel).namelist())
    wanted = {p.relative_to(ROOT).as_posix() for p in (ROOT / "helpers").rglob("*")
              if p.suffix in (".py", ".json") and "__pycache__" not in p.parts}
    assert wanted and wanted <= packed, sorted(wanted - packed)
