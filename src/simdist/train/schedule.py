"""Learning rate: linear warm-up to the peak, then cosine decay to the final rate."""

from __future__ import annotations

import math


def learning_rate(step: int, *, peak: float, final: float, warmup: int, total: int) -> float:
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return final + 0.5 * (peak - final) * (1.0 + math.cos(math.pi * progress))
