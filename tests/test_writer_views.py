"""Writers receive each validation's per-view scores through ``Writer.write_views``; the JSONL
writer keeps them as one line per validation in val_views.jsonl."""

from __future__ import annotations

import json

from resume_check import make_trainer, single_thread  # noqa: F401

RECORDING = '''
from splattrain import WRITERS, Writer


@WRITERS.register(force=True)
class ViewRecorder(Writer):
    """Keeps what write_views received."""

    received = []

    def write_views(self, views, step):
        ViewRecorder.received.append((step, [dict(v) for v in views]))
'''


def test_every_validation_reaches_the_writers_view_by_view(tmp_path):
    module = tmp_path / "recorder.py"
    module.write_text(RECORDING)
    extra = f"imports: [{module}]\n"
    trainer = make_trainer(tmp_path, "run", steps=6, extra=extra,
                           overrides=["trainer.val_interval=3", "writers=[{type: jsonl}, {type: ViewRecorder}]"])
    trainer.train()
    from splattrain.registry import WRITERS

    received = WRITERS.get("ViewRecorder").received
    views = len(trainer.data.test_frames)
    assert [step for step, _ in received] == [3, 6]
    assert all(len(rows) == views for _, rows in received)
    last = received[-1][1]
    assert [r["view"] for r in last] == [v["view"] for v in trainer.val_per_view]
    assert [r["psnr"] for r in last] == [v["psnr"] for v in trainer.val_per_view]
    per_view = [json.loads(line) for line in (tmp_path / "run" / "val_views.jsonl").read_text().splitlines()]
    assert [line["step"] for line in per_view] == [3, 6]
    assert [v["psnr"] for v in per_view[-1]["views"]] == [v["psnr"] for v in trainer.val_per_view]
