"""The row changes hooks ask of the trainer (add, clone, split, remove Gaussians): carried out at
once, or, while a step's gradients are live, held and carried out right after the step's update.

A held mask is over the rows the model had when it was asked; it follows every row change made
before it is carried out (the strategy's densification, earlier held changes), as a listener of
the strategy's row reports, so it still names the Gaussians it named."""

from __future__ import annotations

from typing import Any, Callable, List, Mapping

from torch import Tensor

from ..strategy.ops import check_new_rows
from ..strategy.rows import check_mask

#: Carries out one change: (kind, mask or values).
Apply = Callable[[str, Any], None]

KINDS = ("add", "clone", "split", "remove")


class RowEdits:
    """The queue of held row changes and the rule of when they are carried out."""

    def __init__(self) -> None:
        self.holding = False
        self.pending: List[List[Any]] = []  # [kind, mask or values], in the order asked

    def hold(self) -> None:
        """From the step's first render: hold what is asked (nothing carries over from a failed step)."""
        self.holding, self.pending = True, []

    def ask(self, kind: str, payload: Any, params: Mapping[str, Tensor], apply: Apply) -> None:
        """Check ``payload`` against the current rows, then carry it out now or hold it."""
        if kind not in KINDS:
            raise ValueError(f"unknown row change {kind!r}; one of {', '.join(KINDS)}")
        if kind == "add":
            check_new_rows(params, payload)
            payload = {name: value.detach() for name, value in payload.items()}
        else:
            check_mask(payload, len(params["means"]), f"{kind}_gaussians")
            payload = payload.to(params["means"].device)
        if self.holding:
            self.pending.append([kind, payload])
        else:
            apply(kind, payload)

    def follow(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        """A row report (``sources[i]``: the old row of new row ``i``, -1 for a new one): held masks
        move with their rows; new rows are not in them."""
        for edit in self.pending:
            if edit[0] != "add":
                mask = edit[1]
                edit[1] = (sources >= 0) & mask[sources.clamp_min(0)]

    def release(self, apply: Apply) -> int:
        """Stop holding and carry out what was held, in order; returns how many changes."""
        self.holding = False
        done = 0
        while self.pending:
            kind, payload = self.pending.pop(0)
            apply(kind, payload)
            done += 1
        return done
