"""A preallocated KV cache written in place: no concatenation per step, cropping is a length change.

Lookahead keeps a step's accepted entries and drops the rest; here that is a copy of a few slots
and a new ``length``. Buffers grow (doubling) only when a generation outruns its first estimate.
"""

from __future__ import annotations

import torch


class StaticKVCache:
    """Keys and values of every layer, ``[capacity, kv_heads, head_dim]`` each; ``length`` slots used.

    Time comes first so that the entries up to any slot are one contiguous block (what the compiled
    1-token step takes); attention gets them as ``[1, kv_heads, slots, head_dim]`` views."""

    def __init__(self, layers: int, capacity: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.capacity = max(1, capacity)
        self.length = 0

    def reserve(self, slots: int) -> None:
        """Make room for ``slots`` slots in all (existing entries kept)."""
        if slots <= self.capacity:
            return
        self.capacity = max(slots, 2 * self.capacity)
        for buffers in (self.keys, self.values):
            for i, old in enumerate(buffers):
                if old is not None:
                    new = old.new_zeros(self.capacity, *old.shape[1:])
                    new[: self.length] = old[: self.length]
                    buffers[i] = new

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store a step's ``[1, kv_heads, q, head_dim]`` entries after ``length``; views of all entries up to them.

        ``length`` itself moves on only with :meth:`advance`, once every layer has written.
        """
        end = self.length + keys.shape[2]
        key_buffer, value_buffer = self.buffers(layer, keys)
        key_buffer[self.length : end] = keys[0].transpose(0, 1)
        value_buffer[self.length : end] = values[0].transpose(0, 1)
        return key_buffer[:end].permute(1, 0, 2)[None], value_buffer[:end].permute(1, 0, 2)[None]

    def buffers(self, layer: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A layer's whole key and value buffers; allocated on first use, with the heads, head size, dtype
        and device of ``like`` (``[1, kv_heads, q, head_dim]``, what the layer computes)."""
        if self.keys[layer] is None:
            self._allocate(layer, like.shape[1], like.shape[3], like.dtype, like.device)
        return self.keys[layer], self.values[layer]  # type: ignore[return-value]

    def all_buffers(
        self, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Every layer's whole key and value buffers (allocated on first use), as this cache's own lists: the
        same list objects from step to step, their tensors replaced when :meth:`reserve` grows them."""
        for layer, buffer in enumerate(self.keys):
            if buffer is None:
                self._allocate(layer, kv_heads, head_dim, dtype, device)
        return self.keys, self.values  # type: ignore[return-value]

    def _allocate(self, layer: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        shape = (self.capacity, kv_heads, head_dim)
        self.keys[layer] = torch.zeros(shape, dtype=dtype, device=device)
        self.values[layer] = torch.zeros(shape, dtype=dtype, device=device)

    def advance(self, tokens: int) -> None:
        self.length += tokens

    def keep(self, past: int, step_size: int, sources: list[int]) -> None:
        """After a step of ``step_size`` slots from ``past``: keep slot ``past`` (x) and the step slots
        ``sources`` (offsets from ``past``), moved right after x in order; drop the rest."""
        accepted = len(sources)
        if sources and sources != list(range(1, 1 + accepted)):  # not already in place
            src: torch.Tensor | None = None
            for buffers in (self.keys, self.values):
                for buffer in buffers:
                    if buffer is None:
                        continue
                    if src is None:
                        src = torch.tensor([past + s for s in sources], device=buffer.device)
                    buffer[past + 1 : past + 1 + accepted] = buffer[src]
        self.length = past + 1 + accepted
