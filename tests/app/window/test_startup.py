"""Starting the window: missing X11 libraries named in one line, one window per data folder."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.window.single_instance import InstanceLock
from app.window.system_libraries import debian_package, missing_libraries, not_found, uses_xcb, xcb_plugin
from core.chat.history import HistoryStore
from core.paths import AppPaths
from tests.app.conftest import write_settings

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def start_app() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `python -m app` (the window) as its own process over a home folder; killed at teardown."""
    started: list[subprocess.Popen[str]] = []

    def start(home: Path, **env: str) -> subprocess.Popen[str]:
        environ = {**os.environ, "LOOKAHEAD_CHAT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen", **env}
        environ = {k: v for k, v in environ.items() if v != ""}  # "" removes a variable
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "app"],
                cwd=ROOT,
                env=environ,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    "soname, package",
    [
        ("libxcb-cursor.so.0", "libxcb-cursor0"),
        ("libxcb-icccm.so.4", "libxcb-icccm4"),
        ("libxcb-render-util.so.0", "libxcb-render-util0"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libEGL.so.1", "libegl1"),
        ("libdbus-1.so.3", "libdbus-1-3"),
        ("oddname", "oddname"),
    ],
)
def test_debian_package_names(soname: str, package: str) -> None:
    assert debian_package(soname) == package


def test_ldd_output_is_read_for_missing_system_libraries() -> None:
    output = (
        "\tlinux-vdso.so.1 (0x00007ffc)\n"
        "\tlibQt6XcbQpa.so.6 => not found\n"
        "\tlibxcb-icccm.so.4 => not found\n"
        "\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)\n"
        "\tlibxcb-icccm.so.4 => not found\n"
        "\tlibxcb-cursor.so.0 => not found\n"
    )
    assert not_found(output) == ["libxcb-icccm.so.4", "libxcb-cursor.so.0"]  # a broken bundle is not an apt problem


def test_which_platform_needs_the_xcb_check() -> None:
    linux = sys.platform.startswith("linux")
    assert uses_xcb({"DISPLAY": ":0"}) is linux
    assert uses_xcb({"QT_QPA_PLATFORM": "xcb"}) is linux
    assert not uses_xcb({"QT_QPA_PLATFORM": "offscreen"})
    assert not uses_xcb({"WAYLAND_DISPLAY": "wayland-0"})


def test_missing_xcb_libraries_are_named_in_one_line_instead_of_qt_aborting(tmp_path: Path, start_app) -> None:
    missing = missing_libraries(xcb_plugin())
    if not missing:
        pytest.skip("every library of Qt's xcb plugin is installed on this machine")
    proc = start_app(tmp_path, QT_QPA_PLATFORM="", WAYLAND_DISPLAY="", DISPLAY=":99")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.count("\n") == 1 and err.startswith("error: Qt cannot open a window")
    assert "sudo apt install " + " ".join(debian_package(m) for m in missing) in err
    assert not (tmp_path / "data").exists()  # refused before anything was opened


def test_the_lock_is_held_once_per_data_folder(tmp_path: Path, qtbot) -> None:
    first, second = InstanceLock(tmp_path / "a"), InstanceLock(tmp_path / "a")
    assert first.acquire()
    assert not second.acquire() and second.owner_pid() == os.getpid()
    assert InstanceLock(tmp_path / "b").acquire()  # another folder is another instance
    first.release()
    assert second.acquire()
    second.release()


def test_the_lock_of_a_crashed_window_is_taken_over(tmp_path: Path) -> None:
    crash = (
        "import os, sys; from pathlib import Path; from app.window.single_instance import InstanceLock; "
        "lock = InstanceLock(Path(sys.argv[1])); assert lock.acquire(); os.kill(os.getpid(), 9)"
    )
    proc = subprocess.run([sys.executable, "-c", crash, str(tmp_path)], cwd=ROOT, capture_output=True, timeout=120)
    assert proc.returncode == -9 and (tmp_path / "window.lock").exists()
    lock = InstanceLock(tmp_path)
    assert lock.acquire()
    lock.release()


def test_a_second_start_brings_the_window_forward_and_leaves_its_live_answer_alone(
    tiny_settings, open_window, app_paths, qtbot, start_app
) -> None:
    tiny_settings()
    lock = InstanceLock(app_paths.data_dir)
    assert lock.acquire()  # what run_gui does before it opens the window
    window = open_window()
    lock.activated.connect(window.bring_to_front)
    conv = window.store.create_conversation("live")
    window.store.add_message(conv.id, "user", "question")
    live = window.store.add_message(conv.id, "assistant", "half an ans", status="generating")
    window.showMinimized()

    second = start_app(app_paths.config_dir.parent, LOOKAHEAD_CHAT_CACHE=str(app_paths.cache_dir))
    qtbot.waitUntil(lambda: second.poll() is not None, timeout=60_000)  # the first window keeps serving meanwhile
    out, err = second.communicate()
    assert second.returncode == 0, err[-2000:]
    assert "already running" in out and "brought to the front" in out
    qtbot.waitUntil(lambda: not window.isMinimized(), timeout=5_000)
    with sqlite3.connect(app_paths.data_dir / "history.sqlite3") as conn:
        assert conn.execute("SELECT status FROM messages WHERE id = ?", (live.id,)).fetchone() == ("generating",)
    lock.release()


