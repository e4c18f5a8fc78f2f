"""MLflow, to a local file store by default (``pip install 'splattrain[mlflow]'``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from ..registry import WRITERS
from .base import Writer

#: MLflow accepts at most this many params per log_batch call, each value at most this long.
_PARAMS_PER_BATCH = 100
_PARAM_VALUE_CHARS = 500


def flatten(config: Mapping[str, Any], prefix: str = "") -> Iterator[Tuple[str, str]]:
    """('a.b.c', 'value') pairs of a nested config, values as strings."""
    for key, value in config.items():
        if isinstance(value, Mapping):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", str(value)[:_PARAM_VALUE_CHARS]


@WRITERS.register("mlflow", aliases=("MlflowWriter",))
class MlflowWriter(Writer):
    """MLflow run: scalars as metrics, image grids as artifacts, the config as params and config.yaml.

    Args:
        tracking_uri: where runs go (default: a file store at <run_dir>/mlruns; also
            ``sqlite:///...`` or a server URL).
        experiment: experiment name, created when missing.
        run_name: run name (default: the run directory's name).
    """

    requires = ("mlflow", "mlflow")

    def __init__(
        self,
        run_dir: str | Path,
        tracking_uri: Optional[str] = None,
        experiment: str = "splattrain",
        run_name: Optional[str] = None,
    ) -> None:
        super().__init__(run_dir)
        mlflow = self.load_requirement()
        from mlflow.entities import Metric, Param

        self._metric, self._param = Metric, Param
        uri = tracking_uri or (self.run_dir / "mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3 refuses the file store unless told it is wanted; a local store is the point here.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = mlflow.MlflowClient(tracking_uri=uri)
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
        self.run_id = self._client.create_run(experiment_id, run_name=run_name or self.run_dir.name).info.run_id

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self._metric(tag, float(value), now, step) for tag, value in scalars.items()]
        self._client.log_batch(self.run_id, metrics=metrics)

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self.write_scalars({tag: value}, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        self._client.log_image(self.run_id, image, artifact_file=f"images/{tag}/step_{step:06d}.png")

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        params = [self._param(key, value) for key, value in flatten(config)]
        for start in range(0, len(params), _PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=params[start : start + _PARAMS_PER_BATCH])
        self._client.log_text(self.run_id, text, "config.yaml")

    def close(self) -> None:
        self._client.set_terminated(self.run_id)
