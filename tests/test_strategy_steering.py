"""The strategy's three calls and what surrounds them: the step's StrategyContext, statistics that
add up over the ranks, and the trainer's row calls (add, clone, split, remove Gaussians) with the
optimizer state, the strategy state and the listeners kept in step."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Dict, List

import pytest
import torch

from conftest import REPO
from resume_check import make_trainer, single_thread  # noqa: F401
from splattrain import STRATEGIES, Hook, Strategy, StrategyContext
from splattrain.strategy import ops

#: The default strategy refining (and pruning) at steps 2 and 4, never growing; no opacity reset.
NO_GROWTH = ["strategy.refine_start_iter=1", "strategy.refine_every=2", "strategy.grow_grad2d=1e9",
             "strategy.reset_every=1000", "strategy.prune_opa=0.01"]


class RowTracker:
    """Follows every row report: ``ids[i]`` is the row at the start that row ``i`` continues (-1: new)."""

    def __init__(self, count: int) -> None:
        self.ids = torch.arange(count)
        self.reports: List[int] = []

    def __call__(self, sources: torch.Tensor, params) -> None:
        self.ids = torch.where(sources >= 0, self.ids[sources.clamp_min(0)], -1)
        self.reports.append(len(sources))


def assert_aligned(trainer) -> None:
    """Every optimizer holds the model's parameter, with state of its shape; the per-Gaussian
    strategy state has one row per Gaussian."""
    n = trainer.model.num_gaussians
    for name, optimizer in trainer.optimizers.items():
        param = optimizer.param_groups[0]["params"][0]
        assert param is trainer.model.params[name], name
        assert optimizer.state[param]["exp_avg"].shape == param.shape, name
    for key, value in trainer.strategy_state.items():
        if isinstance(value, torch.Tensor):
            assert len(value) == n, key


class RowCalls(Hook):
    """After step 1 (no step running): add three, clone two, split two, remove one; after step 2:
    nothing; each result checked as it is made."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker: RowTracker | None = None
        self.seen: Dict[str, Any] = {}

    def before_train(self, trainer) -> None:
        self.tracker = RowTracker(trainer.model.num_gaussians)
        trainer.on_gaussians_moved(self.tracker)

    def after_train_iter(self, trainer, step: int, batch, outputs) -> None:
        if step != 1:
            return
        params, n = trainer.model.params, trainer.model.num_gaussians
        new = {name: torch.randn(3, *p.shape[1:]) for name, p in params.items()}
        trainer.add_gaussians(new)
        assert trainer.model.num_gaussians == n + 3
        self.seen["added"] = {name: params[name][-3:].detach().clone() for name in params}, new
        rows = torch.zeros(n + 3, dtype=torch.bool)
        rows[[5, 7]] = True
        originals = params["means"][rows].detach().clone()
        trainer.clone_gaussians(rows)
        self.seen["cloned"] = originals, params["means"][-2:].detach().clone()
        rows = torch.zeros(n + 5, dtype=torch.bool)
        rows[[10, 11]] = True
        trainer.split_gaussians(rows)
        assert trainer.model.num_gaussians == n + 7
        rows = torch.zeros(n + 7, dtype=torch.bool)
        rows[0] = True
        trainer.remove_gaussians(rows)
        self.seen["count"] = trainer.model.num_gaussians
        with pytest.raises(ValueError, match="clone_gaussians: the mask must be a bool tensor of"):
            trainer.clone_gaussians(torch.zeros(3, dtype=torch.bool))
        with pytest.raises(ValueError, match="missing: shN"):
            trainer.add_gaussians({name: value for name, value in new.items() if name != "shN"})
        assert_aligned(trainer)


def test_row_calls_keep_optimizers_and_strategy_state_aligned_and_are_heard(tmp_path):
    hook = RowCalls()
    trainer = make_trainer(tmp_path, "rows", steps=3, overrides=NO_GROWTH, hooks=[hook])
    start = trainer.model.num_gaussians
    trainer.train()
    added, new = hook.seen["added"]
    for name in new:
        assert torch.equal(added[name], new[name]), name  # the values given, in the model's units
    originals, clones = hook.seen["cloned"]
    assert torch.equal(originals, clones)
    assert hook.seen["count"] == start + 6
    assert hook.tracker.reports[:4] == [start + 3, start + 5, start + 7, start + 6]  # every change reported
    assert_aligned(trainer)


