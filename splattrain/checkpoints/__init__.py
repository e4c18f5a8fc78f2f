"""Checkpoints: the file format and reading (:mod:`~splattrain.checkpoints.files`), what a
checkpoint must hold (:mod:`~splattrain.checkpoints.schema`), the renderer's entry
(:mod:`~splattrain.checkpoints.renderer_state`) and rescue checkpoints after a failure
(:mod:`~splattrain.checkpoints.rescue`). Capturing a run into a checkpoint and restoring one is
the engine's (:mod:`splattrain.engine.checkpointing`)."""
