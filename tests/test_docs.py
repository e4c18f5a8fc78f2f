"""The docs say what the code does: every YAML block of docs/*.md and README.md loads as a config,
and every default the docs quote is the code's default.

Conventions the docs follow (docs/architecture.md, "Docs that stay true"):

- A ```yaml block is a config or a fragment of one. It is merged over a minimal config (``name``
  and the demo's ``data.path``) and read from the repository root as ``splattrain fit`` reads a
  config (:func:`splattrain.engine.load_config`: schema, ``imports:``, plugin sections, step
  settings). YAML that is not a config goes in another fence.
- A ```yaml block whose first line is ``# defaults`` quotes defaults: each value in it must be the
  default of its key.
- A table with a column headed ``default`` quotes defaults. Its first column names the options in
  backticks (several in one cell: as many comma-separated values in the default cell). The names
  are full key paths (``optim.fused``, ``default_hooks.logger.interval``) or relative to the
  subject named by a ``<!-- defaults: SUBJECT -->`` line just above the table: a config section
  (``data``, ``default_hooks.viewer``) or a plugin (``hook GradClipHook``, ``strategy mcmc``,
  ``writer csv``, ``renderer gsplat``, ``loss depth``). The default cell starts with the value as
  YAML, in backticks or not (``1``, ``raise``, ``null``, ``[1, 1, 1]``), then an optional note in
  parentheses or after a semicolon; ``(required)`` marks an option without a default.
- In prose, ```full.key` (default VALUE``: the same value rules.

The names the docs cite must exist (``doc_names.py``), and the benchmarks page and the changelog stay
short (``doc_shape.py``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import yaml
from omegaconf import MISSING

import doc_names
import doc_shape
from conftest import REPO
from splattrain.config.schema import SplatConfig
from splattrain.engine import load_config
from splattrain.errors import ConfigError
from splattrain.hooks.specs import DEFAULT_HOOKS, OPTIONAL_DEFAULT_HOOKS
from splattrain.registry import DATASETS, HOOKS, LOSSES, RENDERERS, STRATEGIES, WRITERS

DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
MINIMAL = {"name": "docs", "data": {"path": "data/demo"}}
REQUIRED = object()  # an option without a default
PLUGINS = {"hook": HOOKS, "writer": WRITERS, "strategy": STRATEGIES, "renderer": RENDERERS, "loss": LOSSES,
           "dataset": DATASETS}
CONFIG_KEYS = {field.name for field in dataclasses.fields(SplatConfig)}
#: ```key` (default VALUE)`` in prose.
PROSE_DEFAULT = r"`([a-z_]+(?:\.[a-zA-Z_0-9]+)+)`\s+\(default:?\s+([^)]*)\)"
#: The registered type a plugin section of the schema builds when the config names none.
SECTION_TYPES = {"strategy": ("strategy", "default"), "renderer": ("renderer", "torch")}


# -- reading a doc ------------------------------------------------------------------------------
def yaml_blocks(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, text) of every ```yaml block."""
    for match in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M):
        yield text[:match.start()].count("\n") + 1, match.group(1)


