"""The run state has one owner: the trainer holds one RunState, and the modules that capture,
restore, check and report a run take that value and the components they need, never the trainer."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

from conftest import REPO

PACKAGE = REPO / "splattrain"
#: Modules whose functions work on the run state and components, not on the trainer.
STATE_MODULES = [PACKAGE / "engine" / "checkpointing.py", PACKAGE / "engine" / "run_report.py",
                 PACKAGE / "checkpoints" / "schema.py"]
#: Stand-ins for the trainer that are gone: a loose alias and two protocols mirroring its attributes.
GONE = ("Trainer = Any", "class TrainingState", "class ReportedRun")
TRAINER_NAMES = {"trainer", "run", "Trainer", "DefaultTrainer", "TrainingState", "ReportedRun"}


def trainer_parameters(path: Path) -> List[str]:
    """``file:line function(parameter)`` for each parameter named or annotated as a trainer."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for argument in arguments:
            annotation = ast.unparse(argument.annotation) if argument.annotation is not None else ""
            names = {argument.arg} | {part.strip("\"'") for part in annotation.replace(".", " ").split()}
            if names & TRAINER_NAMES:
                found.append(f"{path.name}:{node.lineno} {node.name}({argument.arg})")
    return found


def test_no_stand_in_for_the_trainer_is_left() -> None:
    found = [f"{path.relative_to(REPO)}: {text}" for path in sorted(PACKAGE.rglob("*.py"))
             for text in GONE if text in path.read_text()]
    assert not found, found


def test_checkpoints_and_the_report_take_the_run_state_not_the_trainer() -> None:
    found = [use for path in STATE_MODULES for use in trainer_parameters(path)]
    assert not found, f"functions taking the trainer: {found}"
    takes_state = {node.name for path in STATE_MODULES[:2] for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.FunctionDef)
                   and any(ast.unparse(a.annotation) == "RunState" for a in node.args.args + node.args.kwonlyargs if a.annotation)}
    assert {"capture", "read_checkpoint", "restore", "results"} <= takes_state, takes_state


def test_the_check_sees_a_trainer_parameter(tmp_path: Path) -> None:
    """The scan is not blind: a function taking ``trainer`` or one annotated ``TrainingState`` is caught."""
    module = tmp_path / "probe.py"
    module.write_text("def capture(trainer, step):\n    pass\n\ndef restore(state: 'TrainingState') -> None:\n    pass\n")
    assert trainer_parameters(module) == ["probe.py:1 capture(trainer)", "probe.py:4 restore(state)"]
