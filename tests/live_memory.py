"""The peak bytes of live tensor storages on any device: what torch.cuda.max_memory_allocated counts on a GPU (less its
allocator's rounding), measured on the CPU, where torch keeps no such count."""

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    """Inside, every storage an operation creates counts until it is freed; `peak` is the largest total. Storages
    made before (weights, inputs) are named by `known` so that views of them do not count."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.sizes: dict[int, int] = {}  # data pointer -> bytes (0 for storages made before)

    def known(self, tensors: Iterable[torch.Tensor]) -> None:
        for t in tensors:
            self.sizes[t.untyped_storage().data_ptr()] = 0

    def _count(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if key in self.sizes or size == 0:
            return
        self.sizes[key] = size
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, size)

    def _free(self, key: int, size: int) -> None:
        if self.sizes.get(key) == size:
            del self.sizes[key]
            self.live -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._count(t)
        return out