def tables(text: str) -> Iterator[Tuple[int, Optional[str], List[str], List[List[str]]]]:
    """(line number, subject or None, header cells, rows of cells) of every Markdown table."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|\s*$", lines[i + 1]):
            start, subject = i, None
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            marker = re.match(r"^<!--\s*defaults:\s*(.+?)\s*-->$", lines[j].strip()) if j >= 0 else None
            if marker:
                subject = marker.group(1)
            header = cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            yield start + 1, subject, header, rows
        else:
            i += 1


def cells(line: str) -> List[str]:
    """The cells of a table row (``\\|`` inside a cell stays in it)."""
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [part.strip() for part in parts[1:-1]]


def parse_value(text: str) -> Any:
    """The value a default cell or a ``(default ...)`` quotes: the first backticked text, else the
    text before a parenthesised note or a semicolon, read as YAML; ``(required)``: no default."""
    text = text.strip()
    if text.startswith("(required)"):
        return REQUIRED
    quoted = re.match(r"^`([^`]*)`", text)
    value = quoted.group(1) if quoted else re.split(r"\s\(|;", text, maxsplit=1)[0].strip()
    if not value:
        return REQUIRED
    parsed = yaml.safe_load(value)
    if isinstance(parsed, str):  # YAML 1.1 reads 1e10 as text
        try:
            return float(parsed)
        except ValueError:
            pass
    return parsed


def option_names(cell: str) -> List[str]:
    return re.findall(r"`([^`]+)`", cell)


# -- what the code says -------------------------------------------------------------------------
def plugin_default(kind: str, type_name: str, option: str) -> Any:
    """The default of ``option`` of the registered plugin ``type_name`` of ``kind``."""
    registry = PLUGINS[kind]
    cls = registry.get(type_name)
    if dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            if field.name == option:
                if field.default is not dataclasses.MISSING:
                    return field.default
                if field.default_factory is not dataclasses.MISSING:
                    return field.default_factory()
                return REQUIRED
        raise KeyError(f"{kind} {type_name} has no option {option!r}")
    parameters = registry.options(type_name)
    if option not in parameters:
        raise KeyError(f"{kind} {type_name} has no option {option!r}")
    default = parameters[option].default
    return REQUIRED if default is inspect.Parameter.empty else default


def schema_default(path: str) -> Any:
    """The default of the config key at dotted ``path``: the schema's, or for a key inside a plugin
    section (``strategy.refine_every``, ``default_hooks.logger.interval``) the plugin's."""
    parts = path.split(".")
    node: Any = SplatConfig
    for index, part in enumerate(parts):
        rest = parts[index + 1:]
        if node is SplatConfig and part in SECTION_TYPES and rest:
            kind, type_name = SECTION_TYPES[part]
            return plugin_default(kind, type_name, ".".join(rest))
        if node is SplatConfig and part == "default_hooks" and len(rest) == 2:
            spec = {**DEFAULT_HOOKS, **OPTIONAL_DEFAULT_HOOKS}.get(rest[0])
            if spec is None:
                raise KeyError(f"default_hooks.{rest[0]} is not a default hook")
            return plugin_default("hook", spec["type"], rest[1])
        if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
            raise KeyError(f"{path}: {'.'.join(parts[:index])} holds no key {part!r}")
        fields = {f.name: f for f in dataclasses.fields(node)}
        if part not in fields:
            raise KeyError(f"{path}: no key {part!r} in {node.__name__}")
        field = fields[part]
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            value = REQUIRED
        if rest and dataclasses.is_dataclass(value):
            node = type(value)
            continue
        if rest:
            raise KeyError(f"{path}: {part} holds no key {rest[0]!r}")
        return REQUIRED if value is MISSING else value
    raise KeyError(path)


def default_of(subject: Optional[str], option: str) -> Any:
    """The default of ``option`` for a table's subject (see the module docstring)."""
    if subject is None:
        if "." not in option:
            raise KeyError(f"{option!r} is not a full key path and the table names no subject "
                           "(put <!-- defaults: SUBJECT --> above it)")
        return schema_default(option)
    kind, _, type_name = subject.partition(" ")
    if kind in PLUGINS and type_name:
        return plugin_default(kind, type_name, option)
    return schema_default(f"{subject}.{option}")


def same(doc: Any, code: Any) -> bool:
    """Whether a quoted default is the code's (numbers by value, sequences item by item)."""
    if doc is REQUIRED or code is REQUIRED:
        return doc is code
    if isinstance(code, dataclasses.Field):
        return False
    if isinstance(doc, bool) or isinstance(code, bool):
        return doc is code or (isinstance(doc, bool) and isinstance(code, bool) and doc == code)
    if isinstance(doc, (int, float)) and isinstance(code, (int, float)):
        return math.isclose(float(doc), float(code), rel_tol=1e-9, abs_tol=0.0)
    if isinstance(doc, (list, tuple)) and isinstance(code, (list, tuple)):
        return len(doc) == len(code) and all(same(a, b) for a, b in zip(doc, code))
    if isinstance(doc, dict) and isinstance(code, dict):
        return doc.keys() == code.keys() and all(same(doc[k], code[k]) for k in doc)
    return doc == code


