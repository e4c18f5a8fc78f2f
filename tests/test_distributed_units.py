"""The pieces of data-parallel training, on two gloo processes on loopback (no torchrun)."""

from __future__ import annotations

import os
import signal
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dist_launch import free_port
from splattrain.data.loading import load_scene
from splattrain.data.pipeline import DataPipeline
from splattrain.distributed import DistContext
from splattrain.distributed.sync import buckets, parameter_checksums, start_all_reduce
from splattrain.engine.replicas import ReplicaDivergenceError, check_replicas
from splattrain.view_opt import ViewCorrections
from splattrain.strategy.default import DefaultStrategy
from splattrain.strategy.mcmc import MCMCStrategy


def test_buckets_keep_order_and_split_by_size():
    tensors = [torch.zeros(10), torch.zeros(10), torch.zeros(30), torch.zeros(5, dtype=torch.float64), torch.zeros(1)]
    parts = buckets(tensors, max_bytes=100)
    assert [[t.numel() for t in b] for b in parts] == [[10, 10], [30], [5], [1]]
    assert [t for b in parts for t in b] == tensors


def test_early_bytes_below_minus_one_is_a_config_error():
    from splattrain.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.dist_early_bytes -2"):
        DistContext.from_env("gloo", torch.device("cpu"), early_bytes=-2)


def test_checksums_see_any_bit():
    a = torch.randn(100)
    b = a.clone()
    b[37] = torch.nextafter(b[37], torch.tensor(10.0))
    assert not torch.equal(parameter_checksums([a]), parameter_checksums([b]))
    assert torch.equal(parameter_checksums([a]), parameter_checksums([a.clone()]))


def test_global_view_order_is_the_same_whatever_the_world_size(tiny_scene_cfg):
    _, scene = load_scene(tiny_scene_cfg.data)
    background = torch.ones(3)

    def order(views, rank, world_size, steps):
        data = DataPipeline(scene, background, torch.device("cpu"), seed=3, prefetch=False, views=views,
                            rank=rank, world_size=world_size)
        return [data.next_train(step)["image_id"].tolist() for step in range(steps)]

    single = order(4, 0, 1, 30)  # crosses epoch boundaries (48 views)
    ranks = [order(1, r, 4, 30) for r in range(4)]
    pairs = [order(2, r, 2, 30) for r in range(2)]
    for step in range(30):
        assert single[step] == [ranks[r][step][0] for r in range(4)]
        assert single[step] == pairs[0][step] + pairs[1][step]


@pytest.fixture
def tiny_scene_cfg(tmp_path):
    from conftest import tiny_config_text
    from splattrain.engine import load_config

    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path))
    return load_config(tmp_path / "cfg.yaml")


