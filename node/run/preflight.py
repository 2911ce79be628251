"""Checks a node runs before it loads anything heavy: can it write its run folder, does its
device exist, can a model named by hub id be had (cached, or the Hub reachable), does the
checkpoint it resumes belong to this configuration; and, once the model is loaded, do its
prompts and completions fit the model's context.

A mistake found here costs the user a second, not a model load; each check raises a
``ConfigError`` whose message names the problem and the fix (the CLI prints it and exits 2).
Nothing here creates or changes a file: the write probe goes into a folder that already exists
and is removed at once.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from swarm_node.node.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["check_run_dir", "check_device", "check_model_source", "check_resume_matches", "check_context"]

HUB_CHECK_S = 3.0  # how long a TCP connection to the Hub may take before it counts as unreachable


def _existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_run_dir(run_dir: Path) -> None:
    """The run folder is a folder, or can be made one, and this process can write in it."""
    run_dir = Path(run_dir)
    fix = "choose another --run.dir"
    if run_dir.is_symlink() and not run_dir.exists():
        raise ConfigError(f"--run.dir {run_dir} is a link to {os.readlink(run_dir)}, which does not exist: "
                          f"{fix}, or create the folder it points to")
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--run.dir {run_dir} is a file, not a folder: {fix} (or move the file away)")
    base = _existing_ancestor(run_dir.absolute())
    if not base.is_dir():
        raise ConfigError(f"--run.dir {run_dir} cannot be created: {base} is a file, not a folder; {fix}")
    probe = base / f".swarm-node-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:  # PermissionError, a read-only file system (EROFS), a full disk
        what = "cannot write in" if base == run_dir.absolute() else f"cannot create {run_dir} in"
        raise ConfigError(f"--run.dir: {what} {base} ({e.strerror or e}); {fix}, or make "
                          f"{base} writable for this user") from None


def check_device(device: str, flag: str = "--model.device") -> None:
    """``device`` (the setting ``flag`` names) is a device this torch build can use (allocates one
    element on it)."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{flag} {device!r} is not a torch device: use cpu, cuda, cuda:N "
                          f"(or mps on Apple silicon)") from None
    if dev.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise ConfigError(f"{flag} {device}: this torch ({torch.__version__}) was built "
                              f"without CUDA; install a CUDA build of torch, or use {flag} cpu")
        n = torch.cuda.device_count()
        if n == 0:
            raise ConfigError(f"{flag} {device}: no CUDA GPU is visible (check the driver, "
                              f"nvidia-smi and CUDA_VISIBLE_DEVICES), or use {flag} cpu")
        if dev.index is not None and dev.index >= n:
            raise ConfigError(f"{flag} {device}: this machine has {n} CUDA GPU(s); use "
                              f"{flag} cuda:0" + (f" ... cuda:{n - 1}" if n > 1 else "")
                              + f" or {flag} cpu")
    try:
        torch.empty(1, device=dev)
    except (RuntimeError, AssertionError) as e:  # e.g. mps on a machine without it
        raise ConfigError(f"{flag} {device} cannot be used here: {e}; "
                          f"use {flag} cpu") from None


def check_model_source(name: str) -> None:
    """A ``model.name`` names a model: a local path exists (and is a model folder or a .gguf file),
    and a hub id (not ``default``, a registry model or a local path) can be had: the Hub
    answers, or it is in the local Hugging Face cache (then it loads offline). Otherwise the load
    would retry for most of a minute and end in the Hub's own message (there may be no network
    at all where nodes run)."""
    from swarm_node.policies.errors import ModelSourceError
    from swarm_node.policies.model_source import model_kind

    try:
        if model_kind(name) != "hub":
            return  # the embedded model, a registry model, a local folder or .gguf file
    except ModelSourceError as e:  # a path that is not there, a folder that is not a model
        raise ConfigError(str(e)) from None
    from huggingface_hub import constants, try_to_load_from_cache

    why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(constants.ENDPOINT)
    if why is None:
        return  # the Hub answers: the load downloads it (or names a wrong id)
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        if not constants.HF_HUB_OFFLINE:  # else every file's request is retried for most of a minute first
            log.info("the Hugging Face Hub cannot be reached (%s): loading %s from the cache, offline", why, name)
            constants.HF_HUB_OFFLINE = True
            os.environ["HF_HUB_OFFLINE"] = "1"  # and any process this one starts (the vLLM engine)
        return
    raise ConfigError(f"--model.name {name}: not a local folder, not in the Hugging Face cache, and the Hub "
                      f"cannot be reached ({why}): pass a local model folder (one with config.json, e.g. "
                      f"downloaded with `huggingface-cli download {name} --local-dir DIR` where there is a "
                      f"network), or --model.name default, the embedded model built here")


