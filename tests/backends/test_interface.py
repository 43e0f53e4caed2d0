"""Code outside ``engines/backends`` uses backends through ``base.Backend`` only: it imports no
concrete backend module, tests no backend's type and assigns no backend attribute (read by AST)."""

from __future__ import annotations

import ast

from ..source_code import SRC as ROOT
from ..source_code import modules, source_nodes

BACKENDS = ROOT / "engines" / "backends"
PACKAGE = "mtsql.engines.backends"
CONCRETE = {"hf", "vllm", "openai", "vllm_server"}  # the modules of concrete backends and their server


def outside_backends() -> dict[str, tuple[ast.AST, ...]]:
    """Each module outside ``engines/backends``: its nodes."""
    return {
        str(path.relative_to(ROOT)): source_nodes(path) for path in modules() if BACKENDS not in path.parents
    }


def backend_classes() -> set[str]:
    """Every class defined in ``engines/backends`` (the interface, the backends, their helpers)."""
    return {
        node.name
        for path in modules(BACKENDS)
        for node in source_nodes(path)
        if isinstance(node, ast.ClassDef)
    }


def concrete_imports(nodes) -> list[str]:
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [
                a.name
                for a in node.names
                if a.name.removeprefix(PACKAGE + ".").split(".")[0] in CONCRETE
                and a.name.startswith(PACKAGE + ".")
            ]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(PACKAGE + ".") and node.module.split(".")[3] in CONCRETE:
                found.append(node.module)
            elif node.module == PACKAGE:
                found += [f"{PACKAGE}.{a.name}" for a in node.names if a.name in CONCRETE]
    return found


def type_tests(nodes, classes: set[str]) -> list[str]:
    """``isinstance``/``issubclass``/``type(...) is`` against a class of ``engines/backends``."""
    found = []
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
        ):
            named = {
                n.id if isinstance(n, ast.Name) else n.attr
                for n in ast.walk(node.args[1])
                if isinstance(n, (ast.Name, ast.Attribute))
            }
            found += [f"line {node.lineno}: {node.func.id}(..., {name})" for name in sorted(named & classes)]
    return found


def backend_attributes() -> set[str]:
    """The attributes the classes of ``engines/backends`` set (``self.model = ...``) or declare."""
    names = set()
    for path in modules(BACKENDS):
        for node in source_nodes(path):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                names |= {
                    item.target.id
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
    return names


def backend_attribute_writes(nodes, attributes: set[str]) -> list[str]:
    """Assignments to one of a backend's ``attributes`` through a name ``backend``
    (``backend.model = ...``, ``self.engine.backend.cache = ...``)."""
    found = []
    for node in nodes:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in attributes:
                owner = target.value
                name = (
                    owner.id
                    if isinstance(owner, ast.Name)
                    else owner.attr
                    if isinstance(owner, ast.Attribute)
                    else ""
                )
                if name == "backend":
                    found.append(f"line {node.lineno}: {ast.unparse(target)} = ...")
    return found


def test_no_module_outside_the_backends_imports_a_concrete_backend():
    wrong = {name: concrete_imports(nodes) for name, nodes in outside_backends().items()}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_no_module_outside_the_backends_tests_a_backend_type():
    classes = backend_classes()
    assert {"HFBackend", "VLLMBackend", "OpenAIBackend", "Backend"} <= classes
    wrong = {name: type_tests(nodes, classes) for name, nodes in outside_backends().items()}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_no_module_outside_the_backends_assigns_a_backend_attribute():
    attributes = backend_attributes()
    assert {"model", "cache", "server", "tokenizer", "end_of_turn_ids"} <= attributes
    wrong = {name: backend_attribute_writes(nodes, attributes) for name, nodes in outside_backends().items()}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_the_checks_see_what_they_look_for():
    """The old trainer's reach into the backends is found by each check."""
    old = ast.parse(
        "from mtsql.engines.backends.hf import HFBackend\n"
        "from mtsql.engines.backends import vllm\n"
        "import mtsql.engines.backends.vllm\n"
        "from mtsql.engines.backends import make_backend\n"
        "backend.model = trainable(backend.model)\n"
        "self.engine.backend.cache = None\n"
        "backend.normalizer = normalizers.NFC()\n"
        "self.backend = backend\n"
        "if isinstance(backend, (HFBackend, vllm.VLLMBackend)):\n    pass\n"
    )
    old = tuple(ast.walk(old))
    assert concrete_imports(old) == [
        "mtsql.engines.backends.hf",
        "mtsql.engines.backends.vllm",
        "mtsql.engines.backends.vllm",
    ]
    assert type_tests(old, backend_classes()) == [
        "line 9: isinstance(..., HFBackend)",
        "line 9: isinstance(..., VLLMBackend)",
    ]
    assert backend_attribute_writes(
        old, backend_attributes()
    ) == [  # a tokenizer's backend is not one of ours
        "line 5: backend.model = ...",
        "line 6: self.engine.backend.cache = ...",
    ]
