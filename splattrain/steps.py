"""Step-valued options: how a plugin says which of its options count training steps.

A run's length is ``trainer.max_steps``; a preset says for which length its step settings are
written (``trainer.schedule_steps``), and ``trainer.steps_scaler`` multiplies everything. Each
component marks its own step-valued options where it declares them, by annotation, so nothing
is left unscaled by a list kept elsewhere:

- :data:`Steps`: a point in the run or a period (``refine_stop_iter``, ``interval``): follows
  ``schedule_steps`` and ``steps_scaler``;
- :data:`Window`: how many steps of statistics a decision reads (``refine_every``): follows
  ``steps_scaler`` only (a shorter run would otherwise decide from fewer views);
- :data:`Count`: a whole number that is no step count although its name sounds like one.

A strategy field or hook option of type ``int`` whose name sounds like a step count
(``*_iter``, ``*_every``, ``*_steps``, ``interval``, ``begin``, ...) must carry one of them:
:func:`check_step_annotations` refuses the class otherwise.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import ConfigError

Steps = typing.Annotated[int, "steps"]
Window = typing.Annotated[int, "window"]
Count = typing.Annotated[int, "count"]

_STEP_LIKE = re.compile(r"(^|_)(iter|iters|every|steps?|interval|begin|start|stop|until|warmup)($|_)")


def step_kinds(cls: Any) -> Dict[str, str]:
    """``{option: "steps" | "window"}`` for the options of ``cls`` (a dataclass's fields, else its
    ``__init__`` parameters) annotated :data:`Steps` / :data:`Window` (also inside ``Optional``)."""
    return {name: kind for name, kind in _annotations(cls).items() if kind in ("steps", "window")}


def _annotations(cls: Any) -> Dict[str, Optional[str]]:
    """Option name -> its step kind ("steps", "window", "count", or None for an unmarked int;
    options of other types are left out)."""
    target = cls if dataclasses.is_dataclass(cls) else getattr(cls, "__init__", cls)
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception:  # unresolvable annotations: nothing is known to be a step count
        return {}
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else \
        [p for p in inspect.signature(target).parameters if p != "self"]
    kinds: Dict[str, Optional[str]] = {}
    for name in names:
        hint = hints.get(name)
        for candidate in (hint, *typing.get_args(hint)):  # Optional[Steps] is Union[Steps, None]
            metadata = getattr(candidate, "__metadata__", ())
            if metadata and metadata[0] in ("steps", "window", "count"):
                kinds[name] = metadata[0]
                break
        else:
            if hint is int or int in typing.get_args(hint):
                kinds[name] = None
    return kinds


def check_step_annotations(cls: Any, what: str) -> None:
    """ConfigError naming the options of ``cls`` that look like step counts but are plain ``int``."""
    unmarked = [name for name, kind in _annotations(cls).items() if kind is None and _STEP_LIKE.search(name)]
    if unmarked:
        raise ConfigError(
            f"{what} {cls.__name__}: option(s) {', '.join(unmarked)} look like step counts; annotate each "
            "Steps (follows the run's length), Window (a statistics window) or Count (not a step count), "
            "from splattrain.steps"
        )


def scale_count(value: Any, factor: float) -> Any:
    """A step count (or a list of them) times ``factor``; a positive count stays at least 1, and
    zero, negative and None (off) stay as they are."""
    if isinstance(value, (list, tuple)):
        return [scale_count(v, factor) for v in value]
    if value is None or isinstance(value, bool) or int(value) <= 0:
        return value
    return max(1, int(round(int(value) * factor)))


def scale_options(kinds: Mapping[str, str], options: Dict[str, Any], defaults: Mapping[str, Any], run: float,
                  window: float, where: str) -> List[Tuple[str, Any, Any]]:
    """Scale ``options`` in place (the ``Steps`` ones by ``run``, the ``Window`` ones by
    ``window``; an option not given takes its default from ``defaults`` and is written into
    ``options`` when it changes); returns ``(key path, written, scaled)`` for each change."""
    changes = []
    for name, kind in kinds.items():
        factor = run if kind == "steps" else window
        if factor == 1.0:
            continue
        written = options.get(name, defaults.get(name))
        if written is None or written is dataclasses.MISSING:
            continue
        scaled = scale_count(written, factor)
        if scaled != written:
            options[name] = scaled
            changes.append((f"{where}.{name}", written, scaled))
    return changes


def option_defaults(cls: Any) -> Dict[str, Any]:
    """The default of each option of ``cls`` (a dataclass's fields, else its ``__init__``'s)."""
    if dataclasses.is_dataclass(cls):
        return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