def _unreachable(endpoint: str) -> str | None:
    """Why ``endpoint``'s host takes no TCP connection within ``HUB_CHECK_S`` (None: it does). The
    name lookup runs in a daemon thread: a resolver without a network may hang past any timeout."""
    import socket
    import threading
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    out: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=HUB_CHECK_S).close()
            out.append(None)
        except OSError as e:
            out.append(f"{host}:{port}: {e.strerror or e}")

    t = threading.Thread(target=connect, daemon=True, name="hub-check")
    t.start()
    t.join(HUB_CHECK_S + 0.5)
    return out[0] if out else f"{host}:{port}: no answer in {HUB_CHECK_S:g} s"


def check_resume_matches(ckpt_root: Path, model_cfg: dict) -> None:
    """The checkpoint a resume would load was written with this run's LoRA rank and alpha.

    A LoRA adapter and full weights can never load into each other, so another rank is refused
    here, before the model loads. Another ``model.name`` is only logged: the same weights may
    have moved (a renamed folder), and the tensor check at load decides. Reads the newest
    *valid* checkpoint's ``state.json`` (the one resume loads); one without a recorded config
    is left to that check.
    """
    from swarm_node.node.checkpoint.checkpoint import newest_valid

    path = newest_valid(ckpt_root)
    if path is None:
        return
    try:
        saved = json.loads((path / "state.json").read_text())["extra"]["config"]["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if "lora_rank" in saved and saved["lora_rank"] != model_cfg.get("lora_rank"):
        was, now = saved["lora_rank"], model_cfg.get("lora_rank")
        raise ConfigError(f"cannot resume {path}: it was trained with --model.lora_rank {was}, this run asks "
                          f"for --model.lora_rank {now} (LoRA adapters and full weights do not load into each "
                          f"other). Resume with --model.lora_rank {was}, or start the new setting in another "
                          f"--run.dir")
    if saved.get("lora_rank") and "lora_alpha" in saved and saved["lora_alpha"] != model_cfg.get("lora_alpha"):
        # Not a tensor: the adapter would load, and scale its update by another alpha / rank.
        was, now = saved["lora_alpha"], model_cfg.get("lora_alpha")
        raise ConfigError(f"cannot resume {path}: its LoRA adapter was trained with --model.lora_alpha {was}, "
                          f"this run asks for {now} (the adapter's output is scaled by alpha / rank). Resume "
                          f"with --model.lora_alpha {was}, or start the new setting in another --run.dir")
    if "name" in saved and not _same_model(saved["name"], model_cfg.get("name")):
        log.warning("resuming %s, which was trained from model %r, with --model.name %r: the load checks "
                    "that its tensors fit", path, saved["name"], model_cfg.get("name"))


def _same_model(saved, now) -> bool:
    if saved == now:
        return True
    # The same local model written two ways (./m and /abs/m) is the same model.
    return isinstance(saved, str) and isinstance(now, str) and Path(saved).exists() \
        and Path(saved).resolve() == Path(now).resolve()


def longest_prompt(encode, prompt_of, cfg) -> int:
    """The longest prompt, in tokens (``encode``: texts → token id lists; ``prompt_of``: a task's
    prompt text in the node's prompt format), of a sample of 256 of this run's tasks: what a
    prompt can take of the context and of the memory."""
    from swarm_node.node.run.rollouts import round_task_ids
    from swarm_node.rewards.registry import make_task

    t = cfg.tasks
    ids = [i for step in range(32) for i in round_task_ids(cfg.train.seed, step, 8, t.names, t.difficulties)]
    return max(len(p) for p in encode([prompt_of(make_task(i)) for i in ids]))


def check_context(policy, cfg) -> None:
    """Prompts plus ``generation.max_completion_length`` fit the model's positions.

    The one check that needs the model (its ``max_position_embeddings`` and tokenizer), run right
    after loading it: past the limit a model does not fail, it generates from positions it never
    learned (transformers only prints a "friendly reminder"). Prompt lengths come from a sample of
    256 of this run's tasks.
    """
    limit = getattr(policy.model.config, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit <= 0:
        return
    longest = longest_prompt(policy.encode_prompts, policy.prompt_of, cfg)
    want = cfg.generation.max_completion_length
    if longest + want > limit:
        room = limit - longest
        fix = (f"use --generation.max_completion_length {room} or less, or a model with a longer context"
               if room > 0 else "the prompts alone do not fit: use a model with a longer context, or tasks "
                                "with shorter questions")
        raise ConfigError(f"--generation.max_completion_length {want} does not fit the model: it has "
                          f"{limit} positions (max_position_embeddings) and this run's prompts take up "
                          f"to {longest} tokens; {fix}")
