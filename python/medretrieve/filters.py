"""The metadata filter language of a search (the ``where`` option of every door), parsed on the ground floor so
that the HTTP client and the server check a filter without loading the engine.

Two forms of one filter:

- text: ``year >= 2015 and publication_type in (Review, "Randomized Controlled Trial") and not retracted``:
  comparisons ``==`` (or ``=``), ``!=``, ``<``, ``<=``, ``>``, ``>=``; ``in (v, ...)`` and ``not in (...)``; a bare
  field (a boolean field that is true); ``and`` / ``or`` / ``not`` (case-insensitive; ``not`` binds tightest, then
  ``and``) and parentheses. Values are numbers, ``true`` / ``false``, quoted strings (``"..."`` or ``'...'``,
  backslash escapes) or bare words (letters, digits, ``_ - . :``: ``Review``, ``2015-06-01``).
- JSON (HTTP, MCP): ``{"field": "year", "op": ">=", "value": 2015}``, ``{"field": "publication_type", "op":
  "in", "value": ["Review"]}``, ``{"field": "retracted", "op": "is_true"}``, ``{"and": [...]}``, ``{"or": [...]}``,
  ``{"not": {...}}``; a string in its place is the text form.

:func:`parse_filter` reads either into a :class:`Filter` (an immutable tree whose :meth:`Filter.text` is the
canonical text: the key of compiled filters); :class:`FilterError` (a ValueError) names the position, the field
or the operator at fault. Whether the fields exist and the values fit their types is checked against a
collection's fields by :func:`check_fields` (``medretrieve.corpus.metadata`` runs it when compiling).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = ["Filter", "Compare", "Member", "Flag", "Not", "All", "AnyOf", "FilterError", "parse_filter", "facet_hits",
           "check_fields", "FIELD_TYPES", "COMPARISONS", "MAX_FILTER_CHARS"]

MAX_FILTER_CHARS = 4000  # longest text form (and nesting is bounded by it: every level costs a character)
MAX_DEPTH = 32
#: the types a metadata field may have: keyword (a string), keywords (a list of strings: MeSH headings),
#: integer, float, date (ISO ``YYYY[-MM[-DD]]``), boolean
FIELD_TYPES = ("keyword", "keywords", "integer", "float", "date", "boolean")
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_ORDERED = {"integer", "float", "date"}

Value = Union[str, int, float, bool]


class FilterError(ValueError):
    """A filter that cannot be read or does not fit the collection's fields; ``field``: the field at fault (None
    for a syntax error)."""

    def __init__(self, message: str, field: Optional[str] = None) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> Any:
        return type(self), (str(self), self.field)


def _literal(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


class Filter:
    """A node of a parsed filter."""

    def text(self) -> str:
        """The canonical text form (parses back to an equal filter)."""
        raise NotImplementedError

    def to_json(self) -> Dict[str, Any]:
        """The JSON form."""
        raise NotImplementedError

    def fields(self) -> List[str]:
        """The fields it reads, in order of appearance."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class Compare(Filter):
    """``field op value``."""

    field: str
    op: str
    value: Value

    def text(self) -> str:
        return f"{self.field} {self.op} {_literal(self.value)}"

    def to_json(self) -> Dict[str, Any]:
        return {"field": self.field, "op": self.op, "value": self.value}

    def fields(self) -> List[str]:
        return [self.field]


@dataclass(frozen=True)
class Member(Filter):
    """``field in (values)`` (for a keyword list: any of its values is one of them)."""

    field: str
    values: Tuple[Value, ...]

    def text(self) -> str:
        return f"{self.field} in ({', '.join(_literal(v) for v in self.values)})"

    def to_json(self) -> Dict[str, Any]:
        return {"field": self.field, "op": "in", "value": list(self.values)}

    def fields(self) -> List[str]:
        return [self.field]


@dataclass(frozen=True)
class Flag(Filter):
    """A bare boolean field: true."""

    field: str

    def text(self) -> str:
        return self.field

    def to_json(self) -> Dict[str, Any]:
        return {"field": self.field, "op": "is_true"}

    def fields(self) -> List[str]:
        return [self.field]


@dataclass(frozen=True)
class Not(Filter):
    part: Filter

    def text(self) -> str:
        inner = self.part.text()
        return f"not ({inner})" if isinstance(self.part, (All, AnyOf)) else f"not {inner}"

    def to_json(self) -> Dict[str, Any]:
        return {"not": self.part.to_json()}

    def fields(self) -> List[str]:
        return self.part.fields()


@dataclass(frozen=True)
class All(Filter):
    parts: Tuple[Filter, ...]

    def text(self) -> str:
        return " and ".join(f"({p.text()})" if isinstance(p, AnyOf) else p.text() for p in self.parts)

    def to_json(self) -> Dict[str, Any]:
        return {"and": [p.to_json() for p in self.parts]}

    def fields(self) -> List[str]:
        return [f for p in self.parts for f in p.fields()]


