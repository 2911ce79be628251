"""The mode a run's written files get: what a plainly created file gets, 0666 less the umask (0644 as
a rule), so a checkpoint's and an export's tensors are as readable as everything else in the folder.

safetensors (0.8) writes a file through a temporary one that Rust's tempfile crate creates 0600,
then renames it into place: left alone, ``model.safetensors`` and its kin came out 0600 among
0644 files (and Hugging Face's ``save_pretrained`` writes through the same writer). The identity
key (protocol/identity.py) is a secret and keeps its own 0600: nothing here touches it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["plain_mode", "give_plain_mode"]


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (os.umask can only be
    read by setting it, which a file another thread creates meanwhile would get)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_mode() -> int:
    """The permission bits ``open(path, "w")`` would give a new file now."""
    return 0o666 & ~_umask()


def give_plain_mode(folder: Path) -> None:
    """Give every file in ``folder`` (and its subfolders) the plain mode (``plain_mode``)."""
    mode = plain_mode()
    for p in Path(folder).rglob("*"):
        if p.is_file() and not p.is_symlink():
            os.chmod(p, mode)
