"""``medretrieve collection add | delete | check | metadata``: change a built collection in place, check it whole,
or list and declare its documents' metadata fields.

``add`` and ``delete`` are :meth:`~medretrieve.corpus.collection.Collection.add` / ``delete``: each writes a
complete new version and swaps it in, so a server or another process searching the collection meanwhile keeps
reading the version it opened; writers take turns. ``check`` opens the collection with every digest verified and
reads every record (exit 2 with the file and record at fault). ``metadata`` lists the fields a filter may name
(type, live documents holding a value) and, with ``--declare``, declares their types
(:meth:`~medretrieve.corpus.collection.Collection.declare_metadata`, strict unless ``--lenient``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List, Optional

from .options import HelpFormatter


def add_collection(sub: Any) -> None:
    from ..corpus.sources import FORMATS

    parser = sub.add_parser("collection", help="add documents to a collection, delete them, or check it whole",
                            formatter_class=HelpFormatter)
    group = parser.add_subparsers(dest="action", metavar="ACTION")
    group.required = True
    p = group.add_parser("add", help="add documents (ids already present are skipped and counted)",
                         formatter_class=HelpFormatter)
    p.add_argument("collection", help="collection directory (medretrieve build)")
    p.add_argument("source", nargs="+", help="corpus file(s) or directory, as for medretrieve build")
    p.add_argument("--format", default="auto", choices=FORMATS, help="corpus format (auto: from the file)")
    p.add_argument("--errors", default="skip", choices=("skip", "raise"),
                   help="bad records: skip and count them, or stop at the first (nothing is written then)")
    p.add_argument("--batch-size", type=int, default=64, help="chunks encoded per encoder call")
    p.set_defaults(func=_add)
    p = group.add_parser("delete", help="delete documents by id (unknown ids are ignored)",
                         formatter_class=HelpFormatter)
    p.add_argument("collection", help="collection directory")
    p.add_argument("ids", nargs="+", metavar="ID", help="document ids")
    p.set_defaults(func=_delete)
    p = group.add_parser("check", help="verify every file's digest and read every record",
                         formatter_class=HelpFormatter)
    p.add_argument("collection", help="collection directory")
    p.add_argument("--no-digests", dest="digests", action="store_false",
                   help="skip the sha256 of each file (sizes, structure and every record are still checked)")
    p.set_defaults(func=_check)
    p = group.add_parser("metadata", help="list the documents' metadata fields (type, documents holding one), or "
                                          "declare their types", formatter_class=HelpFormatter)
    p.add_argument("collection", help="collection directory")
    add_declare_option(p)
    p.add_argument("--lenient", action="store_true",
                   help="with --declare: a value that does not fit its declared type counts as missing instead of "
                        "refusing the declaration")
    p.add_argument("--json", action="store_true", help="print the listing as one JSON object")
    p.set_defaults(func=_metadata)


def add_declare_option(p: argparse.ArgumentParser) -> None:
    """``--declare FIELD=TYPE[,FIELD=TYPE...]`` (repeatable), read by :func:`declared`."""
    from ..filters import FIELD_TYPES

    p.add_argument("--declare", action="append", default=None, metavar="FIELD=TYPE[,...]",
                   help=f"declare metadata field types ({', '.join(FIELD_TYPES)}) in place of those inferred from "
                        "the values; fields left out cannot be filtered on (repeatable)")


def declared(values: Optional[List[str]]) -> Optional[Dict[str, str]]:
    """The fields of ``--declare`` options, name -> type (None: none given); ValueError naming a malformed
    item, a field given twice or an unknown type."""
    if values is None:
        return None
    from ..corpus.metadata import check_declared

    fields: Dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            name, eq, kind = (x.strip() for x in item.partition("="))
            if not eq or not name or not kind:
                raise ValueError(f"--declare: {item.strip()!r} is not FIELD=TYPE (e.g. year=integer)")
            if name in fields:
                raise ValueError(f"--declare: field {name!r} given twice")
            fields[name] = kind
    return check_declared(fields)


def misfit_notes(col: Any, fields: Dict[str, str]) -> List[str]:
    """One line per declared field some documents of ``col`` hold values of another type for (they count as
    missing it)."""
    from ..corpus.metadata import misfits

    return [f"note: {name} is declared {fields[name]}, but {count} documents hold values such as {example!r}: they "
            "count as missing it" for name, (count, example) in sorted(misfits(col.rows.document_metadata(),
                                                                               fields).items())]


def _metadata(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection

    fields = declared(args.declare)
    if args.lenient and fields is None:
        raise ValueError("--lenient needs --declare")
    col = Collection.open(args.collection)
    if fields is not None:
        col.declare_metadata(fields, strict=not args.lenient)
        for line in misfit_notes(col, fields):  # (lenient: what it declared anyway)
            print(line, file=sys.stderr)
    counts = col.metadata_counts()
    types = col.metadata_fields
    how = "declared" if (col.manifest.get("metadata") or {}).get("declared") else "inferred from the values"
    if args.json:
        print(json.dumps({"collection": str(col.directory), "documents": col.n_documents,
                          "declared": how == "declared",
                          "fields": {n: {"type": types[n], "documents": counts[n]} for n in sorted(types)}}))
        return 0
    print(f"{col.directory}: {len(types)} metadata fields ({how}), {col.n_documents} documents")
    width = max([len(n) for n in types] + [5])
    print(f"{'field':<{width}}  {'type':<8}  documents")
    for name in sorted(types):
        print(f"{name:<{width}}  {types[name]:<8}  {counts[name]}")
    return 0


def _add(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection
    from ..corpus.sources import ReadReport

    t0 = time.perf_counter()
    col = Collection.open(args.collection)
    report = ReadReport()
    before = col.n_documents
    n = col.add(args.source, errors=args.errors, batch_size=args.batch_size, format=args.format, report=report)
    print(f"added {n} chunks ({col.n_documents - before} documents) to {col.directory} in "
          f"{time.perf_counter() - t0:.1f} s: now {col.n_documents} documents, {len(col)} chunks; "
          f"{report.summary()}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection

    col = Collection.open(args.collection)
    before = col.n_documents
    n = col.delete(args.ids)
    print(f"deleted {n} chunks ({before - col.n_documents} of {len(set(args.ids))} ids found) from {col.directory}: "
          f"now {col.n_documents} documents, {len(col)} chunks")
    return 0


def _check(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection

    t0 = time.perf_counter()
    col = Collection.open(args.collection, verify=args.digests)
    counts = col.check()
    print(f"{col.directory}: sound ({'every file matches its sha256; ' if args.digests else ''}{counts['chunks']} "
          f"chunk records, {counts['sections']} sections, every BM25 posting read) in "
          f"{time.perf_counter() - t0:.1f} s: {counts['documents']} documents, {counts['live_chunks']} live chunks")
    return 0