@dataclass(frozen=True)
class AnyOf(Filter):
    parts: Tuple[Filter, ...]

    def text(self) -> str:
        return " or ".join(f"({p.text()})" if isinstance(p, All) else p.text() for p in self.parts)

    def to_json(self) -> Dict[str, Any]:
        return {"or": [p.to_json() for p in self.parts]}

    def fields(self) -> List[str]:
        return [f for p in self.parts for f in p.fields()]


# ------------------------------------------------------------------ text form
_TOKEN = re.compile(r"""\s*(?:(?P<op>==|!=|>=|<=|=|<|>)|(?P<paren>[(),])|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
                    r"""|(?P<word>[A-Za-z0-9_.:+\-]+))""")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*$")


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: List[Tuple[str, str, int]] = []  # (kind, text, position)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                at = len(text) - len(text[pos:].lstrip())
                raise FilterError(f"where: unexpected character {text[at]!r} at position {at + 1}")
            kind = m.lastgroup or "word"
            self.items.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> Optional[Tuple[str, str, int]]:
        return self.items[self.i] if self.i < len(self.items) else None

    def take(self) -> Tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise FilterError("where: the filter ends too early")
        self.i += 1
        return tok

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "word" and tok[1].lower() == word:
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> None:
        kind, got, pos = self.take()
        if got != text:
            raise FilterError(f"where: expected {text!r} at position {pos + 1}, got {got!r}")


def _value(tok: Tuple[str, str, int]) -> Value:
    kind, text, pos = tok
    if kind == "str":
        out, chars = [], iter(text[1:-1])
        for ch in chars:
            if ch == "\\":
                ch = next(chars)
                if ch not in "\"'\\":
                    raise FilterError(f"where: unknown escape \\{ch} in the string at position {pos + 1}")
            out.append(ch)
        return "".join(out)
    if kind != "word":
        raise FilterError(f"where: expected a value at position {pos + 1}, got {text!r}")
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if _NUMBER.match(text):
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        number = float(text)
        if not math.isfinite(number):  # 1e400: its text form would read back as the word 'inf'
            raise FilterError(f"where: the number {text} at position {pos + 1} is out of range")
        return number
    return text


def _parse_or(t: _Tokens, depth: int) -> Filter:
    parts = [_parse_and(t, depth)]
    while t.keyword("or"):
        parts.append(_parse_and(t, depth))
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


def _parse_and(t: _Tokens, depth: int) -> Filter:
    parts = [_parse_not(t, depth)]
    while t.keyword("and"):
        parts.append(_parse_not(t, depth))
    return parts[0] if len(parts) == 1 else All(tuple(parts))


def _parse_not(t: _Tokens, depth: int) -> Filter:
    if depth > MAX_DEPTH:
        raise FilterError(f"where: nested deeper than {MAX_DEPTH} levels")
    if t.keyword("not"):
        return Not(_parse_not(t, depth + 1))
    tok = t.peek()
    if tok is not None and tok[1] == "(":
        t.take()
        inner = _parse_or(t, depth + 1)
        t.expect(")")
        return inner
    return _parse_term(t)


def _parse_term(t: _Tokens) -> Filter:
    kind, name, pos = t.take()
    if kind != "word" or not _NAME.match(name) or name.lower() in ("and", "or", "not", "in"):
        raise FilterError(f"where: expected a field name at position {pos + 1}, got {name!r}")
    if t.keyword("in"):
        return Member(name, _value_list(t))
    nxt = t.peek()
    if nxt is not None and nxt[0] == "word" and nxt[1].lower() == "not":
        t.take()
        if not t.keyword("in"):
            raise FilterError(f"where: expected 'in' after '{name} not' at position {nxt[2] + 1}", name)
        return Not(Member(name, _value_list(t)))
    if nxt is not None and nxt[0] == "op":
        t.take()
        op = "==" if nxt[1] == "=" else nxt[1]
        return Compare(name, op, _value(t.take()))
    return Flag(name)


def _value_list(t: _Tokens) -> Tuple[Value, ...]:
    t.expect("(")
    values = [_value(t.take())]
    while True:
        kind, text, pos = t.take()
        if text == ")":
            return tuple(values)
        if text != ",":
            raise FilterError(f"where: expected ',' or ')' at position {pos + 1}, got {text!r}")
        values.append(_value(t.take()))


def _parse_text(text: str) -> Filter:
    if len(text) > MAX_FILTER_CHARS:
        raise FilterError(f"where must be at most {MAX_FILTER_CHARS} characters, got {len(text)}")
    if not text.strip():
        raise FilterError("where must not be empty")
    t = _Tokens(text)
    out = _parse_or(t, 0)
    rest = t.peek()
    if rest is not None:
        raise FilterError(f"where: unexpected {rest[1]!r} at position {rest[2] + 1} (join conditions with and / or)")
    return out


# ------------------------------------------------------------------ JSON form
def _is_value(v: Any) -> bool:
    return isinstance(v, (str, bool, int)) or (isinstance(v, float) and math.isfinite(v))


def _parse_json(obj: Any, depth: int) -> Filter:
    if depth > MAX_DEPTH:
        raise FilterError(f"where: nested deeper than {MAX_DEPTH} levels")
    if isinstance(obj, str):
        return _parse_text(obj)
    if not isinstance(obj, Mapping):
        raise FilterError(f"where must be a filter string or object, got {type(obj).__name__}")
    keys = set(obj)
    for joiner, cls in (("and", All), ("or", AnyOf)):
        if keys == {joiner}:
            parts = obj[joiner]
            if not isinstance(parts, list) or not parts:
                raise FilterError(f"where: {joiner!r} takes a non-empty list of filters")
            got = tuple(_parse_json(p, depth + 1) for p in parts)
            return got[0] if len(got) == 1 else cls(got)
    if keys == {"not"}:
        return Not(_parse_json(obj["not"], depth + 1))
    if "field" not in keys or "op" not in keys or not keys <= {"field", "op", "value"}:
        raise FilterError(f"where: a condition is {{'field', 'op', 'value'}} or one of and / or / not, got keys "
                          f"{sorted(map(str, keys))}")
    name, op = obj["field"], obj["op"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise FilterError(f"where: field must be a field name, got {name!r}")
    if op == "is_true":
        if "value" in keys:
            raise FilterError("where: is_true takes no value", name)
        return Flag(name)
    value = obj.get("value")
    if op in ("in", "not_in"):
        if not isinstance(value, list) or not value or not all(_is_value(v) for v in value):
            raise FilterError(f"where: {name} {op} takes a non-empty list of values", name)
        member = Member(name, tuple(value))
        return member if op == "in" else Not(member)
    if op not in COMPARISONS:
        raise FilterError(f"where: unknown operator {op!r} for {name}; known: {', '.join(COMPARISONS)}, in, "
                          f"not_in, is_true", name)
    if not _is_value(value):
        raise FilterError(f"where: {name} {op} takes a string, finite number or boolean, got {value!r}", name)
    return Compare(name, op, value)  # type: ignore[arg-type]  # (_is_value checked it)


def parse_filter(where: Any) -> Filter:
    """A filter from its text form (a string), its JSON form (a dict) or a :class:`Filter` (returned as it is);
    :class:`FilterError` (a ValueError) naming the position or the part at fault."""
    if isinstance(where, Filter):
        return where
    return _parse_json(where, 0)


# ------------------------------------------------------------------ types
def _fits(kind: str, value: Value) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("integer", "float"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "date":
        return isinstance(value, str) and re.fullmatch(r"\d{4}(-\d{2}(-\d{2})?)?", value) is not None or \
            (isinstance(value, int) and not isinstance(value, bool))
    return isinstance(value, str)


def check_fields(where: Filter, fields: Mapping[str, str]) -> None:
    """FilterError naming the field for an unknown field, or an operator or value its type does not take
    (``fields``: name -> one of :data:`FIELD_TYPES`)."""
    def check(node: Filter) -> None:
        if isinstance(node, (All, AnyOf)):
            for p in node.parts:
                check(p)
            return
        if isinstance(node, Not):
            check(node.part)
            return
        name = node.fields()[0]
        kind = fields.get(name)
        if kind is None:
            raise FilterError(f"where: unknown field {name!r}; the collection's fields: "
                              f"{', '.join(sorted(fields)) or 'none'}", name)
        if isinstance(node, Flag):
            if kind != "boolean":
                raise FilterError(f"where: {name} is {_article(kind)} field, not a boolean: compare it "
                                  f"({name} == ...)", name)
            return
        values = node.values if isinstance(node, Member) else (node.value,)  # type: ignore[attr-defined]
        if isinstance(node, Compare) and node.op in ("<", "<=", ">", ">=") and kind not in _ORDERED:
            raise FilterError(f"where: {name} is {_article(kind)} field: {node.op} needs an integer, float or "
                              "date field", name)
        for v in values:
            if not _fits(kind, v):
                raise FilterError(f"where: {name} is {_article(kind)} field, got {v!r}", name)
    check(where)


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def facet_hits(hits: Any, fields: Any) -> Dict[str, List[Tuple[Any, int]]]:
    """Counts per value of each field in ``fields`` over a search's hits (objects or dicts with ``document_id``
    and ``metadata``: ``SearchResult.hits``), a document counted once per value (its chunks are one article); a
    list value counts each item, a date (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``) by its year, a missing value not
    at all. Most frequent first (ties by value)."""
    out: Dict[str, List[Tuple[Any, int]]] = {}
    for name in fields:
        counts: Dict[Any, int] = {}
        seen: set = set()
        for hit in hits:
            doc = hit["document_id"] if isinstance(hit, Mapping) else hit.document_id
            meta = hit["metadata"] if isinstance(hit, Mapping) else hit.metadata
            value = (meta or {}).get(name)
            items = value if isinstance(value, list) else [] if value is None else [value]
            for item in items:
                if isinstance(item, str) and re.fullmatch(r"\d{4}(-\d{2}(-\d{2})?)?", item):
                    item = int(item[:4])
                if isinstance(item, (str, int, float, bool)) and (doc, item) not in seen:
                    seen.add((doc, item))
                    counts[item] = counts.get(item, 0) + 1
        out[name] = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    return out