class HeldClone(Hook):
    """In after_backward of step 2 (gradients live; the strategy prunes after this step), asks to
    clone rows 40..44 and checks that nothing changed yet."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker: RowTracker | None = None
        self.counts: Dict[str, int] = {}

    def before_train(self, trainer) -> None:
        with torch.no_grad():  # rows 0..9 are faint: the strategy prunes them after step 2
            trainer.model.params["opacities"][:10] = -10.0
        self.tracker = RowTracker(trainer.model.num_gaussians)
        trainer.on_gaussians_moved(self.tracker)

    def after_backward(self, trainer, step: int, outputs) -> None:
        if step == 2:
            rows = torch.zeros(trainer.model.num_gaussians, dtype=torch.bool)
            rows[40:45] = True
            trainer.clone_gaussians(rows)
            self.counts["asked"] = trainer.model.num_gaussians

    def after_train_iter(self, trainer, step: int, batch, outputs) -> None:
        if step == 2:
            self.counts["after"] = trainer.model.num_gaussians


def test_a_row_call_made_while_gradients_are_live_waits_for_the_update_and_follows_its_rows(tmp_path):
    hook = HeldClone()
    trainer = make_trainer(tmp_path, "held", steps=3, overrides=NO_GROWTH, hooks=[hook])
    start = trainer.model.num_gaussians
    trainer.train()
    assert hook.counts["asked"] == start  # held: the step's gradients were live
    pruned = start - int((hook.tracker.ids >= 0).sum())
    assert pruned >= 10 and hook.counts["after"] == start - pruned + 5
    ids = hook.tracker.ids
    clones = (ids == -1).nonzero().flatten()
    assert len(clones) == 5 and clones.tolist() == list(range(len(ids) - 5, len(ids)))
    means = trainer.model.params["means"].detach()
    for clone, original in zip(clones.tolist(), range(40, 45)):  # the rows named, where the pruning moved them
        row = int((ids == original).nonzero())
        assert row < original  # the faint rows before it are gone
        torch.testing.assert_close(means[clone], means[row], atol=1e-2, rtol=0)  # one step of Adam apart
    assert_aligned(trainer)


# -- the step context ---------------------------------------------------------------------------
@STRATEGIES.register("context_probe")
@dataclass
class ContextProbe(Strategy):
    """Records the context of every step."""

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        return {}

    def step_post_backward(self, params, optimizers, state, step, info, context=None) -> None:
        self.__dict__.setdefault("seen", []).append((step, info, context))


@STRATEGIES.register("positional_probe")
@dataclass
class PositionalProbe(Strategy):
    """gsplat's positional signature: no ``context``."""

    def step_post_backward(self, params, optimizers, state, step, info) -> None:
        self.__dict__.setdefault("seen", []).append(step)


def test_a_strategy_gets_one_context_per_step_and_a_positional_one_none(tmp_path):
    overrides = ["strategy={type: context_probe}", "optim.accumulate_steps=2", "trainer.val_interval=2"]
    trainer = make_trainer(tmp_path, "context", steps=3, overrides=overrides)
    trainer.train()
    seen = trainer.strategy.seen
    assert [step for step, _, _ in seen] == [1, 2, 3]
    for step, info, context in seen:
        assert isinstance(context, StrategyContext) and context.step == step
        assert context.info is info and context.render.info is info and len(context.infos) == 2
        assert context.infos[-1] is info and context.infos[0] is not info  # every micro-batch's info
        assert context.batch["image"].shape[0] == 2 and context.batch["step"] == step
        assert context.renderer is trainer.renderer
    assert seen[0][2].last_metrics == {} and seen[2][2].last_metrics["step"] == 2  # validated after step 2
    positional = make_trainer(tmp_path, "positional", steps=2, overrides=["strategy={type: positional_probe}"])
    positional.train()
    assert positional.strategy.seen == [1, 2]


# -- statistics over the ranks ------------------------------------------------------------------
class DoublingReducer:
    """Two ranks that saw the same: the sum over the ranks is twice each increment."""

    def __init__(self) -> None:
        self.calls = 0

    def sum_statistics(self, tensors: List[torch.Tensor]) -> None:
        self.calls += 1
        for tensor in tensors:
            tensor.mul_(2)


def test_add_statistics_holds_the_totals_over_the_ranks():
    strategy, state = Strategy(), {}
    strategy.add_statistics(state, grad=torch.tensor([1.0, 2.0]), seen=torch.tensor([1, 0]))
    assert state["grad"].tolist() == [1.0, 2.0] and state["seen"].dtype == torch.float32
    reducer = DoublingReducer()
    strategy.set_statistics_reducer(reducer)
    increment = torch.tensor([0.5, 0.5])
    strategy.add_statistics(state, grad=increment, seen=torch.tensor([1, 1]))
    assert reducer.calls == 1 and increment.tolist() == [0.5, 0.5]  # the caller's tensor is left alone
    assert state["grad"].tolist() == [2.0, 3.0] and state["seen"].tolist() == [3.0, 2.0]
    assert strategy.reduced_statistics(state) == {}  # nothing left to combine before a checkpoint


# -- the docs give every op and the three calls with their signatures --------------------------------
def _signature(function) -> str:
    parts = [p.name if p.default is p.empty else f"{p.name}={p.default!r}"
             for p in inspect.signature(function).parameters.values() if p.name != "self"]
    return f"{function.__name__}({', '.join(parts)})"


def test_extending_docs_give_every_op_and_the_three_calls_with_their_signatures():
    docs = (REPO / "docs" / "extending.md").read_text()
    section = docs[docs.index("## Densification strategies"):docs.index("## Renderers")]
    functions = [f for name, f in vars(ops).items() if inspect.isfunction(f) and f.__module__ == ops.__name__
                 and not name.startswith("_")]
    assert len(functions) >= 8
    for function in functions + [Strategy.initialize_state, Strategy.step_pre_backward, Strategy.step_post_backward]:
        assert f"`{_signature(function)}`" in section, _signature(function)
    first = [section.index(f"`{name}(") for name in ("initialize_state", "step_pre_backward", "step_post_backward")]
    assert first == sorted(first)  # listed in the order the trainer calls them
