"""One mask per step: a :class:`~refactx_index.constraint.batch.StepMask` applied to a batch's logits.

Whatever the number of constrained rows, a step costs one host-to-device copy and three
kernels: gather the allowed scores, fill the constrained rows with ``-inf``, scatter the
allowed scores back. The copy carries the constrained rows and the flattened ``(row,
token)`` pairs in one int64 buffer (pinned memory, non-blocking, on an accelerator); on
the CPU the same three steps run on a numpy view of the logits, on the calling thread
(torch's fill of a wide row would go through its intra-op pool: ``bench/bench_masks.py``).

The alternative, a packed bitmask applied by one kernel (xgrammar's
``apply_token_bitmask_inplace``), is measured beside it in ``bench/bench_engines.py``:
the allowed sets of a fact are small (a few to a few thousand ids of a vocabulary of
50k-150k), so the flattened index moves far fewer bytes than a bitmask of the whole
vocabulary per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .batch import StepMask

if TYPE_CHECKING:
    import torch

__all__ = ["MaskApplier"]


class MaskApplier:
    """Applies step masks to logits on one device, reusing its staging buffer.

    On an accelerator the host buffer is pinned and reused; the copy of a step is
    awaited (an event) before the buffer is written again, so the host never overwrites
    ids a pending copy still reads.
    """

    def __init__(self, device: "torch.device | str | None" = None, *, pin_memory: bool | None = None) -> None:
        import torch

        self.device = torch.device(device) if device is not None else torch.device("cpu")
        accel = self.device.type != "cpu"
        self.pin_memory = accel if pin_memory is None else pin_memory
        self._host: torch.Tensor | None = None
        self._copied: object | None = None  # an event recorded after the last copy
        self.kernels = 0  # kernels launched on an accelerator (for benchmarks)
        self.copies = 0

    def __call__(self, logits: "torch.Tensor", mask: StepMask) -> "torch.Tensor":
        """Mask ``logits`` (rows = the step's batch) in place and return them."""
        import torch

        if mask.empty:
            return logits
        if logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64, torch.float16):
            view = logits.detach().numpy()
            kept = view[mask.token_rows, mask.tokens]
            view[mask.rows] = -np.inf
            view[mask.token_rows, mask.tokens] = kept
            return logits
        return self._apply_torch(logits, mask)

    def _apply_torch(self, logits: "torch.Tensor", mask: StepMask) -> "torch.Tensor":
        import torch

        n_rows, n_toks = mask.rows.size, mask.tokens.size
        total = n_rows + 2 * n_toks
        host = self._staging(total)
        packed = host[:total].numpy()
        packed[:n_rows] = mask.rows
        packed[n_rows:n_rows + n_toks] = mask.token_rows
        packed[n_rows + n_toks:] = mask.tokens
        ids = host[:total].to(logits.device, non_blocking=self.pin_memory)
        self.copies += 1
        if logits.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
            self._copied = event
        rows, token_rows, tokens = ids[:n_rows], ids[n_rows:n_rows + n_toks], ids[n_rows + n_toks:]
        kept = logits[token_rows, tokens]
        logits.index_fill_(0, rows, float("-inf"))
        logits.index_put_((token_rows, tokens), kept)
        self.kernels += 3
        return logits

    def _staging(self, size: int) -> "torch.Tensor":
        import torch

        if self._copied is not None:
            self._copied.synchronize()  # type: ignore[attr-defined]
            self._copied = None
        if self._host is None or self._host.numel() < size:
            capacity = max(size, 2 * (self._host.numel() if self._host is not None else 4096))
            self._host = torch.empty(capacity, dtype=torch.int64, pin_memory=self.pin_memory)
        return self._host
