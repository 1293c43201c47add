"""A Python package as a ConfigMap, and the volume items that lay it out again as the package's tree.

A ConfigMap key holds no '/', so a file's key is its path in the package with '.' for each '/'
(`run/sweep.py` -> `run.sweep.py`; a top-level `__init__.py` keeps its name). The volume lists
every key in `items` with its path, so the pod sees the package's folders exactly as the repository
holds them, and only the files named there. `stacks/ops/render.py` writes the same files out as
`code/<package>/<path>`, reading each key's path back with `path()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def key(path: str) -> str:
    """The ConfigMap key of the file at `path` in its package (`run/sweep.py` -> `run.sweep.py`)."""
    folders, _, name = path.rpartition("/")
    if "." in folders or name.count(".") != 1 or path.startswith("/"):
        # Only such paths map to keys one to one: `path()` must find the file again.
        raise ValueError(f"{path}: a packaged file needs a relative path whose folders hold no '.' and "
                         "whose name has one '.' (a Python module, a data file)")
    return path.replace("/", ".")


def path(config_map_key: str) -> str:
    """The path in its package of the file under a ConfigMap key (`run.sweep.py` -> `run/sweep.py`)."""
    stem, _, suffix = config_map_key.rpartition(".")
    return f"{stem.replace('.', '/')}.{suffix}" if stem else config_map_key


def data(files: Mapping[str, str]) -> dict[str, str]:
    """A ConfigMap's `data` for {path in the package: text}, sorted by key."""
    keyed = {key(p): text for p, text in files.items()}
    return dict(sorted(keyed.items()))


def items(paths: Iterable[str], folder: str = "") -> list[dict[str, str]]:
    """The volume items that put each file back at its path (under `folder`, e.g. `data/`)."""
    return [{"key": key(p), "path": f"{folder}{p}"} for p in sorted(paths)]