# -- two processes ------------------------------------------------------------------------------
def _worker(rank: int, port: int, body, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    try:
        ctx = DistContext.from_env("gloo", torch.device("cpu"), threads=1)
        queue.put((rank, body(ctx)))
    except BaseException:
        queue.put((rank, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _on_two_ranks(body):
    """Run ``body(ctx)`` on two spawned ranks; returns [rank 0's result, rank 1's result]."""
    spawn = mp.get_context("spawn")
    queue = spawn.Queue()
    port = free_port()
    processes = [spawn.Process(target=_worker, args=(rank, port, body, queue)) for rank in range(2)]
    for process in processes:
        process.start()
    results = dict(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    return [results[0], results[1]]


def _gradients_and_losses(ctx):
    param = torch.nn.Parameter(torch.zeros(3, 2))
    param.grad = torch.full((3, 2), float(ctx.rank + 1))
    optimizer = torch.optim.Adam([param])
    ctx.pending_signal = 0 if ctx.rank == 0 else 15  # SIGTERM on rank 1 only: it rides in the bucket
    losses = ctx.sync_gradients({"p": optimizer}, {"loss": torch.tensor(2.0 * ctx.rank)})
    signum = ctx.agreed_signals
    skip, = ctx.any_rank([ctx.rank])
    return param.grad.tolist(), float(losses["loss"]), skip, signum, ctx.bytes_reduced


def test_gradients_and_losses_are_averaged_and_flags_agreed(two_ranks):
    for grads, loss, skip, signum, sent in two_ranks["gradients"]:
        assert grads == [[1.5, 1.5]] * 3 and loss == 1.0 and (skip, signum) == (1, [0, 15])
        assert sent == 9 * 4  # six gradient values, one loss term and a signal slot per rank, in one bucket


def _early_exchange(ctx):
    """SH bands and positions from one backward pass, at SH degree 1 (3 of 15 bands in use: a copy
    travels) and 3 (all bands: the gradient itself is reduced)."""
    ctx.early.min_bytes = 0  # the tiny bucket travels early too
    out = []
    for degree in (1, 3):
        params = {"means": torch.nn.Parameter(torch.ones(4, 3)), "sh0": torch.nn.Parameter(torch.ones(4, 1, 3)),
                  "shN": torch.nn.Parameter(torch.ones(4, 15, 3))}
        optimizers = {name: torch.optim.Adam([p]) for name, p in params.items()}
        started, sent = ctx.early.started, ctx.bytes_reduced
        ctx.prepare_exchange(params, sh_degree=degree)
        bands = (degree + 1) ** 2 - 1
        loss = float(ctx.rank + 1) * (params["sh0"].sum() + 2.0 * params["shN"][:, :bands].sum()
                                      + 3.0 * params["means"].sum())
        loss.backward()
        started_in_backward = ctx.early.started - started
        losses = ctx.sync_gradients(optimizers, {"loss": loss.detach()}, sh_degree=degree)
        grads = {name: p.grad for name, p in params.items()}
        out.append((degree, started_in_backward, ctx.bytes_reduced - sent, float(losses["loss"]),
                    {name: sorted(set(g[:, :bands].flatten().tolist())) for name, g in grads.items()},
                    grads["shN"][:, bands:].abs().max().item() if bands < 15 else 0.0))
    whole, part = torch.full((4, 15, 3), ctx.rank + 1.0), torch.full((4, 15, 3), ctx.rank + 1.0)[:, :3]
    reduced = [start_all_reduce([t]) for t in (whole, part)]
    aliases = [pending.flats[0].data_ptr() == t.data_ptr() for pending, t in zip(reduced, (whole, part))]
    results = [pending.finish(0.5)[0] for pending in reduced]
    return out, aliases, [sorted(set(r.flatten().tolist())) for r in results]


def test_sh_band_gradients_start_their_exchange_inside_the_backward_pass(two_ranks):
    for rank_result, aliases, averaged in two_ranks["early"]:
        assert aliases == [True, False]  # a lone contiguous gradient is reduced in place, a slice via a copy
        assert averaged == [[1.5], [1.5]]
        for degree, started, sent, loss, values, unused_bands in rank_result:
            bands = (degree + 1) ** 2 - 1
            assert started == 1  # the hook started the bands' all-reduce before sync_gradients ran
            assert sent == 4 * (4 * bands * 3) + 4 * (4 * 3 + 4 * 3 + 1 + 2)  # bands; sh0, means, loss, signals
            assert values == {"means": [4.5], "sh0": [1.5], "shN": [3.0]}  # averages of ranks 1x and 2x
            assert unused_bands == 0.0 and loss == pytest.approx(1.5 * (12 + 24 * bands + 36))


def _statistics(ctx):
    strategy = DefaultStrategy(refine_scale2d_stop_iter=100)
    strategy.set_statistics_reducer(ctx)
    state = {"grad2d": torch.tensor([1.0, 2.0]) * (ctx.rank + 1), "count": torch.tensor([1.0, 0.0]),
             "radii": torch.tensor([0.1, 0.5]) * (2 - ctx.rank)}
    strategy.sync_statistics(state)
    totals = {k: v.tolist() for k, v in state.items()}
    strategy.release_statistics(state)
    return totals, {k: v.tolist() for k, v in state.items()}


def test_statistics_are_summed_before_refinement_and_rank_zero_keeps_the_totals(two_ranks):
    (totals0, after0), (totals1, after1) = two_ranks["statistics"]
    assert totals0 == totals1
    assert totals0["grad2d"] == [3.0, 6.0] and totals0["count"] == [2.0, 0.0]
    assert totals0["radii"] == pytest.approx([0.2, 1.0])
    assert after0 == totals0
    assert after1["grad2d"] == [0.0, 0.0] and after1["count"] == [0.0, 0.0] and after1["radii"] == pytest.approx([0.2, 1.0])


def _mcmc_relocation(ctx):
    torch.manual_seed(5)  # every rank: the same seed and the same parameters
    n = 200
    params = {"means": torch.randn(n, 3), "scales": torch.randn(n, 3) - 3, "quats": torch.randn(n, 4),
              "opacities": torch.randn(n) - 2, "sh0": torch.randn(n, 1, 3), "shN": torch.zeros(n, 3, 3)}
    params = {k: torch.nn.Parameter(v) for k, v in params.items()}
    optimizers = {k: torch.optim.Adam([p], lr=1e-3) for k, p in params.items()}
    strategy = MCMCStrategy(max_gaussians=260, refine_start_iter=0, refine_every=1)
    strategy.set_statistics_reducer(ctx)
    state = strategy.initialize_state()
    for step in range(1, 4):
        strategy.post_backward(params, optimizers, state, step, [{}])
    return parameter_checksums(params.values()).tolist(), len(params["means"])


def test_mcmc_relocation_draws_the_same_on_every_rank(two_ranks):
    (sums0, n0), (sums1, n1) = two_ranks["mcmc"]
    assert n0 == n1 > 200 and sums0 == sums1


def _check(ctx):
    params = {"means": torch.zeros(4, 3), "opacities": torch.zeros(4) + (1e-3 if ctx.rank == 1 else 0.0)}
    no_corrections = ViewCorrections({"type": "none"}, {"type": "none"}, 4, torch.device("cpu"), None, 10)
    try:
        check_replicas(ctx, params, no_corrections, "after step 7")
    except ReplicaDivergenceError as error:
        return str(error)
    return "no error"


def test_replica_check_names_the_first_diverged_parameter(two_ranks):
    for message in two_ranks["check"]:
        assert "parameter 'opacities' differs from rank 0's on rank(s) 1" in message
        assert "after step 7" in message


def _memory_readings(ctx):
    """MemoryBudgetHook's per-step readings (pixels, peak bytes), different on each rank."""
    return ctx.max_over_ranks([16384.0, 1.5e8 + 1e6 * ctx.rank])


def test_a_stop_signal_on_one_rank_stops_both_even_beside_a_snapshot_on_the_other(two_ranks):
    for stop, snapshot, said in two_ranks["signals"]:
        assert (stop, snapshot) == (signal.SIGINT, True)
        assert said == ("warning", "SIGINT received: the run stops after step 7 without a checkpoint "
                        "(no AutoCheckpointHook saves on SIGINT)")


def test_memory_readings_are_the_largest_over_the_ranks(two_ranks):
    assert two_ranks["memory"] == [[16384.0, 1.51e8]] * 2  # both ranks fit and cap from the same numbers


def _signals(ctx):
    """SIGUSR1 on rank 0 and SIGINT on rank 1 before the same gradient exchange: each rides in its
    own slot, and every rank stops after the step (the snapshot asked on rank 0 does not hide the stop)."""
    import signal
    from types import SimpleNamespace

    from splattrain import interrupts
    from splattrain.engine import signals

    param = torch.nn.Parameter(torch.zeros(2))
    param.grad = torch.ones(2)
    with interrupts.during_run():
        os.kill(os.getpid(), signal.SIGUSR1 if ctx.rank == 0 else signal.SIGINT)
        signals.before_exchange(ctx)
        ctx.sync_gradients({"p": torch.optim.Adam([param])}, {"loss": torch.tensor(1.0)})
        stop, snapshot = signals.after_step(ctx)
    return stop, snapshot, signals.describe(stop, True, 7, None, False, "-")


def _everything(ctx):
    return {"gradients": _gradients_and_losses(ctx), "early": _early_exchange(ctx), "statistics": _statistics(ctx), "mcmc": _mcmc_relocation(ctx),
            "check": _check(ctx), "memory": _memory_readings(ctx),
            "signals": _signals(ctx)}


@pytest.fixture(scope="module")
def two_ranks():
    """Every two-rank body above, run once in one pair of processes (starting them is the slow part)."""
    results = _on_two_ranks(_everything)
    for result in results:
        assert isinstance(result, dict), result  # a traceback otherwise
    return {key: [results[0][key], results[1][key]] for key in results[0]}


def test_nproc_shorthand_starts_ranks_and_passes_user_errors_through(tmp_path):
    import subprocess
    import sys

    from dist_launch import environment, write_config
    from splattrain.commands.fit import _without_nproc

    assert _without_nproc(["--nproc", "2", "--config", "x.yaml", "--nproc=3", "a=1"]) == ["--config", "x.yaml", "a=1"]
    config = write_config(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "splattrain", "fit", "--nproc", "2", "--config", str(config),
         f"output_dir={tmp_path / 'run'}", "trainer.dist_backend=nccl"],
        env=environment(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"[rank 1] error: {config}: trainer.dist_backend nccl needs CUDA devices" in result.stderr
    assert result.stderr.count(f"error: {config}: trainer.dist_backend nccl needs CUDA devices") == 2  # rank 0 too
    assert not (tmp_path / "run").exists()


def test_resuming_with_another_global_batch_warns(tmp_path):
    from conftest import tiny_config_text
    from splattrain.engine import load_config
    from splattrain.console import Console
    from splattrain.engine import DefaultTrainer

    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=4))
    DefaultTrainer(load_config(tmp_path / "cfg.yaml"), console=Console(quiet=True)).train()
    warnings = []
    trainer = DefaultTrainer(load_config(tmp_path / "cfg.yaml", ["trainer.batch_size=2", "trainer.max_steps=5"]),
                             console=Console(quiet=True))
    trainer.console.warning = lambda message, once=None: warnings.append(message)
    trainer.train(resume="latest")
    assert any("trained on 1 views per step over all ranks, this run on 2" in w for w in warnings)
