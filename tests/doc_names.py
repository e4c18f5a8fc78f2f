"""What the docs name must exist: the module files they cite, the layer list of
docs/architecture.md, the ``module.function`` names of docs and docstrings, and the programs of
their shell commands (tests/test_docs.py runs these checks on the tree and on planted names).

Conventions (docs/architecture.md, "Docs that stay true"):

- A path ending in ``.py`` (``engine/requests.py``, ``requests.py``, ``splattrain/cli.py``) names
  a file of the repository: some tracked file's path ends with it. Files of other projects are
  listed in :data:`NOT_OURS`.
- A backticked ``splattrain.a.b`` name, or ``module.name`` where ``module`` is the file name of
  one splattrain module (``checkpointing.restore``), names something that module defines; so does
  a dotted target of a Sphinx role (``:func:`~splattrain.engine.load_config```) in a docstring.
- A shell command, in an indented block, a ``bash``/``sh``/``console`` fence or an inline code
  span, runs a program the project, its dependencies or the standard tools provide
  (:data:`STANDARD_PROGRAMS`). A line counts as a command when its first word looks like a program
  and its second is an argument (an option, a path, a file name, ``key=value``): ``tool -n 3``,
  not ``step 200/200``.
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterator, List, Optional, Set, Tuple

from conftest import REPO

#: Files of other projects the docs name: 3DGS's converter, gsplat's trainer, and the modules a
#: stray file beside a config could shadow (docs/distributed.md, docs/hooks.md).
NOT_OURS = {"convert.py", "simple_trainer.py", "examples/simple_trainer.py", "numpy.py", "torch.py", "lpips.py"}
#: Programs a user has without the project: the shell's own, the usual system tools, and the
#: programs the docs ask to install (COLMAP, Chromium).
STANDARD_PROGRAMS = {
    "python", "python3", "pip", "pip3", "bash", "sh", "git", "torchrun", "tensorboard", "splattrain",
    "apt-get", "apt", "sudo", "env", "cd", "ls", "cat", "echo", "export", "kill", "ulimit", "time",
    "uptime", "lscpu", "nproc", "ssh", "curl", "wget", "tar", "unzip", "mkdir", "cp", "mv", "rm",
    "nvidia-smi", "colmap", "ffmpeg", "chromium", "pytest", "lint-imports",
}
FILE_EXTENSIONS = {"py", "sh", "md", "json", "jsonl", "csv", "yaml", "yml", "ply", "spz", "splat", "txt", "bin",
                   "png", "jpg", "gif", "mp4", "npy", "pt", "obj", "toml", "html", "js", "sqlite", "log"}
PROGRAM = re.compile(r"^[A-Za-z][\w.+-]*$")
ARGUMENT = re.compile(r"^(?:--?[A-Za-z][\w-]*(?:=.*)?"  # an option
                      r"|[\w.~<>-]*[A-Za-z][\w.<>-]*/[\w./<>*-]*"  # a path
                      r"|[\w./<>-]*\w\.[A-Za-z]\w{0,4}"  # a file name
                      r"|[A-Za-z_][\w.]*=\S*"  # key=value
                      r"|\[\S*)$")  # an optional argument of a usage line
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}


# -- the repository -----------------------------------------------------------------------------
@lru_cache(maxsize=None)
def repo_files() -> Tuple[str, ...]:
    """The repository's files, relative to its root (tracked and untracked, none ignored)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    return tuple(path for path in listed if path and (REPO / path).exists())


@lru_cache(maxsize=None)
def module_files() -> Dict[str, List[str]]:
    """File name (no ``.py``) of each splattrain module that is no package -> its dotted names."""
    names: Dict[str, List[str]] = {}
    packages = {Path(p).parent.name for p in repo_files() if p.startswith("splattrain/") and p.endswith("/__init__.py")}
    for path in repo_files():
        if path.startswith("splattrain/") and path.endswith(".py") and not path.endswith("__init__.py"):
            stem = Path(path).stem
            if stem not in packages:
                names.setdefault(stem, []).append(path[:-3].replace("/", "."))
    return names


