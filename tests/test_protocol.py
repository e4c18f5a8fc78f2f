"""Hooks see the trainer only through the Trainer protocol: the built-in hooks read nothing else
and assign nothing on it; the DefaultTrainer has everything the protocol lists."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Dict, List, Set

from conftest import REPO, tiny_config_text
from splattrain.console import Console
from splattrain.engine import DefaultTrainer, load_config
from splattrain.protocol import Trainer

HOOK_MODULES = sorted((REPO / "splattrain" / "hooks").glob("*.py"))


def protocol_members() -> Set[str]:
    """Every name the Trainer protocol declares: attributes, properties and calls."""
    names = set(getattr(Trainer, "__annotations__", {}))
    names |= {name for name, _ in inspect.getmembers(Trainer) if not name.startswith("_")}
    return names


def trainer_uses(path: Path) -> Dict[str, List[str]]:
    """``{"read": [...], "assigned": [...]}``: the attributes a module reads and assigns on a
    parameter named ``trainer`` (``trainer.x`` and ``trainer.x = ...``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    read, assigned = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "trainer":
            (assigned if isinstance(node.ctx, ast.Store) else read).append(f"{path.name}:{node.lineno} {node.attr}")
    return {"read": read, "assigned": assigned}


def test_the_built_in_hooks_use_only_the_protocol() -> None:
    members = protocol_members()
    outside, assigned = [], []
    for path in HOOK_MODULES:
        uses = trainer_uses(path)
        outside += [use for use in uses["read"] if use.split(" ")[1] not in members]
        assigned += uses["assigned"]
    assert not outside, f"hooks read trainer attributes outside the protocol: {outside}"
    assert not assigned, f"hooks assign trainer attributes: {assigned}"


#: The hook modules the engine may import: the base class, dispatch, how sections are built, the protocol.
ENGINE_MAY_IMPORT = {"base", "dispatch", "specs"}


def test_the_engine_names_no_built_in_hook() -> None:
    """The engine works with hooks through the base class and the protocol; it imports the hooks
    package only so that the built-ins register (engine/plugins.py), never one hook by name."""
    named = []
    for path in sorted((REPO / "splattrain" / "engine").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.lstrip(".").startswith("hooks"):
                parts = node.module.lstrip(".").split(".")
                modules = parts[1:2] or [alias.name for alias in node.names]
                named += [f"{path.name}:{node.lineno} {m}" for m in modules if m not in ENGINE_MAY_IMPORT]
    assert not named, f"the engine imports built-in hooks: {named}"


def test_the_check_sees_what_a_hook_reads(tmp_path: Path) -> None:
    """The scan is not blind: a module reading ``trainer.optimizers`` and assigning
    ``trainer.step`` is caught."""
    module = tmp_path / "sneaky.py"
    module.write_text("def after_train_iter(self, trainer, step):\n    trainer.step = trainer.optimizers\n")
    uses = trainer_uses(module)
    assert [u.split(" ")[1] for u in uses["read"]] == ["optimizers"] and "optimizers" not in protocol_members()
    assert [u.split(" ")[1] for u in uses["assigned"]] == ["step"]


def test_the_default_trainer_has_every_protocol_member(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=2))
    trainer = DefaultTrainer(load_config(tmp_path / "cfg.yaml"), console=Console(quiet=True))
    missing = sorted(name for name in protocol_members() if not hasattr(trainer, name))
    assert not missing
    assert isinstance(trainer, Trainer)


#: Calls that would make a hook save or hold the run itself rather than ask the engine.
SAVES_OR_BLOCKS = {"save_checkpoint", "paused", "sleep"}


def test_no_hook_saves_a_checkpoint_or_holds_the_loop_itself() -> None:
    """Hooks ask (``request_checkpoint``, ``request_pause``); the engine saves and pauses after the
    step and its validation. No hook module calls a save, enters a pause or loops waiting."""
    found = []
    for path in HOOK_MODULES:
        if path.name == "dispatch.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SAVES_OR_BLOCKS:
                found.append(f"{path.name}:{node.lineno} {node.func.attr}()")
            if isinstance(node, ast.While):
                found.append(f"{path.name}:{node.lineno} while")
    assert not found, found
    assert "save_checkpoint" not in protocol_members() and "paused" not in protocol_members()


def _writes_to_the_model(path: Path) -> List[str]:
    """In-place writes (``x.copy_(...)``, ``x.add_(...)``, ``x.data = ...``, ``x[...] = ...``) to
    the model's tensors: through ``trainer.model`` or a name bound to something read from it."""
    found = []
    for function in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        aliases = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign)
                   and "model" in ast.unparse(node.value) for target in node.targets if isinstance(target, ast.Name)}

        def of_model(node: ast.AST) -> bool:
            text = ast.unparse(node)
            root = node
            while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                root = root.func if isinstance(root, ast.Call) else root.value
            return "model." in text or (isinstance(root, ast.Name) and root.id in aliases)

        for node in ast.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
                    and not node.func.attr.startswith("_") and of_model(node.func.value):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}")
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    writes = isinstance(target, ast.Subscript) or (isinstance(target, ast.Attribute) and target.attr == "data")
                    if writes and of_model(target):
                        found.append(f"{path.name}:{node.lineno} {ast.unparse(target)} =")
    return found


def test_no_hook_or_example_writes_the_models_tensors() -> None:
    """Only the engine changes what the model holds (an average a hook keeps is the engine's shadow,
    swapped in by the engine); hooks and the worked examples write their own tensors only."""
    modules = HOOK_MODULES + sorted((REPO / "examples").glob("*.py"))
    found = [write for path in modules for write in _writes_to_the_model(path)]
    assert not found, found
