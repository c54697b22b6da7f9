"""The installer scripts build from a small placeholder payload: the .deb/.tar.gz and the NSIS setup.

The real bundle is about 1 GB and takes many minutes to build (`make package-test` covers it); these
tests check the installer scripts themselves in seconds.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
VERSION = "0.1.0"


@pytest.fixture
def placeholder_bundle(tmp_path: Path) -> Path:
    """A tiny stand-in for the PyInstaller onedir bundle, with the Linux and the Windows executables."""
    bundle = tmp_path / "bundle"
    (bundle / "_internal" / "resources").mkdir(parents=True)
    exe = bundle / "lookahead-chat"
    exe.write_text("#!/bin/sh\necho placeholder\n")
    exe.chmod(0o755)
    for name in ("lookahead-chat.exe", "lookahead-chat-cli.exe"):
        (bundle / name).write_bytes(b"MZ placeholder")
    (bundle / "_internal" / "resources" / "placeholder.txt").write_text("payload\n")
    return bundle


# --- Windows: NSIS --------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("makensis") is None, reason="makensis is not installed (Debian: apt-get install nsis)")
def test_nsis_script_compiles(placeholder_bundle: Path, tmp_path: Path) -> None:
    setup = tmp_path / f"lookahead-chat-{VERSION}-windows-x64-cpu-setup.exe"
    result = subprocess.run(
        [
            "makensis",
            "-V2",
            "-WX",
            f"-DVERSION={VERSION}",
            "-DVARIANT=cpu",
            f"-DPAYLOAD={placeholder_bundle}",
            f"-DOUTFILE={setup}",
            str(PACKAGING / "windows" / "installer.nsi"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert setup.read_bytes()[:2] == b"MZ"


def test_nsis_script_is_per_user_and_asks_before_deleting_user_data() -> None:
    text = (PACKAGING / "windows" / "installer.nsi").read_text()
    script = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(";"))
    assert "RequestExecutionLevel user" in script
    assert 'InstallDir "$LOCALAPPDATA\\Programs\\' in script
    assert "HKLM" not in script  # per-user: nothing machine-wide
    assert "MB_YESNO" in script and "/SD IDNO" in script  # asks; silent uninstall keeps the data
    assert 'RMDir /r "$INSTDIR"' not in script  # never wipe a folder the user picked


# --- Linux: .deb and .tar.gz ----------------------------------------------------------------------


@pytest.fixture
def linux_packages(placeholder_bundle: Path, tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed (it comes with dpkg on Debian and Ubuntu)")
    out = tmp_path / "out"
    env = {**os.environ, "DEB_COMPRESSION": "gzip", "DEB_LEVEL": "1", "TAR_GZIP_LEVEL": "1"}
    result = subprocess.run(
        ["bash", str(PACKAGING / "linux" / "build-deb.sh"), str(placeholder_bundle), str(out), VERSION, "cpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    deb, tgz = (Path(line) for line in result.stdout.split())
    assert deb.name == f"lookahead-chat-{VERSION}-linux-x86_64-cpu.deb"
    assert tgz.name == f"lookahead-chat-{VERSION}-linux-x86_64-cpu.tar.gz"
    return deb, tgz


def _deb_field(deb: Path, field: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_deb_control_fields(linux_packages: tuple[Path, Path]) -> None:
    deb, _ = linux_packages
    assert _deb_field(deb, "Package") == "lookahead-chat"
    assert _deb_field(deb, "Version") == VERSION
    assert _deb_field(deb, "Architecture") == "amd64"
    depends = _deb_field(deb, "Depends")
    assert re.search(r"(^|, )libc6 \(>= \d+\.\d+\)", depends), depends  # the build machine's glibc
    for lib in ("libxcb-cursor0", "libxkbcommon-x11-0", "libgl1", "libegl1", "libfontconfig1", "libdbus-1-3"):
        assert lib in depends, f"{lib} missing from Depends: {depends}"
    assert _deb_field(deb, "Suggests") == "g++"  # the compiled CPU step (core/lookahead/compiled_step.py)


def test_deb_file_layout(linux_packages: tuple[Path, Path]) -> None:
    deb, _ = linux_packages
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    paths = {line.split()[-1].removeprefix(".") for line in listing.splitlines()}
    for expected in (
        "/opt/lookahead-chat/lookahead-chat",
        "/opt/lookahead-chat/_internal/resources/placeholder.txt",
        "/usr/bin/lookahead-chat",
        "/usr/share/applications/lookahead-chat.desktop",
        "/usr/share/icons/hicolor/256x256/apps/lookahead-chat.png",
        "/usr/share/icons/hicolor/scalable/apps/lookahead-chat.svg",
    ):
        assert expected in paths, f"{expected} missing from the .deb"
    files = [p for p in paths if not p.endswith("/")]
    assert all(p.startswith(("/opt/lookahead-chat/", "/usr/")) for p in files), files
    assert all(line.split()[1] == "root/root" for line in listing.splitlines())
    assert not any(" -> " in line for line in listing.splitlines())  # no symlinks needed


def test_deb_maintainer_scripts_never_touch_home(linux_packages: tuple[Path, Path], tmp_path: Path) -> None:
    deb, _ = linux_packages
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
    postrm = (control / "postrm").read_text()
    assert "rm -rf /opt/lookahead-chat" in postrm
    code = "\n".join(line for line in postrm.splitlines() if not line.lstrip().startswith("#"))
    for forbidden in ("$HOME", "/home", "/root", "~", "XDG_"):
        assert forbidden not in code
    assert os.access(control / "postrm", os.X_OK) and os.access(control / "postinst", os.X_OK)


def test_launcher_runs_the_bundle_under_opt() -> None:
    launcher = (PACKAGING / "linux" / "launcher.sh").read_text()
    assert 'exec /opt/lookahead-chat/lookahead-chat "$@"' in launcher


def test_tarball_holds_the_same_bundle(linux_packages: tuple[Path, Path]) -> None:
    _, tgz = linux_packages
    with tarfile.open(tgz) as tar:
        names = set(tar.getnames())
        top = f"lookahead-chat-{VERSION}"
        assert f"{top}/lookahead-chat" in names
        assert f"{top}/_internal/resources/placeholder.txt" in names
        assert f"{top}/share/lookahead-chat.desktop" in names
        assert tar.getmember(f"{top}/lookahead-chat").mode & 0o111


def test_desktop_entry() -> None:
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(PACKAGING / "linux" / "lookahead-chat.desktop")
    section = entry["Desktop Entry"]
    assert section["Type"] == "Application"
    assert section["Exec"] == "lookahead-chat"
    assert section["Icon"] == "lookahead-chat"
    assert section["Terminal"] == "false"
    if shutil.which("desktop-file-validate"):
        subprocess.run(["desktop-file-validate", str(PACKAGING / "linux" / "lookahead-chat.desktop")], check=True)


def test_installer_icons_are_the_apps_icon() -> None:
    app_icon = ROOT / "resources" / "icons" / "lookahead-chat.svg"
    if not app_icon.is_file():
        pytest.skip("the app has no icon of its own yet")
    assert (PACKAGING / "icons" / "lookahead-chat.svg").read_bytes() == app_icon.read_bytes(), (
        "the app's icon changed: run packaging/icons/render.sh and commit the results"
    )


def test_the_frozen_entry_runs_python_code_as_python_c_does(tmp_path) -> None:
    """torch's compiler checks what it built by running ``sys.executable -c CODE``; in the frozen
    app sys.executable is the app, whose entry script must then run CODE, not start the app."""
    import subprocess
    import sys

    out = tmp_path / "out.txt"
    code = f"import sys; open({str(out)!r}, 'w').write(repr(sys.argv) + __name__)"
    done = subprocess.run(
        [sys.executable, str(PACKAGING / "entry.py"), "-c", code, "x"], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "['-c', 'x']__main__"
    failing = subprocess.run([sys.executable, str(PACKAGING / "entry.py"), "-c", "raise SystemExit(3)"], timeout=60)
    assert failing.returncode == 3
