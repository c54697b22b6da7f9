"""Where Auto's calibration is kept: one file per machine set-up, with what the answers learned.

The key is everything the step cost depends on: the processor or GPU, the model, the dtype asked
for, the quantization, the torch version, the thread count and our kernels' build. Change any of them and the next
load measures again. What the answers measure (tokens per step of each setting) is saved with it,
so the next start begins from this model's own figures. The files live in the cache folder, with
the compiled steps they record (``AppPaths.calibration_dir``): a new data folder on the same
machine reuses them; one left in a data folder by an older version is still read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
from pathlib import Path
from typing import Any

import torch

from core.atomic import write_json_atomic
from core.autotune.calibration import Calibration
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.runtime.architecture import step_kind
from core.runtime.compiled import kernels

log = logging.getLogger(__name__)

CALIBRATION_VERSION = (
    13  # 2: the lean LLaMA step's cost; 3: the CPU weight layout measured fastest; 4: the compiled step;
)
# 5: packed (fp32) weights compiled too, on a plain copy; 6: the compiled step's own int8 products and head (int8 may win now);
# 7: lookahead's wider steps compiled too (the rows layer): a new curve; 8: int8 through our integer kernel (x86);
# 9: that kernel streaming weight rows, attention through our kernel, int8's rows layer every step on AVX-512 too;
# 10: byte activations with AVX-512 VNNI (wide steps cheaper); 11: int8 on x86 through the int8 decoder (every step
# and the prompt in one call); 12: its weights packed for VNNI, AMX tiles for 2+ rows (wide steps cheaper);
# 13: GGUF files' weights as stored (Q4_K, Q6_K, Q5_0, Q8_0) in the int8 decoder

Learned = dict[str, tuple[float, float]]
"""Setting label -> (tokens per step, tokens fed per step), measured on this model's answers."""


def calibration_key(loaded: LoadedModel) -> dict[str, Any]:
    """Everything the step cost depends on."""
    return {
        "version": CALIBRATION_VERSION,
        "device": device_name(loaded.device),
        "model": f"{loaded.source.kind}:{loaded.source.location or loaded.name}",
        "dtype": loaded.requested_dtype,
        "quantization": loaded.requested_quantization,
        "torch": torch.__version__,
        "threads": torch.get_num_threads() if loaded.device.type == "cpu" else 0,
        "step": step_kind(loaded.model),
        "kernels": kernels.build_key() if loaded.device.type == "cpu" and kernels.supported() else None,
    }


class CalibrationStore:
    """The calibration file of one machine set-up (see :func:`calibration_key`)."""

    def __init__(self, path: Path, key: dict[str, Any], legacy: Path | None = None) -> None:
        self.path, self.key, self.legacy = path, key, legacy

    @classmethod
    def of(cls, paths: AppPaths, loaded: LoadedModel) -> CalibrationStore:
        key = calibration_key(loaded)
        name = f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}.json"
        return cls(paths.calibration_dir / name, key, paths.data_dir / "calibration" / name)

    def read(self) -> Calibration | None:
        """The stored calibration, its predictions redone with what was learned; ``None`` if there is none
        or it cannot be read (then it is measured again). A file only in the old place (the data folder)
        is read there, and written to the new one at the next save."""
        source = self._source()
        if source is None:
            return None
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
            learned = {str(k): (float(v[0]), float(v[1])) for k, v in data.get("learned", {}).items()}
            return Calibration.from_dict(data["calibration"], learned)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
            log.warning("measuring again: unreadable calibration %s (%s)", source, err)
            return None

    def _source(self) -> Path | None:
        if self.path.is_file():
            return self.path
        return self.legacy if self.legacy is not None and self.legacy.is_file() else None

    def write(self, calibration: Calibration, learned: Learned | None = None) -> None:
        write_json_atomic(
            self.path,
            {
                "key": self.key,
                "calibration": calibration.as_dict(),
                "learned": {k: list(v) for k, v in (learned or {}).items()},
            },
        )

    def add_learned(self, calibration: Calibration, measured: Learned) -> None:
        """Merge ``measured`` into what is stored; a full disk is logged, never raised (the chat goes on,
        and the figures are measured again)."""
        try:
            stored = json.loads((self._source() or self.path).read_text(encoding="utf-8")).get("learned", {})
            learned = {str(k): (float(v[0]), float(v[1])) for k, v in stored.items()}
        except (OSError, ValueError, AttributeError, TypeError, IndexError):
            learned = {}
        learned.update(measured)
        try:
            self.write(calibration, learned)
        except OSError as err:
            log.warning("could not save Auto's measurements: %s", err)


def device_name(device: torch.device) -> str:
    """The GPU's name, or the processor's model name with the vector instructions torch uses."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name} ({torch.backends.cpu.get_cpu_capability()})"
