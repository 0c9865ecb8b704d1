"""A task's rows from a string: a file, a folder of split files, a local dataset folder laid out as a hub repo, or a
hub id, all read with `datasets`. Returns the splits by name, each a list of dicts.

    read_rows("data/tasks/dates.jsonl")        # {"file": [...]}: one split
    read_rows("data/tasks/dates/")             # {"train": [...], "test": [...]}: train.jsonl, test.jsonl
    read_rows("org/dataset")                   # the hub repo's splits (a machine with network)
"""

from pathlib import Path
from typing import Any

FILE_SPLIT = "file"  # the one split of a single file
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}  # `datasets`' packaged readers


def _builder(path: Path) -> str | None:
    return BUILDERS.get(path.suffix.lower())


def _read_files(files: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    """Each split's file read by the `datasets` reader its extension names."""
    import datasets

    splits: dict[str, list[dict[str, Any]]] = {}
    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a quiet console: small files read in a moment
    try:
        for split, path in files.items():
            part = datasets.load_dataset(_builder(path), data_files={"train": str(path)}, split="train")
            splits[split] = part.to_list()
    finally:
        if shown:
            datasets.enable_progress_bars()
    return splits


def split_files(folder: Path) -> dict[str, Path]:
    """A folder's data files by split name (train.jsonl -> "train"), when it holds any at its top."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and _builder(p) is not None)
    return {p.stem: p for p in files}


def read_rows(source: str, what: str = "--task-data") -> dict[str, list[dict[str, Any]]]:
    """The splits of `source` (see the module docstring); errors name `what` and the source."""
    path = Path(source).expanduser()
    try:
        if path.is_file():
            if _builder(path) is None:
                raise ValueError(f"{path.suffix or 'no extension'} is not one of {', '.join(BUILDERS)}")
            return _read_files({FILE_SPLIT: path})
        if path.is_dir():
            files = split_files(path)
            if files:
                return _read_files(files)
            import datasets

            if (path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file():
                loaded = datasets.load_from_disk(str(path))  # a folder written by save_to_disk
            else:
                loaded = datasets.load_dataset(str(path))  # a hub repo's layout (data/train-*.parquet, ...)
        elif path.suffix.lower() in BUILDERS or "/" not in source or source.startswith((".", "/", "~")):
            raise FileNotFoundError("no such file or folder")
        else:
            import datasets

            loaded = datasets.load_dataset(source)  # a hub id
    except (FileNotFoundError, ValueError, OSError) as error:
        raise ValueError(f"{what} {source}: {error}".splitlines()[0]) from None
    except Exception as error:  # datasets' own errors (DatasetNotFoundError, a corrupt file, ...)
        raise ValueError(f"{what} {source}: {type(error).__name__}: {error}".splitlines()[0]) from None
    if hasattr(loaded, "to_list"):  # a single Dataset
        return {FILE_SPLIT: loaded.to_list()}
    return {split: part.to_list() for split, part in loaded.items()}