def check(where: str, subject: Optional[str], option: str, quoted: Any, problems: List[str]) -> None:
    try:
        actual = default_of(subject, option)
    except (KeyError, ConfigError) as err:
        problems.append(f"{where}: {err}")
        return
    if not same(quoted, actual):
        shown = "no default" if actual is REQUIRED else repr(actual)
        problems.append(f"{where}: `{option}` quoted with default {quoted!r}, the code's is {shown}")


# -- the checks ---------------------------------------------------------------------------------
def wrong_defaults(text: str, name: str) -> List[str]:
    """Every default quoted in ``text`` (a doc called ``name``) that is not the code's."""
    problems: List[str] = []
    for line, subject, header, rows in tables(text):
        lowered = [cell.lower() for cell in header]
        if "default" not in lowered:
            continue
        column = lowered.index("default")
        for row in rows:
            names = option_names(row[0])
            where = f"{name}:{line} ({row[0]})"
            if not names:
                problems.append(f"{where}: the first column names no option in backticks")
                continue
            raw = row[column] if column < len(row) else ""
            if len(names) == 1:
                values = [raw]
            else:
                values = [part.strip() for part in raw.split(",")]
                if len(values) != len(names):
                    problems.append(f"{where}: {len(names)} options but {len(values)} default values")
                    continue
            for option, value in zip(names, values):
                try:
                    quoted = parse_value(value)
                except yaml.YAMLError:
                    problems.append(f"{where}: cannot read the default {value!r} of `{option}` as YAML")
                    continue
                check(where, subject, option, quoted, problems)
    for line, block in yaml_blocks(text):
        if not block.startswith("# defaults"):
            continue
        for option, quoted in leaves(yaml.safe_load(block) or {}):
            check(f"{name}:{line}", None, option, quoted, problems)
    for match in re.finditer(PROSE_DEFAULT, text):
        if match.group(1).split(".")[0] not in CONFIG_KEYS:
            continue  # a file name (`metrics.json`), not a config key
        line = text[:match.start()].count("\n") + 1
        try:
            quoted = parse_value(match.group(2))
        except yaml.YAMLError:
            problems.append(f"{name}:{line}: cannot read the default {match.group(2)!r} as YAML")
            continue
        check(f"{name}:{line}", None, match.group(1), quoted, problems)
    return problems


