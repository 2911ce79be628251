"""A policy's weights as the bytes a broadcast version carries, and putting them back atomically.

``encode_state`` writes what a checkpoint of the policy holds (``Policy.trained_state``: the whole
model, or only the LoRA adapter) as one safetensors file in memory. ``apply_state`` is the
follower's side: the bytes (already verified chunk by chunk against the source's signed manifest)
are parsed, checked tensor by tensor against this policy (names, shapes, dtypes, finite values:
a source is a peer, and a signed NaN is still a NaN), and loaded under ``Policy.weights_lock``,
which ``Policy.generate`` holds for a whole call, so no completion is ever sampled from half of
one version and half of another.
"""

from __future__ import annotations

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from swarm_node.policies.errors import PolicyError

__all__ = ["encode_state", "apply_state", "decode_state", "state_format", "tensors_for_save", "WeightStateError"]


class WeightStateError(PolicyError):
    """The bytes of a version are not weights this policy can take."""


def tensors_for_save(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous, unshared copies: safetensors refuses shared storage (tied weights)."""
    out, seen = {}, set()
    for key, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{key!r} is a {type(t).__name__}, not a tensor")
        t = t.detach().to("cpu")
        ptr = t.untyped_storage().data_ptr()
        if not t.is_contiguous() or (ptr != 0 and ptr in seen):
            t = t.clone(memory_format=torch.contiguous_format)
        seen.add(t.untyped_storage().data_ptr())
        out[key] = t
    return out


def state_format(policy) -> str:
    return "safetensors-lora" if policy.adapter_only else "safetensors-full"


def encode_state(policy) -> tuple[bytes, str]:
    """(safetensors bytes, format) of the policy's trained state, on the CPU."""
    with policy.weights_lock:  # a consistent copy, even if another thread is loading
        state = tensors_for_save(policy.trained_state())
    return st_save(state), state_format(policy)


def decode_state(policy, data: bytes, format: str) -> dict[str, torch.Tensor]:
    """Parse and check, without touching the policy. Raises ``WeightStateError``."""
    if format != state_format(policy):
        raise WeightStateError(f"a {format} version cannot be applied to a {state_format(policy)} policy")
    try:
        state = st_load(data)
    except Exception as e:  # safetensors raises its own error types on a bad header
        raise WeightStateError(f"not a safetensors file: {e}") from e
    want = policy.trained_state()
    if set(state) != set(want):
        missing, extra = sorted(set(want) - set(state))[:3], sorted(set(state) - set(want))[:3]
        raise WeightStateError(f"the tensors are not this policy's (missing {missing}, unexpected {extra})")
    for k, t in state.items():
        if tuple(t.shape) != tuple(want[k].shape) or t.dtype != want[k].dtype:
            raise WeightStateError(f"{k}: {tuple(t.shape)} {t.dtype}, this policy has "
                                   f"{tuple(want[k].shape)} {want[k].dtype}")
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise WeightStateError(f"{k} holds NaN or infinite values")
    return state


def apply_state(policy, data: bytes, format: str) -> None:
    """Check, then load under the weights lock: all of the version or none of it."""
    state = decode_state(policy, data, format)
    device = policy.device
    state = {k: v.to(device) for k, v in state.items()}  # copied before the lock: the swap is short
    with policy.weights_lock:
        policy.load_trained_state(state)
