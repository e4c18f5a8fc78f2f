"""ViewerHook: watch and steer a run in the browser (viser), between steps."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from .. import interrupts
from ..registry import HOOKS
from .base import Hook


@HOOKS.register()
class ViewerHook(Hook):
    """Serves a web page showing the current Gaussians from the browser's camera while training
    runs, with the training cameras, live stats, Pause / Resume and "save checkpoint now".

    Everything the page asks for is done on the training thread in ``after_train_iter``,
    between two steps: renders (under ``torch.no_grad``, drawing no random numbers), and asks to
    pause (the trainer waits after the step until Resume) and for checkpoints. A paused and resumed run is bit-identical
    to one never paused. Viewer renders are throttled so training keeps at least
    ``train_share`` of the time; a still view is re-rendered every ``refresh`` seconds and sent
    only when it changed visibly; a moving camera gets half-resolution images until it stops. With
    no browser connected the hook costs a few microseconds a step.

    Off by default: ``default_hooks.viewer: {port: 8080}`` or ``splattrain fit ... --viewer [PORT]``.
    Needs the ``viewer`` extra (``pip install 'splattrain[viewer]'``). See docs/viewer.md.

    Args:
        port: TCP port (0: any free port). A port in use is an error naming it.
        host: address to listen on; 127.0.0.1 keeps the page on this machine (see docs/viewer.md
            for ssh -L), 0.0.0.0 opens it to the network.
        resolution: initial long side of the rendered image in pixels (64..2048).
        train_share: initial share of the time training keeps (0.1..1.0; 1.0 renders only while paused).
        render_mode: initial mode: rgb, depth or alpha.
        refresh: initial seconds between re-renders of a still view while training (0.1..600); the
            image is sent only when it changed visibly (each costs a browser without a GPU a redraw of the page).
        cameras: show the camera frustums at first (the page has a checkbox).
        thumbnails: show each training image on its camera frustum.
        paused: start paused (the page opens before the first step).
        allow_origins: other web origins (``http(s)://host[:port]``, or ``"*"``) whose pages may
            connect; by default only the viewer's own page may (a page from another site open in
            the same browser is refused).
    """

    priority = 97  # after the checkpoint hooks

    def __init__(self, port: int = 8080, host: str = "127.0.0.1", resolution: int = 512, train_share: float = 0.9,
                 render_mode: str = "rgb", refresh: float = 10.0, cameras: bool = True,
                 thumbnails: bool = True, paused: bool = False, allow_origins: Optional[List[str]] = None) -> None:
        super().__init__()
        from ..errors import ConfigError
        from ..viewer.images import RENDER_MODES
        from ..viewer.guard import check_allow_origins
        from ..viewer.server import check_port_free, import_viser

        if render_mode not in RENDER_MODES:
            raise ConfigError(f"ViewerHook render_mode {render_mode!r}: use one of {', '.join(RENDER_MODES)}")
        if not 0.1 <= float(train_share) <= 1.0:
            raise ConfigError(f"ViewerHook train_share {train_share}: use a value in [0.1, 1.0]")
        if not 0.1 <= float(refresh) <= 600.0:
            raise ConfigError(f"ViewerHook refresh {refresh}: use a number of seconds in [0.1, 600]")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"ViewerHook port {port!r}: use a TCP port in 0..65535 (0: any free port)")
        if not isinstance(resolution, int) or not 64 <= resolution <= 2048:
            raise ConfigError(f"ViewerHook resolution {resolution!r}: use a whole number of pixels in [64, 2048]")
        self.allow_origins = check_allow_origins(allow_origins, "ViewerHook allow_origins")
        import_viser()
        check_port_free(host, int(port))
        self.port = int(port)
        self.host = host
        self.resolution = int(resolution)
        self.train_share = float(train_share)
        self.render_mode = render_mode
        self.refresh = float(refresh)
        self.cameras = bool(cameras)
        self.thumbnails = thumbnails
        self.start_paused = paused
        self.server = None
        self.service = None
        self.budget = None
        self.paused_seconds = 0.0
        self._rendered = 0.0  # seconds of viewer renders in the last step (the engine's clock counts them)
        self._last_stats = 0.0
        self._trainer = None

    # -- life cycle ----------------------------------------------------------------------
    def before_run(self, trainer) -> None:
        from ..viewer.launch import open_viewer
        from ..viewer.server import ViewerSettings
        from ..viewer.service import RenderBudget

        settings = ViewerSettings(mode=self.render_mode, resolution=self.resolution, train_share=self.train_share,
                                  refresh=self.refresh, show_cameras=self.cameras)
        data = trainer.data
        viewer = open_viewer(trainer.console, trainer.run_name, trainer.renderer, trainer.background,
                             trainer.run_dir / "viewer", self.host, self.port, training=True, settings=settings,
                             allow_origins=self.allow_origins, train=data.train_frames, test=data.test_frames,
                             scene_scale=trainer.scene_scale, thumbnails=self.thumbnails)
        self.server, self.service = viewer.server, viewer.service
        self.budget = RenderBudget(self.train_share)
        self._trainer = trainer
        if self.start_paused:
            self.server.set_paused(True)

    def before_train(self, trainer) -> None:
        self._update_stats(trainer, force=True)
        if self.server is not None and self.server.paused:
            self._ask_pause(trainer)

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        server = self.server
        self.budget.share = server.settings.train_share
        # training earns render time: the engine's step time, less this hook's renders it holds
        self.budget.earn(max(0.0, trainer.clock.step_seconds - self._rendered))
        self._rendered = 0.0
        if server.save_requested and server.take_save_request():
            self._ask_save(trainer)
        if server.num_clients:
            if self.budget.available:
                self._rendered = self.service.serve_one(trainer.model, outputs["sh_degree"], server.settings.refresh)
                self.budget.spend(self._rendered)
            self._update_stats(trainer)
        if server.paused:
            self._ask_pause(trainer, outputs["sh_degree"])

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        self._update_stats(trainer, force=True)

    def after_train(self, trainer) -> None:
        self._update_stats(trainer, force=True, finished=True)

    def after_run(self, trainer) -> None:
        if self.server is not None:
            self.server.close()

    # -- pause -------------------------------------------------------------------------------
    def pause(self) -> None:
        """Ask the run to pause after the current step (what the Pause button does)."""
        self.server.set_paused(True)

    def resume(self) -> None:
        """Let a paused run continue (what the Resume button does)."""
        self.server.set_paused(False)

    def _ask_pause(self, trainer, sh_degree: Optional[int] = None) -> None:
        """Ask the trainer to pause after this step until Resume (or a signal that stops the
        run): while it waits it calls back, and the viewer serves its renders and asks for the
        checkpoints its Save button wants."""
        from ..viewer.server import wait_for

        degree = trainer.schedule.sh_degree_at(max(1, trainer.step)) if sh_degree is None else sh_degree
        started = time.perf_counter()
        trainer.console.info(f"viewer: paused at step {trainer.step}")
        self._update_stats(trainer, force=True)

        def wait() -> bool:
            if self.server.paused and interrupts.pending() is None:
                if self.server.take_save_request():
                    self._ask_save(trainer)
                self.service.serve_waiting(trainer.model, degree)
                wait_for(self.server.wake, 0.1)
                if self.server.paused and interrupts.pending() is None:
                    return True
            self.paused_seconds += time.perf_counter() - started
            if self.server.paused:  # a stop signal ends the pause: the run stops at the trainer's next safe point
                self.server.set_paused(False)
            else:
                trainer.console.info(f"viewer: resumed at step {trainer.step}")
            self._update_stats(trainer, force=True)
            return False

        trainer.request_pause(wait)

    def _ask_save(self, trainer) -> None:
        trainer.request_checkpoint()
        path = trainer.checkpoint_dir / f"step_{trainer.step:06d}.pt"
        trainer.console.info(f"viewer: saving a checkpoint at step {trainer.step} to {path}")
        self.server.notify(None, "Checkpoint saved", str(path))

    # -- stats -------------------------------------------------------------------------------
    def status(self) -> Dict[str, Any]:
        """What the stats panel shows: step, max_steps, paused, gaussians, ema_loss (the engine's
        ``trainer.loss_average``, read back here), psnr, steps_per_second (from ``trainer.clock``),
        clients, url."""
        trainer = self._trainer
        average = trainer.loss_average if trainer else None
        return {
            "step": trainer.step if trainer else 0,
            "max_steps": trainer.max_steps if trainer else 0,
            "paused": bool(self.server and self.server.paused),
            "gaussians": trainer.model.num_gaussians if trainer else 0,
            "ema_loss": float(average) if average is not None else None,
            "psnr": trainer.last_metrics.get("psnr") if trainer else None,
            "steps_per_second": trainer.clock.steps_per_second if trainer else 0.0,
            "clients": self.server.num_clients if self.server else 0,
            "url": self.server.url if self.server else None,
        }

    def _update_stats(self, trainer, force: bool = False, finished: bool = False) -> None:
        now = time.monotonic()
        if self.server is None or (not force and now - self._last_stats < 0.5):
            return
        from ..viewer.session import stats_markdown

        self._last_stats = now
        state = "finished" if finished else ("paused" if self.server.paused else "training")
        self.server.set_stats(stats_markdown(self.status(), state))

