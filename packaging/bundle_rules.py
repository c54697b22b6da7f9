"""What the PyInstaller bundle leaves out: module excludes and file-drop rules (used by the spec).

Kept apart from the spec so the rules can be tested without running PyInstaller.  Paths are the
files' destinations inside the bundle (relative to ``_internal``), with POSIX separators.
"""

from __future__ import annotations

import re

# Qt modules the app never uses.  tests/packaging checks that no module the app imports is listed.
EXCLUDED_QT = [
    "PySide6.QtQml",
    "PySide6.QtQuick",
    "PySide6.QtQuickWidgets",
    "PySide6.QtQuickControls2",
    "PySide6.QtQuickTest",
    "PySide6.QtDesigner",
    "PySide6.QtUiTools",
    "PySide6.QtTest",
    "PySide6.QtSql",
    "PySide6.QtPdf",
    "PySide6.QtPdfWidgets",
    "PySide6.QtHelp",
    "PySide6.QtXml",
    "PySide6.QtOpenGL",
    "PySide6.QtOpenGLWidgets",
    "PySide6.QtPrintSupport",
    "PySide6.QtConcurrent",
    "PySide6.QtWebEngineCore",
    "PySide6.QtWebEngineWidgets",
    "PySide6.QtMultimedia",
    "PySide6.QtCharts",
    "PySide6.Qt3DCore",
    "PySide6.QtDBus",
    "PySide6.QtSvgWidgets",  # (QtNetwork stays: one window per data folder uses QLocalServer)
]

# Python packages that optional imports would drag in; the app needs none of them.
EXCLUDED_PY = [
    "tkinter",
    "_tkinter",
    "pytest",
    "pytestqt",
    "IPython",
    "matplotlib",
    "pandas",
    "scipy",
    "sklearn",
    "tensorflow",
    "jax",
    "flax",
    "torchvision",
    "torchaudio",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "transformers.models.deprecated",
    # (torch.testing._internal must stay: torch.utils.checkpoint imports it when torch is imported.)
    "torch.utils.tensorboard",
]

_QT_UNUSED = (
    "Qml|Quick|Designer|Pdf|Labs|Lottie|Sql|Test|Help|UiTools|Concurrent|PrintSupport|"
    "OpenGLWidgets|Xml|VirtualKeyboard|ShaderTools|Graphs|DataVisualization|Charts|Multimedia|"
    "WebEngine|WebChannel|WebSockets|3D|Scxml|StateMachine|RemoteObjects|SerialPort|Sensors|"
    "Positioning|Location|Bluetooth|Nfc|TextToSpeech|SpatialAudio|HttpServer"
)

_COMMON_DROPS = [
    r"^torch/(test|share/cmake)/",  # C++ test binaries, cmake files
    r"^torch/bin/(?!torch_shm_manager(\.exe)?$)",  # C++ tests and protoc; torch imports need shm_manager
    r"^torch/lib/(lib)?(jitbackend_test|torchbind_test|backend_with_compiler|aoti_custom_ops)\.(so|dll)$",
    r"^torch/lib/.*\.lib$",  # Windows import libraries
    r"^(?!torch/include/).*\.(h|hpp|cuh)$",  # C/C++ headers, but torch's own (see drop_pattern)
    r"\.(pyi|cmake)$",
    r"(^|/)tests?/",  # the packages' own test suites
    r"^PySide6/(include|typesystems|glue|scripts|doc|examples)/",
    r"^PySide6/(Qt/)?(qml|metatypes|mkspecs)/",
    r"^PySide6/(Qt/)?translations/(?!qtbase_)",  # only Qt's base translations (dialog buttons)
    # Qt plugins: kept are platforms (xcb, wayland, offscreen, minimal; windows), platform themes,
    # input contexts, image formats, icon engines, styles, xcb GL integrations and wayland client shells.
    r"^PySide6/(Qt/)?plugins/(designer|egldeviceintegrations|generic|networkinformation|printsupport|"
    r"qmltooling|sqldrivers|tls|vectorimageformats|wayland-graphics-integration-server|renderers|"
    r"scenegraph|position|multimedia|qmllint|assetimporters|sceneparsers|geometryloaders|renderplugins|"
    r"texttospeech|canbus)/",
    r"^PySide6/(Qt/)?plugins/platforms/(lib)?q(eglfs|linuxfb|vnc|minimalegl|vkkhrdisplay|direct2d)\.(so|dll)$",
    r"^PySide6/(Qt/)?plugins/imageformats/(lib)?q(pdf|icns|tga|tiff|wbmp|webp)\.(so|dll)$",
    rf"^PySide6/(Qt/)?lib/libQt6({_QT_UNUSED}|Wayland(Compositor|Egl)|EglFS|WlShell)",
    rf"^PySide6/Qt6({_QT_UNUSED})[A-Za-z0-9]*\.dll$",
    r"^PySide6/(assistant|designer|linguist|lupdate|lrelease|qmlformat|qmlls|qmllint|qmlcachegen|"
    r"qmltyperegistrar|rcc|uic|balsam|balsamui|svgtoqml)(\.exe)?$",
]


def drop_pattern(variant: str, cuda_version: str | None = None, *, torch_headers: bool = False) -> re.Pattern[str]:
    """The files to leave out of the bundle.

    Args:
        variant: ``cpu`` or ``cuda``.
        cuda_version: torch's CUDA version (``torch.version.cuda``, e.g. ``"12.8"``) for ``cuda``.
        torch_headers: keep torch's C++ headers (62 MB, about 10 compressed): with them and a C++
            compiler on the user's machine, the app compiles its 1-token CPU step
            (``core/runtime/compiled/``), which decodes about 1.8x faster there. Linux
            only: on Windows it would need Visual Studio's compiler, which few users have.

    bitsandbytes ships one native library per CUDA/ROCm/XPU version (about 120 MB in all); only the
    CPU one and, in the CUDA variant, the one matching torch's CUDA runtime are kept.
    """
    drops = list(_COMMON_DROPS)
    if not torch_headers:
        drops.append(r"^torch/include/")
    if variant == "cuda" and cuda_version:
        cuda = cuda_version.replace(".", "")
        drops.append(rf"^bitsandbytes/(lib)?bitsandbytes_(?!cpu\.|cuda{cuda}\.)[^/]*\.(so|dll)$")
    else:
        drops.append(r"^bitsandbytes/(lib)?bitsandbytes_(?!cpu\.)[^/]*\.(so|dll)$")
    return re.compile("|".join(f"(?:{p})" for p in drops))


def keep(toc, pattern: re.Pattern[str]) -> list:
    """The entries of a PyInstaller TOC (``(dest, source, kind)`` tuples) that ``pattern`` does not drop."""
    return [entry for entry in toc if not pattern.search(entry[0].replace("\\", "/"))]
