"""Export a Hugging Face encoder to an ONNX model directory for :mod:`medretrieve.models.encoders`.

Export-time only: torch and transformers are imported inside the functions,
never by the run-time encoders. The graph outputs ``last_hidden_state`` (or
the logit for a cross-encoder) with dynamic batch and sequence axes; pooling
and normalisation happen in numpy after it, as the manifest says. Every
export is checked against torch on sample texts (max abs difference of the
fp32 outputs < 1e-4, else ValueError) and optionally converted to int8
(onnxruntime dynamic quantization of the weight MatMuls, the embedding tables
row by row: ``quantize_embedding_tables``; for CPU), weight-only int8
(``int8-weights``) or fp16 (for GPU), recording the converted model's
fidelity to fp32 in the manifest. The output directory appears only when
complete (built beside it, then renamed).

CLI::

    medretrieve export-onnx SOURCE_DIR OUT_DIR --kind query|article|cross|symmetric \\
        [--pooling cls|mean] [--normalize] [--quantize int8|int8-weights|fp16] [--max-length N]
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from .._files import new_temp_dir, read_json, recover_leftovers, swap_in
from .encoders import (
    DEFAULT_MAX_LENGTH, KINDS, MODEL_NAME, TOKENIZER_JSON, EncoderManifest, file_sha256, load_tokenizer,
    pad_batch, pool, write_manifest,
)

PARITY_TOLERANCE = 1e-4
OPSET = 17

#: Sample inputs for the parity and fidelity checks: varied lengths, so batches carry padding.
SAMPLE_TEXTS = [
    "What causes central diabetes insipidus?",
    "Metformin is the first-line drug for type 2 diabetes mellitus in adults without contraindications.",
    "BRCA1",
    "Which gene mutations are associated with hereditary breast and ovarian cancer syndrome, "
    "and how is genetic testing recommended for relatives of carriers?",
    "Aspirin irreversibly inhibits cyclooxygenase-1 and thereby platelet thromboxane A2 synthesis.",
    "Is there a vaccine against respiratory syncytial virus for older adults?",
    "Hypertension",
    "The patient presented with fever, productive cough and right lower lobe consolidation on chest X-ray, "
    "consistent with community-acquired pneumonia; sputum cultures grew Streptococcus pneumoniae.",
]
SAMPLE_TITLES = ["Diabetes insipidus", "Diabetes therapy", "", "Hereditary cancer", "Antiplatelet drugs",
                 "RSV vaccines", "Blood pressure", "Pneumonia"]


# --------------------------------------------------------------------------- settings


def sentence_transformers_settings(source: Path) -> Dict[str, Any]:
    """Pooling, normalisation, max length and transformer subfolder of a sentence-transformers directory.

    Empty when ``source`` has no ``modules.json``. ValueError for a pooling
    mode the encoders cannot reproduce (max, mean-sqrt-len, weighted...).
    """
    modules_file = source / "modules.json"
    if not modules_file.is_file():
        return {}
    settings: Dict[str, Any] = {"normalize": False, "subdir": ""}
    for module in read_json(modules_file):
        kind = str(module.get("type", ""))
        path = source / module.get("path", "")
        if kind.endswith(".Transformer"):
            settings["subdir"] = module.get("path", "")
            cfg = path / "sentence_bert_config.json"
            if cfg.is_file() and read_json(cfg).get("max_seq_length"):
                settings["max_length"] = int(read_json(cfg)["max_seq_length"])
        elif kind.endswith(".Pooling"):
            cfg = read_json(path / "config.json")
            modes = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v]
            if modes == ["pooling_mode_cls_token"]:
                settings["pooling"] = "cls"
            elif modes == ["pooling_mode_mean_tokens"]:
                settings["pooling"] = "mean"
            else:
                raise ValueError(f"{path / 'config.json'} uses pooling {modes}; only cls or mean tokens is supported")
        elif kind.endswith(".Normalize"):
            settings["normalize"] = True
        else:
            raise ValueError(f"{modules_file} has module {kind!r}; only Transformer, Pooling and Normalize "
                             "can be exported")
    return settings


def _resolve_settings(kind: str, pooling: Optional[str], normalize: Optional[bool], max_length: Optional[int],
                      st: Dict[str, Any], max_positions: int) -> Tuple[str, bool, int]:
    if kind == "cross":
        if pooling not in (None, "none"):
            raise ValueError("a cross-encoder outputs one logit per pair; it takes no pooling")
        if normalize:
            raise ValueError("a cross-encoder's logit cannot be normalised")
        pooling, normalize = "none", False
    else:
        if pooling is None:
            pooling = st.get("pooling", "mean" if kind == "symmetric" else "cls")
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be cls or mean, got {pooling!r}")
        if normalize is None:
            normalize = st.get("normalize", kind == "symmetric")
    if max_length is None:
        max_length = min(st.get("max_length", DEFAULT_MAX_LENGTH[kind]), max_positions)
    elif not isinstance(max_length, int) or not 2 <= max_length <= max_positions:
        raise ValueError(f"max_length must be an int in [2, {max_positions}] for this model, got {max_length!r}")
    return pooling, bool(normalize), int(max_length)


# --------------------------------------------------------------------------- torch side


def load_torch_model(model_dir: Union[str, Path], kind: str, local: bool) -> Any:
    """A Hugging Face model for ``kind`` (a one-logit classifier for ``cross``), eval mode, eager attention."""
    import torch  # noqa: F401  (export-time extra)
    from transformers import AutoModel, AutoModelForSequenceClassification

    cls = AutoModelForSequenceClassification if kind == "cross" else AutoModel
    # Eager attention: plain MatMul/Softmax ops that every ONNX Runtime provider runs and fuses.
    from transformers.utils import logging as hf_logging

    # No per-tensor "Loading weights" bars in CLI output; restored after.
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = cls.from_pretrained(model_dir, attn_implementation="eager", local_files_only=local)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    if kind == "cross" and getattr(model.config, "num_labels", 1) != 1:
        raise ValueError(f"a cross-encoder must output one logit (num_labels=1); {model_dir} has "
                         f"num_labels={model.config.num_labels}")
    return model


def _wrap(model, kind: str, input_names: List[str], mask_4d: bool):
    """A module with positional (input_ids, attention_mask[, token_type_ids]) returning one tensor.

    ``mask_4d`` hands BERT-like models a ready additive [b, 1, 1, s] mask: recent transformers
    build masks from Python ints that tracing would freeze, breaking dynamic sequence lengths.
    """
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            kwargs = dict(zip(input_names, args))
            if mask_4d:
                mask = kwargs["attention_mask"][:, None, None, :].to(torch.float32)
                kwargs["attention_mask"] = (1.0 - mask) * torch.finfo(torch.float32).min
            out = self.model(**kwargs)
            return out.logits if kind == "cross" else out.last_hidden_state

    return Wrapper().eval()


def _torch_outputs(model, kind: str, feed: Dict[str, np.ndarray]) -> np.ndarray:
    import torch

    with torch.inference_mode():
        out = model(**{k: torch.from_numpy(v) for k, v in feed.items()})
    return (out.logits if kind == "cross" else out.last_hidden_state).float().numpy()


def _export_graph(model, kind: str, input_names: List[str], path: Path, sample: Dict[str, np.ndarray],
                  mask_4d: bool) -> None:
    import warnings

    import torch

    output_name = "logits" if kind == "cross" else "last_hidden_state"
    axes = {name: {0: "batch", 1: "sequence"} for name in input_names}
    axes[output_name] = {0: "batch"} if kind == "cross" else {0: "batch", 1: "sequence"}
    args = tuple(torch.from_numpy(sample[name]) for name in input_names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer chatter about Python ints; parity is checked below
        torch.onnx.export(_wrap(model, kind, input_names, mask_4d), args, str(path), dynamo=False,
                          opset_version=OPSET, input_names=input_names, output_names=[output_name],
                          dynamic_axes=axes, do_constant_folding=True)


# --------------------------------------------------------------------------- sample inputs and checks


def _sample_inputs(kind: str) -> List[Any]:
    if kind == "article":
        return list(zip(SAMPLE_TITLES, SAMPLE_TEXTS))
    if kind == "cross":
        return [(SAMPLE_TEXTS[0], t) for t in SAMPLE_TEXTS]
    return list(SAMPLE_TEXTS)


def _feed(tokenizer, inputs: List[Any], input_names: List[str], pad_id: int) -> Dict[str, np.ndarray]:
    return pad_batch(tokenizer.encode_batch(inputs), input_names, pad_id)


def _run_onnx(path: Path, feed: Dict[str, np.ndarray], output: str) -> np.ndarray:
    from .encoders import make_session

    session = make_session(path, providers=["CPUExecutionProvider"])
    return session.run([output], feed)[0].astype(np.float32)


def _parity(reference: np.ndarray, got: np.ndarray, mask: Optional[np.ndarray], kind: str) -> float:
    """Max abs difference over real tokens (padding rows are never pooled), or over logits."""
    if kind == "cross" or mask is None:
        return float(np.max(np.abs(reference - got)))
    valid = mask.astype(bool)
    return float(np.max(np.abs(reference[valid] - got[valid])))


def _fidelity(kind: str, ref: np.ndarray, got: np.ndarray, mask: Optional[np.ndarray], pooling: str
              ) -> Dict[str, Any]:
    """How close a converted graph stays to fp32 on the sample inputs."""
    if kind == "cross":
        a, b = ref.reshape(-1), got.reshape(-1)
        pearson = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
        return {"metric": "pearson", "value": pearson, "mean_abs_diff": float(np.mean(np.abs(a - b))),
                "samples": int(a.size)}
    if mask is None:  # a model without an attention mask input: every position counts
        mask = np.ones(ref.shape[:2], dtype=np.int64)
    va = pool(ref, mask, pooling, True)
    vb = pool(got, mask, pooling, True)
    cos = np.sum(va * vb, axis=1)
    return {"metric": "mean_cosine", "value": float(cos.mean()), "min": float(cos.min()),
            "samples": int(cos.size)}


def _quantize_int8(src: Path, dst: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Per-channel weight scales and only the weight MatMuls: on all-MiniLM-L6-v2 passages this keeps
    # a mean cosine of 0.993 to fp32, against 0.926 per-tensor (and 0.75 with reduce_range), and
    # runs as fast. The embedding tables are quantized apart, row by row (quantize_embedding_tables).
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a generic "consider pre-processing" hint
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], extra_options={"MatMulConstBOnly": True})
    finally:
        root.setLevel(level)
    quantize_embedding_tables(dst, dst)


def _uses(graph: Any, counts: Callable[[Any, int], bool]) -> Dict[str, List[bool]]:
    """For every tensor name, whether each of its uses (node, input position) is one ``counts`` accepts."""
    uses: Dict[str, List[bool]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append(counts(node, i))
    return uses


def _store_int8(graph: Any, tensor: Any, axis: int, scale_suffix: str) -> int:
    """Replace the fp32 initializer ``tensor`` by ``<name>_int8`` (symmetric, one scale per slice: max |x| over
    ``axis`` / 127) and ``<name><scale_suffix>`` (the scales, dims kept); returns the bytes saved."""
    from onnx import numpy_helper

    weights = numpy_helper.to_array(tensor).astype(np.float32)
    scale = np.abs(weights).max(axis=axis, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    quantized = np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)
    graph.initializer.remove(tensor)
    graph.initializer.extend([numpy_helper.from_array(quantized, f"{tensor.name}_int8"),
                              numpy_helper.from_array(scale.astype(np.float32), f"{tensor.name}{scale_suffix}")])
    return int(weights.nbytes - quantized.nbytes - scale.nbytes)


#: Tables smaller than this (bytes of fp32) stay as they are: position and token-type tables are a rounding error.
EMBEDDING_TABLE_MIN_BYTES = 1 << 20


def quantize_embedding_tables(src: Union[str, Path], dst: Union[str, Path]) -> int:
    """Store every large fp32 embedding table (a ``Gather`` on a constant of >= 1 MiB) as int8 with one scale
    per row, looked up as ``Gather(int8) * Gather(scale)``: all-MiniLM-L6-v2's word table falls from 47 to
    12 MB and the model from 58 to 23 MB, its sentence vectors within a cosine of 0.9999 of the fp32 table's.
    A row's own scale keeps each token's row exact to 1/254 of its largest value, where onnxruntime's
    ``Gather`` quantization shares one scale over the whole table.
    Returns the bytes saved (0: nothing to quantize; ``dst`` is then a copy)."""
    import onnx

    model = onnx.load(str(src))
    saved = _quantize_tables(model.graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return saved


def _quantize_tables(graph: Any) -> int:
    """:func:`quantize_embedding_tables` on a loaded graph, in place; returns the bytes saved."""
    from onnx import TensorProto, helper

    def is_lookup(node: Any) -> bool:
        return node.op_type == "Gather" and all(a.i == 0 for a in node.attribute if a.name == "axis")

    # a table qualifies only when every use of it is a row lookup (a tied output projection keeps it fp32)
    uses = _uses(graph, lambda node, i: i == 0 and is_lookup(node))
    tables = [t for t in graph.initializer if t.data_type == TensorProto.FLOAT and len(t.dims) == 2
              and 4 * int(np.prod(t.dims)) >= EMBEDDING_TABLE_MIN_BYTES and all(uses.get(t.name, [False]))]
    saved = sum(_store_int8(graph, t, axis=1, scale_suffix="_row_scale") for t in tables)
    names = {t.name for t in tables}
    nodes: List[Any] = []
    for node in graph.node:
        if not (node.input and node.input[0] in names):
            nodes.append(node)
            continue
        table, ids, out, at = node.input[0], node.input[1], node.output[0], node.name or node.output[0]
        nodes += [helper.make_node("Gather", [f"{table}_int8", ids], [f"{out}_int8"], name=f"{at}_int8"),
                  helper.make_node("Cast", [f"{out}_int8"], [f"{out}_cast"], to=TensorProto.FLOAT, name=f"{at}_cast"),
                  helper.make_node("Gather", [f"{table}_row_scale", ids], [f"{out}_scale"], name=f"{at}_scale"),
                  helper.make_node("Mul", [f"{out}_cast", f"{out}_scale"], [out], name=f"{at}_dequantize")]
    del graph.node[:]
    graph.node.extend(nodes)
    return saved


def quantize_weights_int8(src: Union[str, Path], dst: Union[str, Path]) -> int:
    """Weight-only int8 (``quantize="int8-weights"``): every fp32 weight matrix of a ``MatMul`` stored as int8
    with one scale per output column, widened back by a ``Cast`` and a ``Mul`` that onnxruntime folds into fp32
    weights when the session opens, and the embedding tables row by row (:func:`quantize_embedding_tables`). The
    file is as small as ``"int8"``'s, the arithmetic stays fp32: a text's vector does not depend on the batch it is
    encoded in, where ``"int8"`` quantizes each batch's activations with one scale (faster on CPU, but a chunk's
    vector moves slightly with its neighbours). Returns the bytes saved."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(src))
    graph = model.graph
    uses = _uses(graph, lambda node, i: node.op_type == "MatMul" and i == 1)
    matrices = [t for t in graph.initializer if t.data_type == TensorProto.FLOAT and len(t.dims) == 2
                and all(uses.get(t.name, [False]))]
    saved, widen = 0, []
    for t in matrices:
        saved += _store_int8(graph, t, axis=0, scale_suffix="_col_scale")
        # the widened matrix keeps the initializer's name, so its MatMuls read it unchanged
        widen += [helper.make_node("Cast", [f"{t.name}_int8"], [f"{t.name}_cast"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"{t.name}_cast", f"{t.name}_col_scale"], [t.name])]
    nodes = widen + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    saved += _quantize_tables(graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return saved


def _convert_fp16(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    # keep_io_types: int64 ids in, float32 states out, so the encoders need no special casing.
    converted = convert_float_to_float16(model, keep_io_types=True)
    onnx.save(converted, str(dst))


#: ``quantize`` modes: int8 (dynamic, CPU), int8-weights (weight-only int8, fp32 arithmetic), fp16 (GPU).
CONVERSIONS = {"int8": _quantize_int8, "int8-weights": quantize_weights_int8, "fp16": _convert_fp16}


def _convert(quantize: str, fp32: Path, dst: Path, feed: Dict[str, np.ndarray], fp32_out: np.ndarray, kind: str,
             output_name: str, pooling: str) -> Dict[str, Any]:
    """Convert ``fp32`` to ``dst`` by ``quantize`` and return its fidelity to ``fp32_out`` on ``feed``."""
    CONVERSIONS[quantize](fp32, dst)
    return _fidelity(kind, fp32_out, _run_onnx(dst, feed, output_name), feed.get("attention_mask"), pooling)


# --------------------------------------------------------------------------- public API


def export_onnx(source: Union[str, Path], out_dir: Union[str, Path], kind: str, pooling: Optional[str] = None,
                normalize: Optional[bool] = None, quantize: Optional[str] = None,
                max_length: Optional[int] = None, overwrite: bool = False) -> Path:
    """Export ``source`` (a local Hugging Face model directory, or a hub id where there is network)
    to ``out_dir`` for :class:`~medretrieve.models.encoders.QueryEncoder` / ``ArticleEncoder`` / ``CrossEncoder``.

    ``kind``: query | article | cross | symmetric. ``pooling`` / ``normalize``
    default to the source's sentence-transformers config when it has one,
    else MedCPT's ([CLS], not normalised) for query/article and mean +
    normalised for symmetric. ``quantize``: None, ``"int8"`` (CPU; activations
    quantized per batch), ``"int8-weights"`` (int8 storage, fp32 arithmetic:
    batch-independent vectors; :func:`quantize_weights_int8`) or ``"fp16"``
    (GPU). ``max_length`` defaults to 64 for query, 512 for article/cross,
    the sentence-transformers ``max_seq_length`` for symmetric.
    Returns ``out_dir``. Raises ValueError when the fp32 graph differs from
    torch by 1e-4 or more, FileExistsError when ``out_dir`` is not empty and
    ``overwrite`` is False.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if quantize not in (None, "none", *CONVERSIONS):
        raise ValueError(f"quantize must be {', '.join(CONVERSIONS)} or None, got {quantize!r}")
    out_dir = check_output_dir(out_dir, overwrite)
    local = Path(source).expanduser().is_dir()
    with _hub_offline(local):
        return _export(source, out_dir, kind, pooling, normalize, quantize, max_length, local)


def convert_model_dir(src_dir: Union[str, Path], out_dir: Union[str, Path], quantize: str,
                      source: Optional[str] = None, overwrite: bool = False) -> Path:
    """Convert an fp32 model directory (an :func:`export_onnx` or fit output without ``quantize``) to
    ``quantize`` (:data:`CONVERSIONS`) in ``out_dir``, its fidelity to the fp32 graph measured on the sample
    texts and recorded in the manifest as :func:`export_onnx` does; ``source`` replaces the manifest's source.
    ValueError for an unknown mode or a source that is already converted."""
    import dataclasses

    from .encoders import read_manifest

    if quantize not in CONVERSIONS:
        raise ValueError(f"quantize must be one of {', '.join(CONVERSIONS)}, got {quantize!r}")
    src_dir = Path(src_dir)
    m = read_manifest(src_dir)
    if m.quantization != "none":
        raise ValueError(f"{src_dir} is already converted ({m.quantization}); convert its fp32 export")
    out_dir = check_output_dir(out_dir, overwrite)
    recover_leftovers(out_dir)
    work = new_temp_dir(out_dir)
    try:
        shutil.copyfile(src_dir / TOKENIZER_JSON, work / TOKENIZER_JSON)
        tokenizer = load_tokenizer(work)
        tokenizer.no_padding()
        tokenizer.enable_truncation(m.max_length)
        feed = _feed(tokenizer, _sample_inputs(m.kind), m.input_names, m.pad_token_id)
        fidelity = _convert(quantize, src_dir / MODEL_NAME, work / MODEL_NAME, feed,
                            _run_onnx(src_dir / MODEL_NAME, feed, m.output_name), m.kind, m.output_name, m.pooling)
        write_manifest(work, dataclasses.replace(m, sha256=file_sha256(work / MODEL_NAME), quantization=quantize,
                                                 fidelity=fidelity, source=source or m.source))
        swap_in(work, out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out_dir


def check_output_dir(out_dir: Union[str, "os.PathLike[str]"], overwrite: bool) -> Path:
    """``out_dir`` as a Path; FileExistsError when it exists, is not empty and ``overwrite`` is False."""
    out_dir = Path(out_dir).expanduser()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise FileExistsError(f"{out_dir} exists and is not empty; pass overwrite=True (--overwrite)")
    return out_dir


@contextlib.contextmanager
def _hub_offline(active: bool) -> Iterator[None]:
    """HF_HUB_OFFLINE=1 while exporting a local directory: nothing may reach the hub (restored after)."""
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    if active:
        os.environ.update({k: "1" for k in saved})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _export(source: Union[str, Path], out_dir: Path, kind: str, pooling: Optional[str],
            normalize: Optional[bool], quantize: Optional[str], max_length: Optional[int], local: bool) -> Path:
    source_path = Path(source).expanduser().resolve()
    if local:
        st = sentence_transformers_settings(source_path)
        model_dir: Union[str, Path] = source_path / st.get("subdir", "")
    else:
        if Path(source).expanduser().exists() or "/" not in str(source) or str(source).startswith((".", "/")):
            raise FileNotFoundError(f"{source} is not a model directory (nor a hub id like org/name)")
        st, model_dir = {}, str(source)

    model = load_torch_model(model_dir, kind, local)
    max_positions = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    if getattr(model.config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        max_positions -= 2  # RoBERTa positions start after the padding index
    pooling, normalize, max_length = _resolve_settings(kind, pooling, normalize, max_length, st, max_positions)

    recover_leftovers(out_dir)
    work = new_temp_dir(out_dir)
    try:
        _save_tokenizer(model_dir, work, local)
        tokenizer = load_tokenizer(work)
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length)
        pad_id = int(getattr(model.config, "pad_token_id", None) or 0)
        import inspect

        accepted = inspect.signature(model.forward).parameters
        input_names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted]
        output_name = "logits" if kind == "cross" else "last_hidden_state"
        feed = _feed(tokenizer, _sample_inputs(kind), input_names, pad_id)
        reference = _torch_outputs(model, kind, feed)
        fp32 = work / "model.fp32.onnx"
        diff, fp32_out = _export_with_parity(model, kind, input_names, fp32, feed, reference, output_name)

        dim = 1 if kind == "cross" else int(reference.shape[-1])
        quantization, fidelity = "none", None
        final = work / MODEL_NAME
        if quantize in CONVERSIONS:
            fidelity = _convert(quantize, fp32, final, feed, fp32_out, kind, output_name, pooling)
            quantization = quantize
            fp32.unlink()
        else:
            fp32.rename(final)
        write_manifest(work, EncoderManifest(
            kind=kind, pooling=pooling, normalize=normalize, max_length=max_length, dim=dim,
            sha256=file_sha256(final), source=str(source_path if local else source), quantization=quantization,
            parity={"max_abs_diff": diff, "tolerance": PARITY_TOLERANCE, "samples": len(_sample_inputs(kind)),
                    "opset": OPSET},
            fidelity=fidelity, input_names=input_names, output_name=output_name, pad_token_id=pad_id))
        swap_in(work, out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out_dir


def _export_with_parity(model, kind: str, input_names: List[str], path: Path, feed: Dict[str, np.ndarray],
                        reference: np.ndarray, output_name: str) -> Tuple[float, np.ndarray]:
    """Export with a ready 4-D mask (BERT-like models), else the model's own mask code; the first
    graph within tolerance of torch wins: (max abs diff, its outputs). ValueError when none is."""
    mask = feed.get("attention_mask")
    diffs = []
    for mask_4d in (True, False):
        try:
            _export_graph(model, kind, input_names, path, feed, mask_4d)
            got = _run_onnx(path, feed, output_name)
        except Exception as exc:  # a model that rejects 4-D masks fails here; try the other way
            diffs.append(f"{'4-D' if mask_4d else '2-D'} mask: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        diff = _parity(reference, got, mask, kind)
        if diff < PARITY_TOLERANCE:
            return diff, got
        diffs.append(f"{'4-D' if mask_4d else '2-D'} mask: max abs diff {diff:.3g}")
    raise ValueError(f"ONNX export does not match torch within {PARITY_TOLERANCE} ({'; '.join(diffs)})")


def _save_tokenizer(model_dir: Union[str, Path], work: Path, local: bool) -> None:
    """Put ``tokenizer.json`` (or, failing a fast tokenizer, ``vocab.txt``) into ``work``."""
    if local:
        model_dir = Path(model_dir)
        for candidate in (model_dir / TOKENIZER_JSON, model_dir.parent / TOKENIZER_JSON):
            if candidate.is_file():
                shutil.copyfile(candidate, work / TOKENIZER_JSON)
                return
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=local)
    except Exception as exc:
        vocab = Path(model_dir) / "vocab.txt" if local else None
        if vocab is not None and vocab.is_file():
            shutil.copyfile(vocab, work / "vocab.txt")
            config = vocab.with_name("tokenizer_config.json")
            if config.is_file():
                shutil.copyfile(config, work / "tokenizer_config.json")
            return
        raise FileNotFoundError(f"no tokenizer in {model_dir}: {exc}") from exc
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"{model_dir} has only a slow tokenizer; medretrieve needs tokenizer.json or vocab.txt")
    backend.save(str(work / TOKENIZER_JSON))


__all__ = ["export_onnx", "sentence_transformers_settings", "load_torch_model", "check_output_dir", "SAMPLE_TEXTS",
           "PARITY_TOLERANCE"]
