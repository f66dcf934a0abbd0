"""tools/slim_wheel.py: bitsandbytes' wheel cut to the libraries a GPU machine loads (make gpu-wheels)."""

import importlib.util
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("slim_wheel", ROOT / "tools" / "slim_wheel.py")
slim_wheel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slim_wheel)

LIBRARIES = ["pkg/libpkg_cpu.so", "pkg/libpkg_cuda128.so", "pkg/libpkg_cuda130.so", "pkg/libpkg_rocm70.so"]


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("pkg/__init__.py", "")
        for name in LIBRARIES:
            wheel.writestr(name, b"\0" * 1000)
        record = [f"{name},sha256=x,1000" for name in ["pkg/__init__.py", *LIBRARIES]] + ["pkg-1.0.dist-info/RECORD,,"]
        wheel.writestr("pkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_only_the_named_libraries_stay_in_the_wheel_and_its_record(tmp_path):
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    assert slim_wheel.slim(wheel, ["cuda130", "_cpu"]) == ["pkg/libpkg_cuda128.so", "pkg/libpkg_rocm70.so"]
    with zipfile.ZipFile(wheel) as slimmed:
        assert slimmed.namelist() == ["pkg/__init__.py", "pkg/libpkg_cpu.so", "pkg/libpkg_cuda130.so",
                                      "pkg-1.0.dist-info/RECORD"]
        record = slimmed.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
    assert [line.split(",")[0] for line in record] == ["pkg/__init__.py", "pkg/libpkg_cpu.so", "pkg/libpkg_cuda130.so",
                                                       "pkg-1.0.dist-info/RECORD"]


def test_a_version_no_library_names_is_refused_and_the_wheel_kept(tmp_path):
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    with pytest.raises(ValueError, match="no library names any of"):
        slim_wheel.slim(wheel, ["cuda999"])
    assert len(zipfile.ZipFile(wheel).namelist()) == 6