def leaves(tree: Dict[str, Any], prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """(dotted key, value) of every leaf of a YAML mapping (a mapping under a hook's or plugin's
    name counts as a leaf only when it is a value)."""
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from leaves(value, path + ".")
        else:
            yield path, value


def merged(base: Dict[str, Any], block: Dict[str, Any]) -> Dict[str, Any]:
    """``block`` over ``base`` (nested mappings merged, everything else replaced)."""
    out = dict(base)
    for key, value in block.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_block(block: str, folder: Path) -> None:
    """Read a YAML block as ``splattrain fit`` reads a config, merged over :data:`MINIMAL`, as
    written and with its step settings scaled (ConfigError naming what is wrong)."""
    data = yaml.safe_load(block)
    if not isinstance(data, dict):
        raise ConfigError("not a config mapping (use another fence for YAML that is no config)")
    for spec in data.get("writers") or []:
        known = isinstance(spec, dict) and str(spec.get("type")) in WRITERS  # (not those of the block's imports)
        requires = getattr(WRITERS.get(str(spec["type"])), "requires", None) if known else None
        if requires and importlib.util.find_spec(requires[0]) is None:
            spec["optional"] = True  # an extra not installed here: its options are still checked
    path = folder / "block.yaml"
    path.write_text(yaml.safe_dump(merged(MINIMAL, data), sort_keys=False))
    load_config(path)
    load_config(path, ["trainer.steps_scaler=0.5"])  # scaled too: every step option says what it counts


def all_blocks() -> List[Tuple[str, str]]:
    return [(f"{doc.relative_to(REPO)}:{line}", block) for doc in DOCS for line, block in yaml_blocks(doc.read_text())]


# -- the real docs ------------------------------------------------------------------------------
@pytest.mark.parametrize("where, block", all_blocks(), ids=[where for where, _ in all_blocks()])
def test_docs_yaml_blocks_load_against_the_schema(where, block, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # imports: and data.path as the docs write them, from the repository root
    try:
        load_block(block, tmp_path)
    except ConfigError as err:
        pytest.fail(f"{where}: {err}")


@pytest.mark.parametrize("doc", DOCS, ids=[doc.name for doc in DOCS])
def test_docs_quote_the_codes_defaults(doc):
    problems = wrong_defaults(doc.read_text(), str(doc.relative_to(REPO)))
    assert not problems, "\n".join(problems)


def test_docs_check_a_fair_share_of_defaults():
    """The conventions are in use: the checks above read many defaults, so a doc that drops its
    markers (and with them its checks) shows here."""
    count = 0
    for doc in DOCS:
        text = doc.read_text()
        count += sum(len(rows) for _, _, header, rows in tables(text) if "default" in [c.lower() for c in header])
        count += sum(len(list(leaves(yaml.safe_load(block) or {})))
                     for _, block in yaml_blocks(text) if block.startswith("# defaults"))
        count += sum(1 for m in re.finditer(PROSE_DEFAULT, text) if m.group(1).split(".")[0] in CONFIG_KEYS)
    assert count >= 60, count


def test_readme_links_to_docs_that_exist():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)(?:#[\w-]+)?\)", text)
    assert links and all((REPO / link).is_file() for link in links), [l for l in links if not (REPO / l).is_file()]


def test_docs_anchors_exist():
    """Every ``file.md#anchor`` link in the docs and README names a heading of that file."""
    missing = []
    for doc in DOCS + [REPO / "CHANGELOG.md"]:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)#([\w-]+)\)", doc.read_text()):
            path = (doc.parent / target).resolve()
            headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M) if path.is_file() else []
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            if anchor not in slugs:
                missing.append(f"{doc.name}: {target}#{anchor}")
    assert not missing, missing


# -- the checks themselves, on small fake docs --------------------------------------------------
FAKE = """
The checkpoint hook:

<!-- defaults: hook CheckPointHook -->

| option | default | meaning |
| --- | --- | --- |
| `interval` | 1000 | every N steps |
| `max_keep` | {max_keep} | keep the newest N |
| `save_best`, `rule` | `null`, null | best.pt |

| key | default | meaning |
| --- | --- | --- |
| `optim.fused` | `auto` (the compiled Adam on the CPU) | |
| `data.path` | (required) | |

Validation runs every `trainer.val_interval` (default {val_interval}) steps.

```yaml
# defaults
default_hooks:
  checkpoint:
    save_last: {save_last}
```
"""


def test_a_doc_quoting_the_right_defaults_passes():
    assert wrong_defaults(FAKE.format(max_keep=-1, val_interval=1000, save_last="true"), "fake.md") == []


@pytest.mark.parametrize("wrong, culprit", [
    ({"max_keep": 3}, "`max_keep` quoted with default 3, the code's is -1"),
    ({"val_interval": 500}, "`trainer.val_interval` quoted with default 500, the code's is 1000"),
    ({"save_last": "false"}, "`default_hooks.checkpoint.save_last` quoted with default False, the code's is True"),
])
def test_a_doc_quoting_a_wrong_default_fails_naming_it(wrong, culprit):
    values = {"max_keep": -1, "val_interval": 1000, "save_last": "true", **wrong}
    problems = wrong_defaults(FAKE.format(**values), "fake.md")
    assert len(problems) == 1 and culprit in problems[0], problems


def test_a_defaults_table_without_a_subject_or_with_unknown_options_fails():
    text = "| option | default |\n| --- | --- |\n| `max_keep` | -1 |\n| `trainer.max_stepz` | 7000 |\n"
    problems = wrong_defaults(text, "fake.md")
    assert len(problems) == 2
    assert "names no subject" in problems[0] and "max_stepz" in problems[1]
    unknown = "<!-- defaults: hook CheckPointHook -->\n" + text.replace("`trainer.max_stepz` | 7000", "`keep_best` | 1")
    assert "has no option 'keep_best'" in wrong_defaults(unknown, "fake.md")[0]


