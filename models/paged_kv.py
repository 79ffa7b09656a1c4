"""Paged KV cache of the golden model (vLLM-style PagedAttention layout).

One pool of ``num_blocks`` physical blocks, each holding ``block_size`` (default 16) token
slots, shared by all requests. Per layer the pool stores

    k[layer], v[layer]: [num_blocks, block_size, num_kv_heads, head_dim]

A request owns a *block table*: the list of physical block ids holding its positions in
order, so position ``p`` lives in block ``table[p // block_size]`` at slot
``p % block_size``. Blocks are taken from the free list only when the sequence grows past
the capacity of the blocks it already holds (on demand, one block per ``block_size``
tokens) and all return to the free list when the request is freed. Every layer uses the
same block table (one allocation covers the K and V of all layers for those positions).

Usage in a step: :meth:`PagedKVCache.extend` reserves slots for the new tokens (allocating
blocks) and returns the first new position; then, per layer, :meth:`write` stores the new
tokens' K/V and :meth:`gather` returns the request's whole history as contiguous arrays.

Errors are :class:`ValueError` naming the request id and the capacity: an unknown request
id, a request that is registered twice, or a pool that has run out of blocks (nothing is
allocated then: allocation is all or nothing).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np

__all__ = ["PagedKVCache", "DEFAULT_BLOCK_SIZE"]

DEFAULT_BLOCK_SIZE = 16


class PagedKVCache:
    """A pool of fixed-size KV blocks and the block tables of the requests using it."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, num_blocks: int,
                 block_size: int = DEFAULT_BLOCK_SIZE, dtype=np.float32):
        for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                            ("head_dim", head_dim), ("num_blocks", num_blocks),
                            ("block_size", block_size)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.num_layers = int(num_layers)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = int(head_dim)
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.dtype = np.dtype(dtype)
        shape = (self.num_layers, self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        #: K and V pools; ``k[layer]`` is ``[num_blocks, block_size, kv_heads, head_dim]``.
        self.k = np.zeros(shape, dtype=self.dtype)
        self.v = np.zeros(shape, dtype=self.dtype)
        # Lowest block id first out: pop() from the end of a descending list.
        self._free: list[int] = list(range(self.num_blocks - 1, -1, -1))
        self._tables: dict[Hashable, list[int]] = {}
        self._lens: dict[Hashable, int] = {}

    @classmethod
    def for_model(cls, cfg, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE,
                  dtype=np.float32) -> "PagedKVCache":
        """A cache shaped for a :class:`~tricut.models.config.ModelConfig`."""
        return cls(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, num_blocks, block_size, dtype)

    # ---- bookkeeping -------------------------------------------------------------------

    def __contains__(self, request_id) -> bool:
        return request_id in self._tables

    @property
    def requests(self) -> list:
        """Ids of the live requests, in order of registration."""
        return list(self._tables)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens: ``ceil(num_tokens / block_size)``."""
        return -(-int(num_tokens) // self.block_size)

    def _require(self, request_id) -> None:
        if request_id not in self._tables:
            raise ValueError(f"unknown request id {request_id!r} (live requests: {len(self._tables)})")

    def add_request(self, request_id) -> None:
        """Register a new, empty request (no blocks are taken until it has tokens)."""
        if request_id in self._tables:
            raise ValueError(f"request id {request_id!r} is already in the KV cache")
        self._tables[request_id] = []
        self._lens[request_id] = 0

    def seq_len(self, request_id) -> int:
        """Tokens stored (or reserved) for the request."""
        self._require(request_id)
        return self._lens[request_id]

    def block_table(self, request_id) -> list[int]:
        """A copy of the request's block table (physical block ids, in position order)."""
        self._require(request_id)
        return list(self._tables[request_id])

    def new_blocks_needed(self, request_id, num_new_tokens: int) -> int:
        """Blocks that :meth:`extend` would allocate to grow the request by ``num_new_tokens``."""
        self._require(request_id)
        have = len(self._tables[request_id])
        return max(0, self.blocks_for(self._lens[request_id] + num_new_tokens) - have)

    def check_capacity(self, growth: Iterable[tuple]) -> None:
        """Raise ``ValueError`` unless every ``(request_id, num_new_tokens)`` can grow at once."""
        growth = list(growth)
        need = sum(self.new_blocks_needed(rid, n) for rid, n in growth)
        if need > len(self._free):
            ids = ", ".join(repr(rid) for rid, _ in growth)
            raise ValueError(
                f"out of KV blocks: request(s) {ids} need {need} new block(s) of {self.block_size} "
                f"tokens but only {len(self._free)} of {self.num_blocks} are free")

    def extend(self, request_id, num_new_tokens: int) -> int:
        """Reserve slots for ``num_new_tokens`` more tokens, allocating blocks as needed.

        Returns the position of the first new token (the old length). All or nothing: if the
        pool cannot supply the blocks, raises ``ValueError`` and changes nothing.
        """
        self._require(request_id)
        if num_new_tokens < 0:
            raise ValueError(f"request {request_id!r}: cannot extend by {num_new_tokens} tokens")
        need = self.new_blocks_needed(request_id, num_new_tokens)
        if need > len(self._free):
            raise ValueError(
                f"out of KV blocks: request {request_id!r} (length {self._lens[request_id]}) needs "
                f"{need} new block(s) of {self.block_size} tokens to grow by {num_new_tokens}, "
                f"but only {len(self._free)} of {self.num_blocks} are free")
        table = self._tables[request_id]
        for _ in range(need):
            table.append(self._free.pop())
        start = self._lens[request_id]
        self._lens[request_id] = start + num_new_tokens
        return start

    def truncate(self, request_id, length: int) -> None:
        """Roll the request back to its first ``length`` tokens (a failed decode step's token
        is dropped); blocks no longer needed return to the pool."""
        self._require(request_id)
        if not 0 <= length <= self._lens[request_id]:
            raise ValueError(f"request {request_id!r}: cannot truncate {self._lens[request_id]} "
                             f"tokens to {length}")
        table = self._tables[request_id]
        while len(table) > self.blocks_for(length):
            self._free.append(table.pop())
        self._lens[request_id] = length

    def free(self, request_id) -> None:
        """Forget the request and return its blocks to the pool (their contents stay stale)."""
        self._require(request_id)
        blocks = self._tables.pop(request_id)
        del self._lens[request_id]
        self._free.extend(reversed(blocks))

    # ---- data --------------------------------------------------------------------------

    def _slots(self, request_id, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        self._require(request_id)
        length = self._lens[request_id]
        if start < 0 or start + count > length:
            raise ValueError(
                f"request {request_id!r}: positions {start}..{start + count - 1} are outside its "
                f"{length} reserved token(s); call extend() first")
        pos = np.arange(start, start + count)
        table = np.asarray(self._tables[request_id], dtype=np.int64)
        return table[pos // self.block_size], pos % self.block_size

    def write(self, layer: int, request_id, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store K/V ``[count, kv_heads, head_dim]`` of positions ``start .. start+count-1``."""
        k = np.asarray(k)
        v = np.asarray(v)
        want = (self.num_kv_heads, self.head_dim)
        if k.ndim != 3 or k.shape[1:] != want or v.shape != k.shape:
            raise ValueError(f"k and v must be [count, {want[0]}, {want[1]}]; got {k.shape}, {v.shape}")
        blocks, offsets = self._slots(request_id, start, k.shape[0])
        self.k[layer, blocks, offsets] = k
        self.v[layer, blocks, offsets] = v

    def gather(self, layer: int, request_id, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """K and V of positions ``0 .. length-1`` (default: all) as contiguous
        ``[length, kv_heads, head_dim]`` arrays (copies)."""
        n = self.seq_len(request_id) if length is None else int(length)
        blocks, offsets = self._slots(request_id, 0, n)
        return self.k[layer, blocks, offsets], self.v[layer, blocks, offsets]
