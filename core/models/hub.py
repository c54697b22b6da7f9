"""Download a model from the Hugging Face hub, only when the user asks, with progress and cancel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.models.errors import LoadCancelledError, ModelNotFoundError, OfflineError
from core.progress import CancelToken, ProgressCallback, no_progress

# Weights as safetensors only (no pickles), plus configs and tokenizer files.
HUB_FILES = ["*.safetensors", "*.json", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]


def hub_model_dir(repo_id: str, models_dir: Path) -> Path:
    """Local folder of a downloaded hub model."""
    return models_dir / "hub" / repo_id.replace("/", "--")


def download_hub_model(
    repo_id: str, models_dir: Path, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
) -> Path:
    """Download ``repo_id`` into the model cache and return its folder.

    The app runs with the hub in offline mode; this explicit download is the one exception.
    """
    from huggingface_hub import constants, errors, snapshot_download  # huggingface_hub loads only for a download
    from tqdm.auto import tqdm

    class _ProgressBar(tqdm):  # type: ignore[misc]
        """Forwards byte counts to ``progress`` and stops the download on cancel."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if cancel is not None and cancel.cancelled:
                raise LoadCancelledError()
            shown = super().update(n)
            if self.total:
                progress(f"Downloading {repo_id}", min(1.0, self.n / self.total))
            return shown

    target = hub_model_dir(repo_id, models_dir)
    was_offline = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    progress(f"Downloading {repo_id}", 0.0)
    try:
        snapshot_download(repo_id, local_dir=target, allow_patterns=HUB_FILES, tqdm_class=_ProgressBar, etag_timeout=10)
    except (errors.RepositoryNotFoundError, errors.GatedRepoError) as err:
        raise ModelNotFoundError(
            f"The hub has no model '{repo_id}' that you can access ({type(err).__name__}).",
            "Check the repo id (owner/name); for a gated model, log in with `hf auth login` first.",
        ) from err
    except errors.HFValidationError as err:
        raise ModelNotFoundError(f"'{repo_id}' is not a valid hub repo id.", "Use the form owner/name.") from err
    except LoadCancelledError:
        raise
    except Exception as err:  # network failures surface as many types (httpx, OSError, hub errors)
        raise OfflineError(
            f"Could not reach the model hub to download '{repo_id}' ({type(err).__name__}).",
            "Check the network connection, or use a model that is already on this computer.",
        ) from err
    finally:
        constants.HF_HUB_OFFLINE = was_offline
    return target
