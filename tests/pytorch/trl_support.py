"""What the TRL trainer tests share: where step two's fused-head backward starts."""

from __future__ import annotations


def fused_backward_start(tracker) -> int:
    """Index of step two's fused-head backward: its fp32 gradient(s), then the tile buffer."""
    operations = tracker.timeline
    for i, (phase, operation, _) in enumerate(operations):
        if phase == "backward (2)" and operation == "aten.empty.memory_format":
            while operations[i - 1][1] == "aten.zeros.default":
                i -= 1
            return i
    raise AssertionError("no fused-head backward in the tracked step")
