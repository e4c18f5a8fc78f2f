"""Bounded walks over nested data read from a file (a checkpoint's state, a config's values).

Unpickling and YAML aliases can build a list that contains itself, or a few shared lists that
expand, when walked, to more entries than there are atoms in the world. :func:`walk_nested`
visits every entry (dict values, list and tuple items) once per path, and refuses, through the
caller's ``refuse``, a container that contains itself, nesting deeper than ``max_depth`` and more
than ``max_entries`` entries in all (counted before they are visited), so a walk ends within
seconds whatever the file holds, and every later walk over the same data (which the checks
bound) ends too.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Tuple

from . import interrupts

#: Entries a walk visits at most (a training checkpoint holds a few thousand).
MAX_ENTRIES = 1_000_000
#: Containers nested in one another at most (a checkpoint nests about six deep, a config four).
MAX_DEPTH = 64
_POLL_EVERY = 1 << 16
_LEAVE = object()


def walk_nested(root: Any, name: str, refuse: Callable[[str], Exception], max_entries: int = MAX_ENTRIES,
                max_depth: int = MAX_DEPTH) -> Iterator[Tuple[str, Any]]:
    """``(entry, value)`` for ``root`` (named ``name``) and everything in it, depth first; entries
    read ``name.key`` and ``name[index]``.

    Raises ``refuse(problem)`` (the caller's exception, naming its file) for a dict, list or tuple
    that contains itself, one nested more than ``max_depth`` deep, or more than ``max_entries``
    entries in all. Dict keys are counted, not walked. Acts on a stop signal every 65,536 entries.
    """
    on_path: Dict[int, str] = {}  # the containers around the entry, by id
    stack: List[tuple] = [(name, root, 0)]
    count = 0
    while stack:
        entry, value, depth = stack.pop()
        if entry is _LEAVE:
            del on_path[value]
            continue
        count += 1
        if count % _POLL_EVERY == 0:
            interrupts.check()
        yield entry, value
        if not isinstance(value, (dict, list, tuple)):
            continue
        if id(value) in on_path:
            raise refuse(f"{_short(on_path[id(value)])} contains itself (as {_short(entry)})")
        if depth >= max_depth:
            raise refuse(f"{_short(entry)} is nested more than {max_depth} levels deep")
        size = len(value) * (2 if isinstance(value, dict) else 1)
        if count + len(stack) + size > max_entries:
            raise refuse(f"{name} holds more than {max_entries:,} entries (at {_short(entry)})")
        on_path[id(value)] = entry
        stack.append((_LEAVE, id(value), 0))
        if isinstance(value, dict):
            count += len(value)  # the keys
            stack.extend((f"{entry}.{key}", item, depth + 1) for key, item in value.items())
        else:
            stack.extend((f"{entry}[{index}]", item, depth + 1) for index, item in enumerate(value))


def check_nested(root: Any, name: str, refuse: Callable[[str], Exception], max_entries: int = MAX_ENTRIES,
                 max_depth: int = MAX_DEPTH) -> int:
    """Walk ``root`` (see :func:`walk_nested`) only to refuse what it refuses; returns the entry count."""
    count = 0
    for count, _ in enumerate(walk_nested(root, name, refuse, max_entries, max_depth), start=1):
        pass
    return count


def _short(entry: str, keep: int = 40) -> str:
    """``entry`` with its middle left out when it is long (a path 64 levels deep)."""
    return entry if len(entry) <= 2 * keep + 3 else f"{entry[:keep]}...{entry[-keep:]}"