def test_a_second_start_as_the_window_closes_does_not_open_it_again(open_window, app_paths, qtbot) -> None:
    """The ask to come forward can arrive after the window closed (its worker stopped, its history closed):
    it must not show that window again, or the app would never quit (a cold test run once hung on it)."""
    lock = InstanceLock(app_paths.data_dir)
    assert lock.acquire()
    window = open_window(wait_for_model=False)
    lock.activated.connect(window.bring_to_front)
    window.close()
    assert InstanceLock(app_paths.data_dir).activate_owner()  # what a second start sends
    qtbot.wait(500)
    assert not window.isVisible()
    lock.release()


def test_a_second_start_that_cannot_reach_the_first_says_so_and_exits(tmp_path: Path, qtbot, start_app) -> None:
    lock = InstanceLock(tmp_path / "data")
    assert lock.acquire()
    lock._server.close()  # the first instance holds the folder but does not answer
    proc = start_app(tmp_path)
    qtbot.waitUntil(lambda: proc.poll() is not None, timeout=60_000)
    out, err = proc.communicate()
    assert proc.returncode == 1
    assert err.startswith("error: Lookahead Chat is already running for") and "could not be reached" in err
    assert f"(process {os.getpid()})" in err
    lock.release()


def read_only(folder: Path, command: list[str]) -> list[str]:
    """``command`` run where ``folder`` is a read-only mount (a bind mount in a mount namespace of its own).

    A real read-only file system: as root, chmod would not stop a single write. Skips where no such
    namespace can be made.
    """
    mount = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}"'
    probe = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "sh", "-c", f'{mount} && ! touch "{folder}/probe" 2>/dev/null'],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip("no mount namespace for a read-only folder here (unshare --map-root-user --mount)")
    return ["unshare", "--map-root-user", "--mount", "sh", "-c", f'{mount} && exec "$@"', "sh", *command]


READ_ONLY_WINDOW = """
import faulthandler, sys
faulthandler.dump_traceback_later(240, exit=True)  # a hang (one cold run in three, once) shows every thread's stack
from PySide6.QtCore import QProcess, QTimer
from PySide6.QtWidgets import QApplication
from app.window.main import run_gui
from core.paths import AppPaths

app = QApplication(sys.argv)
second = QProcess()
second.setProgram(sys.executable)
second.setArguments(["-m", "app"])

def loaded():  # the model loaded or failed: then a second start over the same folder
    windows = [w for w in app.topLevelWidgets() if type(w).__name__ == "MainWindow"]
    if windows and windows[0]._load_token is None and timer.isActive():
        timer.stop()
        print("notice:", windows[0].notice.text.replace("\\n", " "), flush=True)
        second.start()

def second_done():
    out = bytes(second.readAllStandardOutput().data()).decode().strip()
    print("second:", second.exitCode(), out, flush=True)
    app.closeAllWindows()

second.finished.connect(second_done)
timer = QTimer(interval=100)
timer.timeout.connect(loaded)
timer.start()
print("exit", run_gui(AppPaths.default()), flush=True)
"""


@pytest.mark.parametrize(
    "home_holds, notice",
    [
        ("used folders", "Check that the folder is writable"),  # a copy of a data folder, mounted read-only
        ("a crashed window's lock", "Check that the folder is writable"),  # its lock file cannot be taken over
        ("nothing", "folders could not be created"),
    ],
)
def test_a_read_only_data_folder_opens_the_window_and_a_second_start_finds_it(
    home_holds: str, notice: str, tmp_path: Path, tiny_model_folder: Path, real_paths: AppPaths
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    paths = AppPaths(home / "config", home / "data", real_paths.cache_dir)
    if home_holds != "nothing":
        write_settings(paths.ensure(), tiny_model_folder, max_new_tokens=8)
        store = HistoryStore(paths.data_dir / "history.sqlite3")
        store.add_message(store.create_conversation("kept").id, "user", "hello")
        store.close()
    if home_holds == "a crashed window's lock":
        crash = "import os, sys; from PySide6.QtCore import QLockFile; lock = QLockFile(sys.argv[1]); lock.tryLock(0); "
        subprocess.run([sys.executable, "-c", crash + "os.kill(os.getpid(), 9)", str(paths.data_dir / "window.lock")])
        assert (paths.data_dir / "window.lock").exists()
    env = {**os.environ, "LOOKAHEAD_CHAT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    env["LOOKAHEAD_CHAT_CACHE"] = str(paths.cache_dir)
    command = read_only(home, [sys.executable, "-c", READ_ONLY_WINDOW])
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "already running" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0 and "exit 0" in done.stdout, done.stderr[-8000:]
    shown = next(line for line in done.stdout.splitlines() if line.startswith("notice:"))
    assert notice in shown and "will not be kept" in shown  # the window says what the folder means
    second = next(line for line in done.stdout.splitlines() if line.startswith("second:"))
    assert second.startswith("second: 0 Lookahead Chat is already running") and "brought to the front" in second
