"""The bundle's exclusion rules, the Windows CUDA DLL runtime hook and the CI workflow, without PyInstaller."""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rules = _load("bundle_rules", PACKAGING / "bundle_rules.py")


def _qt_modules_imported_by_the_app() -> set[str]:
    found = set()
    for path in (ROOT / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("PySide6"):
                found.add(node.module)
                found.update(f"PySide6.{alias.name}" for alias in node.names if node.module == "PySide6")
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name.startswith("PySide6"))
    return found


def test_no_qt_module_the_app_imports_is_excluded() -> None:
    used = _qt_modules_imported_by_the_app()
    assert not used & set(rules.EXCLUDED_QT), (
        f"the app imports {sorted(used & set(rules.EXCLUDED_QT))}: "
        "remove them from EXCLUDED_QT in packaging/bundle_rules.py"
    )


@pytest.mark.parametrize(
    "path",
    [
        "torch/test/test_api",
        "torch/include/ATen/ATen.h",
        "torch/bin/protoc",
        "torch/bin/test_api",
        "torch/lib/libtorchbind_test.so",
        "torch/lib/torch_cpu.lib",
        "sympy/core/tests/test_basic.py",
        "bitsandbytes/libbitsandbytes_cuda128.so",
        "bitsandbytes/libbitsandbytes_rocm64.so",
        "bitsandbytes/bitsandbytes_cuda128.dll",
        "PySide6/Qt/plugins/platforms/libqeglfs.so",
        "PySide6/Qt/plugins/imageformats/libqpdf.so",
        "PySide6/Qt/plugins/qmltooling/libqmldbg_debugger.so",
        "PySide6/Qt/lib/libQt6Quick.so.6",
        "PySide6/Qt/lib/libQt6Pdf.so.6",
        "PySide6/Qt/translations/qtdeclarative_de.qm",
        "PySide6/Qt6Qml.dll",
        "PySide6/plugins/platforms/qdirect2d.dll",
        "PySide6/designer.exe",
        "PySide6/include/QtCore/qobject.h",
    ],
)
def test_cpu_bundle_drops(path: str) -> None:
    assert rules.drop_pattern("cpu").search(path)


def test_torch_headers_stay_where_the_compiled_step_can_use_them() -> None:
    headers = ["torch/include/ATen/ATen.h", "torch/include/torch/csrc/inductor/cpp_prefix.h"]
    assert all(rules.drop_pattern("cpu").search(h) for h in headers)  # Windows
    linux = rules.drop_pattern("cpu", torch_headers=True)
    assert not any(linux.search(h) for h in headers)
    assert linux.search("PySide6/include/QtCore/qobject.h") and linux.search("torch/test/test_api")


@pytest.mark.parametrize(
    "path",
    [
        "torch/lib/libtorch_cpu.so",
        "torch/bin/torch_shm_manager",
        "torch/lib/libtorch_python.so",
        "torch/lib/torch_cuda.dll",
        "torch/_C.cpython-311-x86_64-linux-gnu.so",
        "torch/testing/_comparison.py",
        "torch/testing/_internal/logging_tensor.py",
        "bitsandbytes/libbitsandbytes_cpu.so",
        "bitsandbytes/libbitsandbytes_cpu.dll",
        "PySide6/Qt/plugins/platforms/libqxcb.so",
        "PySide6/Qt/plugins/platforms/libqoffscreen.so",
        "PySide6/Qt/plugins/platforms/libqwayland.so",
        "PySide6/plugins/platforms/qwindows.dll",
        "PySide6/Qt/plugins/imageformats/libqsvg.so",
        "PySide6/Qt/plugins/iconengines/libqsvgicon.so",
        "PySide6/Qt/plugins/xcbglintegrations/libqxcb-glx-integration.so",
        "PySide6/Qt/plugins/platformthemes/libqgtk3.so",
        "PySide6/Qt/lib/libQt6Widgets.so.6",
        "PySide6/Qt/lib/libQt6XcbQpa.so.6",
        "PySide6/Qt/lib/libQt6DBus.so.6",
        "PySide6/Qt/lib/libQt6Svg.so.6",
        "PySide6/Qt/translations/qtbase_de.qm",
        "PySide6/Qt6Widgets.dll",
        "transformers/models/llama/modeling_llama.py",
        "resources/themes/dark.qss",
        "pip/_vendor/certifi/cacert.pem",
    ],
)
def test_cpu_bundle_keeps(path: str) -> None:
    assert not rules.drop_pattern("cpu").search(path)


def test_cuda_bundle_keeps_only_the_matching_bitsandbytes_library() -> None:
    drop = rules.drop_pattern("cuda", "12.8")
    assert not drop.search("bitsandbytes/libbitsandbytes_cuda128.so")
    assert not drop.search("bitsandbytes/libbitsandbytes_cpu.so")
    assert drop.search("bitsandbytes/libbitsandbytes_cuda126.so")
    assert drop.search("bitsandbytes/libbitsandbytes_cuda130.so")
    assert drop.search("bitsandbytes/libbitsandbytes_xpu2025.so")


def test_keep_filters_a_toc_with_windows_separators() -> None:
    toc = [("torch\\include\\x.h", "/src/x.h", "DATA"), ("torch\\lib\\c10.dll", "/src/c10.dll", "BINARY")]
    assert rules.keep(toc, rules.drop_pattern("cpu")) == [toc[1]]


# --- the Windows CUDA DLL runtime hook ------------------------------------------------------------


def test_runtime_hook_does_nothing_outside_a_frozen_windows_app(monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.environ.get("PATH")
    _load("cuda_dll_dirs_probe", PACKAGING / "runtime_hooks" / "cuda_dll_dirs.py")
    assert os.environ.get("PATH") == before
    assert not hasattr(sys, "_lookahead_chat_dll_dirs")


def test_runtime_hook_registers_the_bundle_dll_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in ("torch/lib", "nvidia/cublas/bin", "nvidia/cudnn/bin", "nvidia/cudnn/include", "bitsandbytes"):
        (tmp_path / folder).mkdir(parents=True)
    hook = _load("cuda_dll_dirs_probe2", PACKAGING / "runtime_hooks" / "cuda_dll_dirs.py")
    added: list[str] = []
    monkeypatch.setattr(os, "add_dll_directory", lambda d: added.append(d) or d, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin")
    handles = hook._register(str(tmp_path))
    expected = [
        str(tmp_path),
        str(tmp_path / "torch" / "lib"),
        str(tmp_path / "bitsandbytes"),
        str(tmp_path / "nvidia" / "cublas" / "bin"),
        str(tmp_path / "nvidia" / "cudnn" / "bin"),
    ]
    assert added == expected and handles == expected
    assert os.environ["PATH"].split(os.pathsep) == [*expected, "/usr/bin"]


# --- the CI workflow ------------------------------------------------------------------------------


def test_workflow_builds_both_installers_in_both_variants() -> None:
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "installers.yml").read_text())
    jobs = workflow["jobs"]
    matrix = {job: spec["strategy"]["matrix"] for job, spec in jobs.items() if "strategy" in spec}
    oses = {os_name for m in matrix.values() for os_name in m.get("os", [])}
    variants = {v for m in matrix.values() for v in m.get("variant", [])}
    assert {"ubuntu-latest", "windows-latest"} <= oses
    assert {"cpu", "cuda"} <= variants
    text = (ROOT / ".github" / "workflows" / "installers.yml").read_text()
    assert "makensis" in text and "make package-linux" in text and "--self-test" in text
