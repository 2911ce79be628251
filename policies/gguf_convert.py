"""A GGUF file (llama.cpp's format) turned into a plain Hugging Face model folder.

transformers reads GGUF (``from_pretrained(dir, gguf_file=...)``, with the ``gguf`` package) and
de-quantizes every tensor to float32; the model it returns still carries the GGUF quantization
config, and refuses ``save_pretrained`` with it. So the weights are moved into a model built
from the same config without it, and saved as safetensors with the tokenizer (chat template
included) and a generation config: a folder any Hugging Face code, vLLM included, loads with no
swarm-node module and no GGUF reader.

The conversion costs about 20 s for a 135M-parameter model on 2 CPU cores, so a node converts
once and keeps the folder (policies/model_cache.py); ``gguf_folder_name`` names it by the file's
digest, so a changed file converts again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable

from swarm_node.policies.errors import ModelSourceError

log = logging.getLogger(__name__)

__all__ = ["convert_gguf", "file_sha256", "gguf_folder_name"]

_CHUNK = 1 << 20


def file_sha256(path: Path, on_chunk: Callable[[bytes], None] | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            if on_chunk is not None:
                on_chunk(chunk)
    return h.hexdigest()


def gguf_folder_name(path: Path) -> str:
    """The cache folder of a user's GGUF file: its stem and the start of its digest."""
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in path.stem)[:48]
    return f"gguf-{stem}-{file_sha256(path)[:12]}"


def convert_gguf(gguf: Path, out_dir: Path, say: Callable[[str], None] = lambda _: None) -> dict:
    """Write ``gguf`` as a plain float32 Hugging Face folder into ``out_dir`` (which exists);
    returns a short description (architecture, parameters, vocabulary). ``ModelSourceError``
    when transformers cannot read the file (an architecture it has no GGUF mapping for, or not a
    GGUF file at all), or the ``gguf`` package is missing."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import is_gguf_available

    if not is_gguf_available():
        raise ModelSourceError("reading a GGUF file needs the gguf package: pip install gguf")
    folder, name = str(gguf.parent), gguf.name
    say(f"reading {name}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (ValueError, KeyError, OSError, RuntimeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelSourceError(f"cannot read {gguf} as a model: {first} (transformers reads the GGUF "
                               f"architectures its gguf integration maps; convert others with llama.cpp's "
                               f"tools to a Hugging Face folder)") from e
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are de-quantized already
    say("saving a plain float32 copy")
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # assign=True takes the de-quantized tensors as they are (no second copy of the weights).
    plain.load_state_dict(quantized.state_dict(), strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = quantized.generation_config
    plain.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    info = {"architecture": type(plain).__name__,
            "parameters": sum(p.numel() for p in plain.parameters()),
            "vocab_size": int(config.vocab_size),
            "eos_token": tokenizer.eos_token,
            "chat_template": bool(getattr(tokenizer, "chat_template", None))}
    log.info("converted %s: %s", gguf, json.dumps(info))
    return info
