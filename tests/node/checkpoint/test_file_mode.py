"""node/checkpoint/file_mode.py: the mode a plainly created file gets, read without changing the umask,
and given to what safetensors writes 0600."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from safetensors.torch import save_file

from swarm_node.node.checkpoint.file_mode import give_plain_mode, plain_mode


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077], ids=oct)
def test_the_plain_mode_is_what_open_gives_a_new_file(tmp_path, umask):
    old = os.umask(umask)
    try:
        (tmp_path / "plain.txt").write_text("x")
        assert plain_mode() == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == 0o666 & ~umask
        assert os.umask(umask) == umask  # reading it left it as it was
    finally:
        os.umask(old)


def test_safetensors_files_get_the_plain_mode(tmp_path):
    old = os.umask(0o022)
    try:
        save_file({"a": torch.zeros(2)}, str(tmp_path / "w.safetensors"))
        (tmp_path / "sub").mkdir()
        save_file({"a": torch.zeros(2)}, str(tmp_path / "sub" / "v.safetensors"))
        give_plain_mode(tmp_path)
    finally:
        os.umask(old)
    for p in (tmp_path / "w.safetensors", tmp_path / "sub" / "v.safetensors"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p
