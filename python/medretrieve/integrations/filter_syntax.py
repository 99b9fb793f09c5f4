"""Each framework's own metadata-filter syntax mapped onto medretrieve's one filter language (the search option
``where``, :mod:`medretrieve.filters`), so a pipeline keeps the filters it already writes:

- Haystack 2 filter dicts: ``{"field": "meta.year", "operator": ">=", "value": 2015}`` and ``{"operator": "AND" |
  "OR" | "NOT", "conditions": [...]}`` (operators ``==``, ``!=``, ``>``, ``>=``, ``<``, ``<=``, ``in``, ``not in``);
- LlamaIndex ``MetadataFilters`` (``MetadataFilter(key, value, operator)``, nested, ``condition`` and / or / not;
  operators ``==``, ``!=``, ``>``, ``>=``, ``<``, ``<=``, ``in``, ``nin``, ``any``);
- LangChain's ``filter=`` in the form most vector stores take (Chroma, Qdrant, PGVector):
  ``{"year": {"$gte": 2015}, "journal": "Diabetes care"}``, ``{"$and": [...]}``, ``{"$or": [...]}``, ``{"$not":
  {...}}`` (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``, ``$nin``).

A string is taken as medretrieve's own text form everywhere. Anything else is a FilterError (a ValueError)
naming the part it cannot map.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping

from ..filters import FilterError

__all__ = ["from_haystack", "from_llamaindex", "from_mongo", "with_filter"]

_COMPARE = {"==": "==", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<="}


def _condition(field: Any, op: str, value: Any) -> Dict[str, Any]:
    if not isinstance(field, str) or not field:
        raise FilterError(f"where: a filter condition needs a field name, got {field!r}")
    if op in ("in", "not_in"):
        if not isinstance(value, (list, tuple)):
            raise FilterError(f"where: {field} {op} takes a list of values, got {value!r}", field)
        return {"field": field, "op": op, "value": list(value)}
    return {"field": field, "op": op, "value": value}


def _joined(op: str, parts: List[Dict[str, Any]]) -> Dict[str, Any]:
    if not parts:
        raise FilterError(f"where: {op} of no conditions")
    if op == "not":
        return {"not": parts[0] if len(parts) == 1 else {"and": parts}}
    return parts[0] if len(parts) == 1 else {op: parts}


def from_haystack(filters: Any) -> Any:
    """A Haystack 2 filter dict as medretrieve's JSON form (a ``meta.`` prefix dropped: medretrieve's fields are
    the documents' metadata)."""
    if filters is None or isinstance(filters, str):
        return filters
    if not isinstance(filters, Mapping):
        raise FilterError(f"where: a Haystack filter is a dict, got {type(filters).__name__}")
    if "conditions" in filters:
        joiner = str(filters.get("operator", "")).upper()
        if joiner not in ("AND", "OR", "NOT") or not isinstance(filters["conditions"], list):
            raise FilterError(f"where: a Haystack logical filter takes operator AND, OR or NOT and a list of "
                              f"conditions, got {dict(filters)!r}")
        return _joined(joiner.lower(), [from_haystack(c) for c in filters["conditions"]])
    field: Any = filters.get("field")
    op = filters.get("operator")
    if isinstance(field, str) and field.startswith("meta."):
        field = field[len("meta."):]
    if op in _COMPARE:
        return _condition(field, _COMPARE[op], filters.get("value"))
    if op in ("in", "not in"):
        return _condition(field, "in" if op == "in" else "not_in", filters.get("value"))
    raise FilterError(f"where: unknown Haystack operator {op!r} for {field}; known: ==, !=, >, >=, <, <=, in, "
                      "not in", field if isinstance(field, str) else None)


_LLAMA_OPS = {"==": "==", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<=", "in": "in", "nin": "not_in",
              "any": "in"}


def from_llamaindex(filters: Any) -> Any:
    """A LlamaIndex ``MetadataFilters`` (or one ``MetadataFilter``) as medretrieve's JSON form."""
    if filters is None or isinstance(filters, str):
        return filters
    nested = getattr(filters, "filters", None)
    if nested is not None:
        condition = getattr(getattr(filters, "condition", None), "value", getattr(filters, "condition", "and"))
        condition = str(condition or "and").lower()
        if condition not in ("and", "or", "not"):
            raise FilterError(f"where: unknown LlamaIndex condition {condition!r}")
        return _joined(condition, [from_llamaindex(f) for f in nested])
    key = getattr(filters, "key", None)
    op = getattr(getattr(filters, "operator", None), "value", getattr(filters, "operator", "=="))
    if op not in _LLAMA_OPS:
        raise FilterError(f"where: LlamaIndex operator {op!r} for {key} has no medretrieve equal; known: "
                          f"{', '.join(_LLAMA_OPS)}", key if isinstance(key, str) else None)
    value = getattr(filters, "value", None)
    if op == "any" and not isinstance(value, (list, tuple)):
        value = [value]
    return _condition(key, _LLAMA_OPS[op], value)


_MONGO_OPS = {"$eq": "==", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<=", "$in": "in",
              "$nin": "not_in"}


def from_mongo(filter: Any) -> Any:
    """A LangChain ``filter=`` in the Mongo-like form of most vector stores as medretrieve's JSON form."""
    if filter is None or isinstance(filter, str):
        return filter
    if not isinstance(filter, Mapping):
        raise FilterError(f"where: a filter is a dict such as {{'year': {{'$gte': 2015}}}}, got "
                          f"{type(filter).__name__}")
    parts: List[Dict[str, Any]] = []
    for key, value in filter.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list):
                raise FilterError(f"where: {key} takes a list of filters")
            parts.append(_joined(key[1:], [from_mongo(v) for v in value]))
        elif key == "$not":
            parts.append({"not": from_mongo(value)})
        elif isinstance(key, str) and key.startswith("$"):
            raise FilterError(f"where: unknown filter operator {key!r}; known: $and, $or, $not and, per field, "
                              f"{', '.join(_MONGO_OPS)}")
        elif isinstance(value, Mapping):
            for op, operand in value.items():
                if op not in _MONGO_OPS:
                    raise FilterError(f"where: unknown operator {op!r} for {key}; known: {', '.join(_MONGO_OPS)}",
                                      key)
                parts.append(_condition(key, _MONGO_OPS[op], operand))
        else:
            parts.append(_condition(key, "==", value))
    return _joined("and", parts)


def with_filter(options: Mapping[str, Any], native: Any, convert: Any) -> Dict[str, Any]:
    """Search options with a framework's filter ``native`` (None: none) mapped by ``convert`` and joined to a
    ``where`` the options already hold (both must pass)."""
    out = dict(options)
    if native is None:
        return out
    mapped = convert(native)
    out["where"] = mapped if out.get("where") is None else {"and": [out["where"], mapped]}
    return out