# -- cited module files -------------------------------------------------------------------------
def cited_paths(text: str) -> Iterator[Tuple[int, str]]:
    """(line, path) of every ``.py`` path a doc names."""
    for match in re.finditer(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.py)\b", text):
        yield text[:match.start()].count("\n") + 1, match.group(1)


def missing_paths(text: str, name: str) -> List[str]:
    """The ``.py`` paths ``text`` names that no file of the repository has."""
    files = repo_files()
    return [f"{name}:{line}: `{path}` is no file of the repository" for line, path in cited_paths(text)
            if path not in NOT_OURS and not any(f == path or f.endswith("/" + path) for f in files)]


# -- the layers ---------------------------------------------------------------------------------
def pyproject_layers(text: str) -> List[str]:
    """The lines of ``layers = [...]`` in pyproject.toml, without the ``splattrain.`` prefixes."""
    block = re.search(r"^layers\s*=\s*\[(.*?)^\]", text, re.S | re.M)
    assert block, "pyproject.toml has no layers = [...]"
    return [line.replace("splattrain.", "") for line in re.findall(r'"([^"]+)"', block.group(1))]


def documented_layers(text: str) -> List[str]:
    """The first column of the table under "The layers, top to bottom" in docs/architecture.md."""
    section = re.search(r"^## The layers, top to bottom\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "docs/architecture.md has no section 'The layers, top to bottom'"
    rows = [line for line in section.group(1).splitlines() if line.startswith("|")][2:]
    out = []
    for row in rows:
        first = re.split(r"(?<!\\)\|", row)[1].strip().replace("\\|", "|")
        out.append(re.sub(r"\s+", " ", first.replace("`", "").replace(", ", " ")).strip())
    return out


# -- module.function names ----------------------------------------------------------------------
def _member(obj: object, name: str) -> Tuple[Optional[object], bool]:
    """(the member, found); a dataclass field or an annotated attribute counts as found."""
    if hasattr(obj, name):
        return getattr(obj, name), True
    if inspect.isclass(obj) and any(name in getattr(base, "__annotations__", {}) for base in obj.__mro__):
        return None, True
    return None, False


def resolves(target: str, module: Optional[ModuleType] = None) -> Optional[bool]:
    """Whether a dotted name names something: looked up in ``module``'s namespace first (as Sphinx
    reads a docstring's roles), else imported. None when the module it is in cannot be imported for
    want of another package (an extra not installed)."""
    if target.startswith(".") and module is not None:
        package = module.__name__ if Path(module.__file__ or "").name == "__init__.py" else module.__name__.rpartition(".")[0]
        target = package + target
    parts = target.split(".")
    obj: Optional[object] = None
    rest: List[str] = []
    if module is not None and parts[0] in vars(module):
        obj, rest = vars(module)[parts[0]], parts[1:]
    else:
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError as err:
                if err.name and not err.name.startswith(parts[0]):
                    return None
                continue
            rest = parts[cut:]
            break
        else:
            return False
    for name in rest:
        if obj is None:  # an annotated attribute: nothing further to look up
            return True
        obj, found = _member(obj, name)
        if not found:
            return False
    return True


def doc_names(text: str, config_keys: Set[str]) -> Iterator[Tuple[int, str]]:
    """(line, dotted name) of every ``splattrain.x`` or ``module.name`` a doc cites in backticks."""
    modules = module_files()
    for match in re.finditer(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`", text):
        name = match.group(1)
        head, last = name.split(".")[0], name.split(".")[-1]
        if last in FILE_EXTENSIONS:
            continue
        if head == "splattrain":
            yield text[:match.start()].count("\n") + 1, name
        elif head in modules and len(modules[head]) == 1 and head not in config_keys:
            yield text[:match.start()].count("\n") + 1, modules[head][0] + name[len(head):]


def unresolved_doc_names(text: str, name: str, config_keys: Set[str]) -> List[str]:
    return [f"{name}:{line}: `{target}` names nothing splattrain defines"
            for line, target in doc_names(text, config_keys) if resolves(target) is False]


def docstring_targets(source: str) -> Iterator[Tuple[int, str]]:
    """(line, target) of every dotted Sphinx role target and ````splattrain.x```` of a source file."""
    for pattern in (r":\w+:`~?([.\w]*\w\.\w[.\w]*)`", r"``(splattrain(?:\.\w+)+)``"):
        for match in re.finditer(pattern, source):
            yield source[:match.start()].count("\n") + 1, match.group(1)


def unresolved_docstring_names(module_name: str, source: str, where: str) -> List[str]:
    try:
        module: Optional[ModuleType] = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith("splattrain"):
            raise
        module = None  # an optional package missing: full names are still checked
    return [f"{where}:{line}: {target} names nothing" for line, target in docstring_targets(source)
            if resolves(target, module) is False]


# -- programs -----------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def provided_programs() -> Set[str]:
    """The console scripts of splattrain and of every installed package it requires (extras too)."""
    seen: Set[str] = set()
    programs: Set[str] = set()
    todo = ["splattrain"]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        programs.update(ep.name for ep in dist.entry_points if ep.group == "console_scripts")
        for requirement in dist.requires or []:
            todo.append(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))
    return programs


@lru_cache(maxsize=None)
def splattrain_commands() -> Set[str]:
    """The subcommands of ``splattrain`` (written alone in prose: ``fit --dry-run``)."""
    from splattrain.cli import _parser

    return {name for action in _parser()._subparsers._group_actions for name in action.choices}


def commands(line: str) -> Iterator[Tuple[str, str]]:
    """(program, command) of each command on a line: after ``$``, ``sudo``, ``VAR=value``, and
    split at ``&&``, ``||``, ``;`` and ``|``."""
    line = line.split(" #")[0].strip()
    line = line[2:] if line.startswith("$ ") else line
    for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
        words = part.split()
        while words and (re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]) or words[0] in ("sudo", "env", "time")):
            words = words[1:]
        if len(words) >= 2 and PROGRAM.match(words[0]) and (
                ARGUMENT.match(words[1]) or (re.match(r"^[a-z][\w-]*$", words[1]) and len(words) > 2
                                             and ARGUMENT.match(words[2]))):
            yield words[0], part


def shell_lines(text: str) -> Iterator[Tuple[int, str, bool]]:
    """(line number, text, inline) of the lines of indented blocks and shell fences, and of inline
    code spans; continuation lines (after a ``\\``, or indented further) left out."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*```(\w*)", lines[i])
        if fence:
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            if fence.group(1) in SHELL_FENCES:
                yield from _block(lines, i + 1, j, 0)
            i = j + 1
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            yield from _block(lines, i, j, 4)
            i = j
        else:
            for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", lines[i]):
                yield i + 1, span, True
            i += 1


def _block(lines: List[str], start: int, end: int, indent: int) -> Iterator[Tuple[int, str, bool]]:
    previous = ""
    for k in range(start, end):
        line = lines[k][indent:]
        continued = previous.rstrip().endswith("\\") or line[:1].isspace()
        previous = line if line.strip() else ""
        if line.strip() and not continued:
            yield k + 1, line, False


def unknown_programs(text: str, name: str) -> List[str]:
    """Each shell command of ``text`` whose program is neither the project's, a dependency's nor a
    standard tool."""
    known = STANDARD_PROGRAMS | provided_programs()
    files = repo_files()
    problems = []
    for line, content, inline in shell_lines(text):
        for program, command in commands(content):
            if program in known or (inline and program in splattrain_commands()):
                continue
            if any(f == program or f.endswith("/" + program) for f in files):
                continue  # one of the project's scripts, named alone
            problems.append(f"{name}:{line}: `{command.strip()[:60]}` runs `{program}`, which neither "
                            "splattrain nor its dependencies provide")
    return problems