def test_a_yaml_block_that_is_not_a_valid_config_fails(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    load_block("trainer:\n  val_interval: 100\n", tmp_path)  # a fragment, merged over MINIMAL
    with pytest.raises(ConfigError, match="max_step"):
        load_block("trainer:\n  max_step: 100\n", tmp_path)
    with pytest.raises(ConfigError, match="patiance"):  # plugin sections are checked too
        load_block("custom_hooks:\n  - {type: EarlyStoppingHook, patiance: 3}\n", tmp_path)
    with pytest.raises(ConfigError, match="out_dir"):
        load_block("default_hooks:\n  checkpoint: {out_dir: ckpt}\n", tmp_path)
    module = tmp_path / "unmarked_hook.py"
    module.write_text("from splattrain import HOOKS, Hook\n\n\n@HOOKS.register()\nclass UnmarkedStepsHook(Hook):\n"
                      "    def __init__(self, interval: int = 100) -> None:\n        super().__init__()\n")
    try:
        with pytest.raises(ConfigError, match="look like step counts"):  # an unmarked step option, found by scaling
            load_block(f"imports: [{module}]\ncustom_hooks:\n  - {{type: UnmarkedStepsHook}}\n", tmp_path)
    finally:
        HOOKS.unregister("UnmarkedStepsHook")
    with pytest.raises(ConfigError, match="not a config"):
        load_block("- a list\n", tmp_path)


def test_the_block_finder_reads_fences_and_markers():
    text = ("x\n```yaml\na: 1\n```\n\n```text\nb: 2\n```\n"
            "<!-- defaults: data -->\n\n| key | default |\n|---|---|\n| `a` | 1 |\n")
    assert list(yaml_blocks(text)) == [(2, "a: 1\n")]
    assert list(tables(text)) == [(11, "data", ["key", "default"], [["`a`", "1"]])]
    assert parse_value("`[1, 1, 1]` (white)") == [1, 1, 1] and parse_value("raise; or skip") == "raise"
    assert parse_value("(required)") is REQUIRED and parse_value("null (all groups)") is None
    assert parse_value("1e10") == 1e10 and parse_value("`auto`") == "auto"


# -- names the docs cite must exist (tests/doc_names.py) ----------------------------------------
def test_docs_cite_module_files_that_exist():
    problems = [p for doc in DOCS for p in doc_names.missing_paths(doc.read_text(), doc.name)]
    assert not problems, "\n".join(problems)


def test_a_doc_citing_a_module_file_that_is_gone_fails():
    text = "Rank agreement (`engine/requests.py`, `agreement.py`) and `splattrain/foo.py`; gsplat's `simple_trainer.py`.\n"
    problems = doc_names.missing_paths(text, "fake.md")
    assert len(problems) == 2 and "`agreement.py`" in problems[0] and "`splattrain/foo.py`" in problems[1], problems


def test_the_architecture_page_lists_the_layers_of_pyproject():
    documented = doc_names.documented_layers((REPO / "docs" / "architecture.md").read_text())
    assert documented == doc_names.pyproject_layers((REPO / "pyproject.toml").read_text())


def test_a_layer_table_that_differs_from_pyproject_fails():
    pyproject = 'layers = [\n    "splattrain.cli",\n    "splattrain.model",\n    "splattrain.kernels",\n]\n'
    page = ("## The layers, top to bottom\n\n| line | owns |\n| --- | --- |\n| `cli` | the command line |\n"
            "| `model \\| kernels` | the model; the compiled kernels |\n\nWhy.\n")
    assert doc_names.pyproject_layers(pyproject) == ["cli", "model", "kernels"]
    assert doc_names.documented_layers(page) == ["cli", "model | kernels"]
    fixed = page.replace("| `model \\| kernels` | the model; the compiled kernels |",
                         "| `model` | the model |\n| `kernels` | the compiled kernels |")
    assert doc_names.documented_layers(fixed) == doc_names.pyproject_layers(pyproject)


def test_docs_cite_functions_that_exist():
    problems = [p for doc in DOCS for p in doc_names.unresolved_doc_names(doc.read_text(), doc.name, CONFIG_KEYS)]
    assert not problems, "\n".join(problems)


def test_docstrings_cite_functions_that_exist():
    problems = []
    for path in sorted((REPO / "splattrain").rglob("*.py")):
        if path.name == "__main__.py":  # importing it runs the command line
            continue
        relative = path.relative_to(REPO)
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        problems += doc_names.unresolved_docstring_names(module, path.read_text(), str(relative))
    assert not problems, "\n".join(problems)


def test_a_cited_function_that_is_gone_fails():
    text = ("`splattrain.engine.load_config` and `checkpointing.restore` exist; `checkpointing.restore_checkpoint` "
            "and `splattrain.engine.checkpointing.read_checkpont` do not; `trainer.max_steps` is a config key.\n")
    problems = doc_names.unresolved_doc_names(text, "fake.md", CONFIG_KEYS)
    assert len(problems) == 2 and "restore_checkpoint" in problems[0] and "read_checkpont" in problems[1], problems
    source = ('"""What :func:`~splattrain.engine.checkpointing.restore_checkpoint` loads; '
              ':func:`~splattrain.engine.checkpointing.restore` and :meth:`Path.exists`."""\nfrom pathlib import Path\n')
    problems = doc_names.unresolved_docstring_names("splattrain.checkpoints.schema", source, "fake.py")
    assert len(problems) == 1 and "restore_checkpoint" in problems[0], problems


def test_docs_run_only_programs_a_user_has():
    problems = [p for doc in DOCS for p in doc_names.unknown_programs(doc.read_text(), doc.name)]
    assert not problems, "\n".join(problems)


def test_a_doc_running_a_program_nobody_ships_fails():
    text = ("Measure it:\n\n    python benchmarks/bench_demo.py\n    benchpal -n 3 --vs OTHER -- splattrain fit\n"
            "    step 200/200  130.9 it/s\n\n```bash\nOMP_NUM_THREADS=1 python benchmarks/bench_cpu_stages.py --isa avx2\n"
            "cd benchmarks && timeit-pro run --runs 3\n```\n\nor `fit --dry-run`, `bench_startup.py --runs 3`, "
            "`hyperfine -w 1 'splattrain --help'`.\n")
    problems = doc_names.unknown_programs(text, "fake.md")
    assert [p.split("runs `")[-1].split("`")[0] for p in problems] == ["benchpal", "timeit-pro", "hyperfine"], problems
    assert problems[0].startswith("fake.md:4:")


# -- the benchmarks page and the changelog stay short -------------------------------------------
def test_the_benchmarks_page_holds_current_figures_only():
    problems = doc_shape.benchmarks_page_problems((REPO / "docs" / "benchmarks.md").read_text())
    problems += [p for p in doc_shape.benchmarks_page_problems((REPO / "README.md").read_text()) if "reads like" in p]
    assert not problems, problems


def test_a_benchmarks_page_that_logs_measurements_fails():
    good = "# Benchmarks\n\nMeasurement logs belong in the closing note of the work they measured.\n\n| a | b |\n"
    assert doc_shape.benchmarks_page_problems(good) == []
    log = good + "A ninth round against the landed baseline, two turns.\n" + "row\n" * 200
    problems = doc_shape.benchmarks_page_problems(log)
    assert problems[0].startswith("206 lines") and "line 6 reads like a measurement log" in problems[1], problems


def test_the_changelog_has_one_line_per_change():
    problems = doc_shape.changelog_problems((REPO / "CHANGELOG.md").read_text())
    assert not problems, problems


def test_a_changelog_of_paragraphs_fails():
    good = "# Changelog\n\nIntro.\n\n## 2026-11-28\n\n### Added\n- A hook.\n\n## 2026-11-27\n\n### Fixed\n- A bug.\n"
    assert doc_shape.changelog_problems(good) == []
    paragraph = good.replace("- A hook.\n", "**A hook.** It does this,\nand that, measured in turns.\n")
    assert len(doc_shape.changelog_problems(paragraph)) == 2
    assert "dated sections" in doc_shape.changelog_problems(good.replace("2026-11-27", "2026-11-29"))[0]
