"""The answer-level and evaluation constants are each defined once in the whole package (issue 42): the BioASQ
question types and the abstention phrase in ``medretrieve.records`` (every floor may import it, the HTTP schema
too), MedRGB's scenarios in ``medretrieve.evaluation.medrgb.prompts``, the judge's scores in
``medretrieve.evaluation.metrics``. Every other module imports them; a second assignment, or the same value
spelt out again as a literal, fails here."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import medretrieve
from medretrieve.evaluation import metrics
from medretrieve.evaluation.medrgb import prompts as medrgb_prompts
from medretrieve import records

PACKAGE = Path(medretrieve.__file__).resolve().parent

# name(s) it may be bound to, its value, the one module (relative to the package) that defines it
CONSTANTS: Dict[str, Tuple[Tuple[str, ...], object, str]] = {
    "BioASQ question types": (("BIOASQ_TYPES", "BioASQType"), records.BIOASQ_TYPES, "records.py"),
    "abstention phrase": (("INSUFFICIENT",), records.INSUFFICIENT, "records.py"),
    "MedRGB scenarios": (("SCENARIOS", "MEDRGB_SCENARIOS"), medrgb_prompts.SCENARIOS, "evaluation/medrgb/prompts.py"),
    "judge scores": (("JUDGE_VALUES", "_JUDGE_VALUES"), metrics.JUDGE_VALUES, "evaluation/metrics.py"),
}


def _docstrings(tree: ast.AST) -> set:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _literal(node: ast.AST) -> object:
    """The value a node spells out: a string, or a tuple of the constants of a tuple / list / ``Literal[...]``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, float, int)):
        return node.value
    if isinstance(node, ast.Subscript):
        node = node.slice
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts and all(isinstance(e, ast.Constant) for e in node.elts):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def _definitions() -> Dict[str, List[str]]:
    """``{constant: ["module:line", ...]}`` for every binding of one of its names and every literal of its value."""
    found: Dict[str, List[str]] = {what: [] for what in CONSTANTS}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            targets: List[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for what, (names, value, _) in CONSTANTS.items():
                if any(isinstance(t, ast.Name) and t.id in names for t in targets):
                    found[what].append(f"{rel}:{node.lineno}")
                elif id(node) not in docs and _literal(node) == value:
                    found[what].append(f"{rel}:{getattr(node, 'lineno', 0)} (literal)")
    return {what: sorted(set(places)) for what, places in found.items()}


@pytest.mark.parametrize("what", list(CONSTANTS))
def test_each_constant_is_defined_once(what: str) -> None:
    home = CONSTANTS[what][2]
    places = _definitions()[what]
    literals = [p for p in places if p.endswith("(literal)")]
    bound = [p for p in places if not p.endswith("(literal)")]
    # bound in its home only (BIOASQ_TYPES there is read from the BioASQType Literal), spelt out once, there
    assert bound and all(p.startswith(home + ":") for p in bound), (
        f"the {what} are defined again: {bound}; import them from {home}")
    assert len(literals) == 1 and literals[0].startswith(home + ":"), (
        f"the {what} are spelt out {len(literals)} times: {literals}; import them from {home}")


def test_the_wire_schema_takes_the_question_types_from_records() -> None:
    from medretrieve import wire

    schema = wire.AnswerRequest.model_json_schema()["properties"]["qtype"]
    assert schema["anyOf"][0]["enum"] == list(records.BIOASQ_TYPES)
