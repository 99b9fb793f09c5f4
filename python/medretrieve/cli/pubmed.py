"""``medretrieve fetch-pubmed QUERY|--pmids FILE OUT.jsonl [--where FILTER]``: a local corpus from PubMed
(E-utilities; a metadata filter narrows the query and leaves out the records that fail it), and the
PubMed options shared by every command that reads PubMed (``search --pubmed``, ``eval retrieval --pubmed``):
:func:`add_pubmed_options` declares them, :func:`pubmed_source` and :func:`online_stage` build what they
describe."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, List

from .options import HelpFormatter
from .._files import write_text_atomic


def add_pubmed_options(p: argparse.ArgumentParser) -> None:
    """Where PubMed is and who asks (NCBI's rules), and the on-disk cache."""
    from ..corpus.pubmed import DEFAULT_BASE_URL

    p.add_argument("--pubmed-url", default=DEFAULT_BASE_URL, help="E-utilities root")
    p.add_argument("--ncbi-api-key", default=os.environ.get("NCBI_API_KEY"),
                   help="NCBI API key: 10 requests/s instead of 3 (default: $NCBI_API_KEY)")
    p.add_argument("--email", default=os.environ.get("NCBI_EMAIL"),
                   help="contact e-mail NCBI asks tools to send (default: $NCBI_EMAIL)")
    p.add_argument("--pubmed-cache", default=None,
                   help="cache folder for searches and records (default: MEDRETRIEVE_CACHE_DIR/pubmed; 'none': "
                        "no cache); a re-run is then free and works offline")
    p.add_argument("--retmax", type=int, default=100, help="PMIDs asked from esearch (BioASQ pipelines: 60-100)")
    p.add_argument("--pubmed-timeout-s", type=float, default=30.0,
                   help="longest single E-utilities request, connecting to the last byte (s)")
    p.add_argument("--pubmed-retries", type=int, default=4, help="retries of a 429 / 5xx / dropped request")
    p.add_argument("--pubmed-max-reply-mb", type=float, default=64.0,
                   help="largest E-utilities reply read (MiB); a larger one is refused")
    p.add_argument("--pubmed-queries", type=int, default=4,
                   help="online search: esearch calls per question (its words, one per expansion kind, their OR)")
    p.add_argument("--no-pubmed-recovery", dest="pubmed_recovery", action="store_false",
                   help="online search: do not re-query PubMed with relaxed terms when a question is weak")


def pubmed_source(args: argparse.Namespace) -> Any:
    """The :class:`~medretrieve.corpus.pubmed.PubMedSource` the options describe."""
    from ..corpus.pubmed import PubMedSource
    from ..models.encoders import cache_dir

    cache = args.pubmed_cache
    if cache is None:
        cache = cache_dir() / "pubmed"
    elif cache.strip().lower() == "none":
        cache = None
    return PubMedSource(args.pubmed_url, api_key=args.ncbi_api_key, email=args.email, cache_dir=cache,
                        timeout_s=args.pubmed_timeout_s, max_retries=args.pubmed_retries,
                        max_reply_bytes=int(args.pubmed_max_reply_mb * (1 << 20)))


def online_stage(args: argparse.Namespace) -> Any:
    """The :class:`~medretrieve.retrieval.online.OnlineStage` (over :func:`pubmed_source`) the options describe."""
    from ..retrieval.online import OnlineStage

    return OnlineStage(pubmed_source(args), retmax=args.retmax, max_queries=args.pubmed_queries,
                       recovery=args.pubmed_recovery)


def read_pmids(path: str) -> List[str]:
    """PMIDs of a file: one per line (a PMID or a PubMed URL); blank lines and ``#`` comments are skipped."""
    from ..corpus.sources import pmid_from_url

    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            out.append(pmid_from_url(line))
        except ValueError:
            raise ValueError(f"{path}:{n}: not a PMID or PubMed URL: {line!r}") from None
    if not out:
        raise ValueError(f"{path}: no PMIDs")
    return out


def add_fetch_pubmed(sub: Any) -> None:
    p = sub.add_parser("fetch-pubmed", help="build a local corpus (JSONL for 'medretrieve build') from PubMed",
                       formatter_class=HelpFormatter,
                       usage="medretrieve fetch-pubmed (QUERY | --pmids FILE) OUT.jsonl [options]",
                       description="Search PubMed (esearch, by relevance) or take a list of PMIDs, fetch the "
                                   "MEDLINE records (efetch) and write them as JSONL that 'medretrieve build' reads.")
    p.add_argument("args", nargs="+", metavar="ARG",
                   help="a PubMed query and the output file (with --pmids: the output file only)")
    p.add_argument("--pmids", default=None, help="file of PMIDs (one per line) instead of a query")
    p.add_argument("--mindate", default=None, help="earliest date (YYYY[/MM[/DD]]), with --maxdate")
    p.add_argument("--maxdate", default=None, help="latest date (YYYY[/MM[/DD]]), with --mindate")
    p.add_argument("--datetype", default="pdat", choices=("pdat", "edat", "mdat"), help="which date the range limits")
    p.add_argument("--where", default=None, metavar="FILTER",
                   help="a metadata filter (docs/filters.md: year, publication_date, publication_type, mesh, "
                        "mesh_major, journal, language, retracted): it narrows the query with PubMed's tags and the "
                        "records that fail it are left out")
    p.add_argument("--deadline-ms", type=float, default=None, help="time limit for the whole fetch (ms)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT.jsonl if it exists")
    add_pubmed_options(p)
    p.set_defaults(func=_fetch_pubmed)


def _fetch_pubmed(args: argparse.Namespace) -> int:
    from ..corpus.pubmed_terms import MEDLINE_FIELDS, filtered_term, records_passing
    from ..corpus.sources import ReadReport, record_to_dict
    from ..filters import check_fields, parse_filter

    want = 1 if args.pmids else 2
    if len(args.args) != want:
        raise ValueError("give QUERY OUT.jsonl, or --pmids FILE OUT.jsonl" if want == 2 else
                         "with --pmids give only OUT.jsonl")
    where = None if args.where is None else parse_filter(args.where)
    if where is not None:
        check_fields(where, MEDLINE_FIELDS)  # a FilterError (exit 2) naming the field
    out = Path(args.args[-1])
    if out.exists() and not args.overwrite:
        raise FileExistsError(f"{out} exists; pass --overwrite to replace it")
    report = ReadReport()
    with pubmed_source(args) as src:
        if args.pmids:
            pmids = read_pmids(args.pmids)
        else:
            pmids = src.search(filtered_term(args.args[0], where), args.retmax, args.deadline_ms,
                               mindate=args.mindate, maxdate=args.maxdate, datetype=args.datetype)
        fetched = src.fetch(pmids, args.deadline_ms, report=report)
        records, failed = records_passing(fetched, where)
    write_text_atomic(out, "".join(json.dumps(record_to_dict(r), ensure_ascii=False) + "\n" for r in records))
    missing = len(pmids) - len(fetched) - report.n_skipped
    print(f"{out}: {len(records)} records from {len(pmids)} PMIDs ({missing} not in PubMed, "
          f"{report.n_skipped} malformed skipped{f', {failed} failed --where' if where is not None else ''}); "
          f"{src.requests_sent} E-utilities requests")
    return 0
