"""``medretrieve build`` (a collection from a corpus), ``medretrieve export-onnx`` (an ONNX encoder) and
``medretrieve convert-hnswlib`` (an hnswlib index file to medretrieve's format)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .collection import add_declare_option, declared, misfit_notes
from .options import HelpFormatter


def add_build(sub: Any) -> None:
    from ..corpus.chunking import ChunkingConfig
    from ..corpus.sources import FORMATS

    p = sub.add_parser("build", help="build a collection (chunks, dense + BM25 indexes) from a corpus",
                       formatter_class=HelpFormatter)
    p.add_argument("source", nargs="+", help="corpus file(s) or directory (JSONL, MedRAG JSONL, BioASQ JSON, "
                                             "MEDLINE XML; .gz allowed)")
    p.add_argument("out_dir", help="collection directory to create")
    p.add_argument("--encoder", default="default", help="article or symmetric encoder directory (medretrieve "
                                                    "export-onnx), or an embedded model: 'default' (all-MiniLM-L6-v2 "
                                                    "fine-tuned on BioASQ) or 'minilm' (the stock one)")
    p.add_argument("--query-encoder", default=None, help="query encoder directory (default: --encoder)")
    p.add_argument("--format", default="auto", choices=FORMATS, help="corpus format (auto: from the file)")
    p.add_argument("--errors", default="skip", choices=("skip", "raise"),
                   help="bad records: skip and count them, or stop at the first")
    p.add_argument("--dtype", default="int8", choices=("int8", "float32"), help="vector storage of the index")
    p.add_argument("--M", type=int, default=16, help="HNSW links per node")
    p.add_argument("--ef-construction", type=int, default=200, help="HNSW candidate list size while building")
    p.add_argument("--batch-size", type=int, default=64, help="chunks encoded per encoder call")
    p.add_argument("--max-tokens", type=int, default=ChunkingConfig.max_tokens,
                   help="largest chunk, in word and punctuation tokens")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it holds a collection")
    p.add_argument("--threads", type=int, default=-1, help="threads of the HNSW build (-1: all cores)")
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="start afresh instead of resuming an interrupted build of the same sources and settings")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_declare_option(p)
    d = p.add_argument_group("distributed build on Ray (needs the 'distributed' extra)")
    d.add_argument("--shards", type=int, default=None,
                   help="build N shard collections on Ray (OUT_DIR/shard-00000 ... and OUT_DIR/shards.json); "
                        "without it the build runs in this process and Ray is never imported")
    d.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="Ray cluster to run on (e.g. auto or ray://head:10001; default: a local Ray)")
    d.add_argument("--encoders", type=int, default=1, help="encoder actors (one ONNX session each)")
    d.add_argument("--encoder-threads", type=int, default=1, help="ONNX Runtime threads per encoder actor")
    d.add_argument("--encode-batch", type=int, default=256, help="chunks per encoder actor call")
    p.set_defaults(func=_build)


def encoder_dir(value: str) -> Any:
    """An ``--encoder`` value: a model directory, or the name of an embedded model (``default``: all-MiniLM-L6-v2
    fine-tuned on BioASQ, shipped with medretrieve; ``minilm``: the stock all-MiniLM-L6-v2)."""
    from ..models.encoders import EMBEDDED_MODELS, embedded_model_dir

    return embedded_model_dir(value) if value in EMBEDDED_MODELS else value


def _build(args: argparse.Namespace) -> int:
    from ..corpus.chunking import ChunkingConfig
    from ..corpus.collection import Collection
    from ..corpus.sources import ReadReport

    report = ReadReport()
    t0 = time.perf_counter()
    if args.shards is not None:
        return _build_sharded(args, report, t0)
    if args.ray is not None:
        raise ValueError("--ray needs --shards N (the single-machine build does not use Ray)")
    fields = declared(args.declare)
    col = Collection.build(args.source, args.out_dir, encoder=encoder_dir(args.encoder),
                           query_encoder=args.query_encoder,
                           chunking=ChunkingConfig(max_tokens=args.max_tokens), errors=args.errors,
                           dtype=args.dtype, M=args.M, ef_construction=args.ef_construction,
                           batch_size=args.batch_size, progress=not args.quiet, format=args.format,
                           overwrite=args.overwrite, report=report, resume=args.resume, threads=args.threads,
                           metadata_fields=fields)
    print(f"built {col.directory}: {col.n_documents} documents, {len(col)} chunks "
          f"in {time.perf_counter() - t0:.1f} s; {report.summary()}")
    for line in misfit_notes(col, fields) if fields is not None else ():
        print(line, file=sys.stderr)
    return 0


def _build_sharded(args: argparse.Namespace, report: Any, t0: float) -> int:
    from .._files import read_json
    from ..corpus.chunking import ChunkingConfig
    from ..distributed.build import build_sharded

    out = build_sharded(args.source, args.out_dir, args.shards, encoder=encoder_dir(args.encoder),
                        query_encoder=args.query_encoder, chunking=ChunkingConfig(max_tokens=args.max_tokens),
                        errors=args.errors, dtype=args.dtype, M=args.M, ef_construction=args.ef_construction,
                        format=args.format, overwrite=args.overwrite, address=args.ray, encoders=args.encoders,
                        encoder_threads=args.encoder_threads, batch=args.encode_batch, batch_size=args.batch_size,
                        threads=args.threads, report=report, metadata_fields=declared(args.declare))
    counts = read_json(out / "shards.json")["counts"]
    print(f"built {out}: {len(counts['per_shard'])} shards, {counts['documents']} documents, {counts['chunks']} "
          f"chunks in {time.perf_counter() - t0:.1f} s; {report.summary()}")
    return 0


def add_export(sub: Any) -> None:
    from ..models.encoders import KINDS

    p = sub.add_parser("export-onnx", help="export a Hugging Face encoder to an ONNX model directory (needs the "
                                           "'export' extra: torch, transformers)",
                       description="Export a Hugging Face encoder (local directory) to an ONNX model directory "
                                   "with a medretrieve.json manifest, checked against torch.",
                       formatter_class=HelpFormatter)
    p.add_argument("source", metavar="SOURCE_DIR", help="local Hugging Face model directory")
    p.add_argument("out_dir", metavar="OUT_DIR", help="directory to create")
    p.add_argument("--kind", required=True, choices=KINDS, help="what the model is used as")
    p.add_argument("--pooling", choices=("cls", "mean"), default=None,
                   help="pooling (default: the sentence-transformers config, else cls for query/article, "
                        "mean for symmetric)")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="L2-normalise vectors (default: as the source's config / the kind's convention)")
    p.add_argument("--quantize", choices=("int8", "int8-weights", "fp16"), default=None,
                   help="convert the graph (default: fp32): int8 (fastest on CPU), int8-weights (int8 storage, fp32 "
                        "arithmetic: a vector does not depend on its batch), fp16 (GPU)")
    p.add_argument("--max-length", type=int, default=None,
                   help="token limit (default: 64 for query, 512 for article/cross/symmetric)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it exists")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from .._files import read_json
    from ..models.export import export_onnx

    out = export_onnx(args.source, args.out_dir, args.kind, pooling=args.pooling, normalize=args.normalize,
                      quantize=args.quantize, max_length=args.max_length, overwrite=args.overwrite)
    manifest = read_json(out / "medretrieve.json")
    summary = {k: manifest[k] for k in ("kind", "pooling", "normalize", "max_length", "dim", "quantization",
                                        "parity", "fidelity")}
    print(f"exported {args.source} -> {out}")
    print(json.dumps(summary, indent=2))
    return 0


def add_convert_hnswlib(sub: Any) -> None:
    p = sub.add_parser("convert-hnswlib", help="convert an index file saved by hnswlib to medretrieve's format",
                       description="Read an index file saved by hnswlib (save_index) and write it as a "
                                   "medretrieve index file (Index.load, Index.load_index). hnswlib's files hold "
                                   "neither the space nor the dimension: name both. Labels and deletion marks "
                                   "are kept; the graph is linked anew with the file's M and ef_construction.",
                       formatter_class=HelpFormatter)
    p.add_argument("source", metavar="IN", help="index file written by hnswlib's save_index")
    p.add_argument("out", metavar="OUT", help="medretrieve index file to write")
    p.add_argument("--space", required=True, choices=("l2", "ip", "cosine"),
                   help="the space the hnswlib index was created with")
    p.add_argument("--dim", required=True, type=int, help="the vectors' dimension")
    p.add_argument("--dtype", default="float32", choices=("float32", "int8"),
                   help="vector storage of the written index (float32: as hnswlib holds them)")
    p.add_argument("--threads", type=int, default=-1, help="threads linking the graph (-1: all cores)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.set_defaults(func=_convert_hnswlib)


def _convert_hnswlib(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..index import Index

    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ValueError(f"{out} exists (give --overwrite to replace it)")
    t0 = time.perf_counter()
    index = Index(args.space, args.dim)
    index.set_num_threads(args.threads)
    index.load_index(args.source, dtype=args.dtype)
    index.save(out)
    print(f"converted {args.source} -> {out}: {index.element_count} elements ({index.element_count - len(index)} "
          f"deleted), space {args.space}, dim {args.dim}, {args.dtype}, in {time.perf_counter() - t0:.1f} s")
    return 0
