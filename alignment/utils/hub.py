"""Models and datasets named by a Hugging Face hub id: whether the hub can give one, asked before anything loads, and
the one-line error every script prints when it cannot (no network, HF_HUB_OFFLINE=1, or a mistyped id or path).

The loaders ask (alignment/models/loading.py for models, alignment/data/math_datasets.py for datasets); the command
lines (alignment/config/cli.py) print the error as one line, without a traceback. A repo already in the local hub
cache is taken as it is, so that cached models and datasets keep working offline.
"""

from pathlib import Path
from typing import Literal

RepoType = Literal["model", "dataset"]
MIRROR_ENV = "ALIGNMENT_DATA_MIRROR"
REMEDY = (
    "give a local copy instead: --model PATH (a model folder), --dataset PATH (a .jsonl file or dataset folder), "
    f"or {MIRROR_ENV}=DIR with dataset repos downloaded as DIR/<owner>/<name>/"
)
PROBE_TIMEOUT_S = 10.0


class SourceUnavailable(Exception):
    """A model or dataset that is no local path and that the hub cannot give; the message is one line."""


def in_hub_cache(repo_id: str, repo_type: RepoType) -> bool:
    """Whether the local hub cache holds a snapshot of the repo (transformers and datasets then load it offline)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    snapshots = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type=repo_type) / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


def why_unavailable(err: Exception, repo_type: RepoType) -> str:
    from huggingface_hub.errors import GatedRepoError, HFValidationError, OfflineModeIsEnabled, RepositoryNotFoundError

    if isinstance(err, HFValidationError):
        return "no such file or folder, and not a hub id"
    if isinstance(err, GatedRepoError):
        return "it is gated on the hub: accept its terms there and log in (hf auth login)"
    if isinstance(err, RepositoryNotFoundError):
        return f"no such file or folder, and no such {repo_type} on the hub (or it is private: log in)"
    if isinstance(err, OfflineModeIsEnabled):
        return "not a local path, not in the hub cache, and the hub is switched off (HF_HUB_OFFLINE=1)"
    return f"not a local path, not in the hub cache, and the hub cannot be reached ({type(err).__name__})"


def check_hub_source(repo_id: str, repo_type: RepoType) -> None:
    """Nothing when the hub cache holds `repo_id` or the hub answers for it (one request, no retries);
    SourceUnavailable naming the remedies otherwise. Call it for a name that is no local path."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import OfflineModeIsEnabled

    try:
        if in_hub_cache(repo_id, repo_type):  # an id that is none (a mistyped path) raises HFValidationError here
            return
        if constants.HF_HUB_OFFLINE:
            raise OfflineModeIsEnabled("HF_HUB_OFFLINE=1")
        HfApi().repo_info(repo_id, repo_type=repo_type, timeout=PROBE_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - every way the hub can fail (HTTP, DNS, TLS, offline, bad id) ends here
        raise SourceUnavailable(
            f"{repo_type} {repo_id!r} cannot be loaded: {why_unavailable(err, repo_type)}; {REMEDY}"
        ) from None
