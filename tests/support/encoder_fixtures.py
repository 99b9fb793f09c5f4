"""Tiny randomly initialised BERT models for encoder tests (no download), shared by other test files.

``make_tiny_bert_dir(tmp_path, kind=...)`` writes a Hugging Face model
directory (config, weights, tokenizer from a small word list);
``export_tiny(tmp_path, kind)`` exports it with ``medretrieve export-onnx``;
``torch_reference(...)`` computes what the ONNX encoders must return, with
transformers' own tokenizer and torch, independently of medretrieve.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional, Sequence

import numpy as np

# A small vocabulary: BERT's special tokens, letters (so any lower-case word tokenises into
# pieces rather than [UNK]), and whole words used by the tests and the export samples.
_WORDS = """
what which is are the a an of in for and or to with by on at as from that this how was were be has
causes cause central diabetes insipidus mellitus type first line drug adults without metformin gene
genes mutations associated hereditary breast ovarian cancer syndrome genetic testing recommended
relatives carriers aspirin inhibits platelet platelets aggregation cyclooxygenase thromboxane there
vaccine against respiratory syncytial virus older hypertension blood pressure patient presented fever
cough chest pneumonia treatment therapy disease heart kidney liver lung brain insulin glucose dose
brca1 sat cat mat dog ran park weather sunny today football match won team players goal
""".split()
_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_PUNCT = list(".,;:?!-()'/")
_LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]


def tiny_vocab() -> List[str]:
    pieces = ["##" + c for c in _LETTERS]
    seen, vocab = set(), []
    for token in _SPECIAL + _PUNCT + _LETTERS + pieces + _WORDS:
        if token not in seen:
            seen.add(token)
            vocab.append(token)
    return vocab


def make_tiny_bert_dir(tmp_path: Path, kind: str = "query", tokenizer: str = "json",
                       sentence_transformers: Optional[str] = None, seed: int = 0,
                       name: Optional[str] = None) -> Path:
    """Write a tiny BERT (hidden 32, 2 layers, 2 heads) with a tokenizer into ``tmp_path/name``.

    ``kind == "cross"`` gives BertForSequenceClassification with one label,
    otherwise a BertModel. ``tokenizer``: ``"json"`` saves transformers' fast
    tokenizer (tokenizer.json), ``"vocab"`` only vocab.txt and its config.
    ``sentence_transformers``: ``"mean"`` or ``"cls"`` adds a
    sentence-transformers layout (modules.json, 1_Pooling, Normalize).
    """
    import torch
    from transformers import BertConfig, BertModel, BertForSequenceClassification, BertTokenizerFast

    out = Path(tmp_path) / (name or f"tiny-{kind}-{tokenizer}-{sentence_transformers or 'hf'}-{seed}")
    out.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, type_vocab_size=2,
                        initializer_range=0.2, pad_token_id=0, num_labels=1)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config) if kind == "cross" else BertModel(config)
    model.eval()
    model.save_pretrained(out)
    if tokenizer == "json":
        # from_pretrained reads vocab.txt the same way in transformers 4 and 5.
        tok = BertTokenizerFast.from_pretrained(str(out), do_lower_case=True)
        assert tok.convert_tokens_to_ids("diabetes") == vocab.index("diabetes")
        tok.save_pretrained(out)
        assert (out / "tokenizer.json").is_file()
    elif tokenizer == "vocab":
        (out / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}), encoding="utf-8")
    else:
        raise ValueError(f"tokenizer must be json or vocab, got {tokenizer!r}")
    if sentence_transformers:
        _write_sentence_transformers_layout(out, sentence_transformers, max_seq_length=128)
    return out


def _write_sentence_transformers_layout(out: Path, pooling: str, max_seq_length: int) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False}), encoding="utf-8")
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                              "do_lower_case": False}), encoding="utf-8")


def export_tiny(tmp_path: Path, kind: str, quantize: Optional[str] = None, tokenizer: str = "json",
                sentence_transformers: Optional[str] = None, seed: int = 0, **export_kwargs: Any) -> Path:
    """``make_tiny_bert_dir`` then ``export_onnx`` into ``tmp_path/onnx-...``; returns the model directory.

    Deterministic (seeded), so an export already in ``tmp_path`` with the same
    arguments is reused: test modules can share one ``tmp_path_factory`` folder.
    """
    from medretrieve.models.export import export_onnx

    extra = "-".join(f"{k}={v}" for k, v in sorted(export_kwargs.items()))
    name = f"tiny-{kind}-{tokenizer}-{sentence_transformers or 'hf'}-{seed}"
    out = Path(tmp_path) / f"onnx-{name}-{quantize or 'fp32'}{'-' + extra if extra else ''}"
    if (out / "medretrieve.json").is_file():
        return out
    src = make_tiny_bert_dir(tmp_path, kind=kind, tokenizer=tokenizer,
                             sentence_transformers=sentence_transformers, seed=seed, name=name)
    return export_onnx(src, out, kind, quantize=quantize, **export_kwargs)


def torch_reference(source_dir: Path, kind: str, inputs: Sequence[Any], pooling: str = "cls",
                    normalize: bool = False, max_length: int = 512) -> np.ndarray:
    """What the encoders must return, computed with transformers' tokenizer and torch.

    ``inputs``: strings, or (a, b) pairs tokenised as two segments (article
    pairs; (query, article) for ``cross``). Returns float32 [n, dim] or, for
    ``cross``, the logits [n].
    """
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source_dir, local_files_only=True)
    cls = AutoModelForSequenceClassification if kind == "cross" else AutoModel
    model = cls.from_pretrained(source_dir, local_files_only=True).eval()
    if inputs and isinstance(inputs[0], (tuple, list)):
        batch = tok([a for a, _ in inputs], [b for _, b in inputs], padding=True, truncation=True,
                    max_length=max_length, return_tensors="pt")
    else:
        batch = tok(list(inputs), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        out = model(**batch)
    if kind == "cross":
        return out.logits[:, 0].float().numpy()
    hidden = out.last_hidden_state
    if pooling == "cls":
        vec = hidden[:, 0]
    else:
        mask = batch["attention_mask"].unsqueeze(-1).float()
        vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    if normalize:
        vec = torch.nn.functional.normalize(vec, dim=-1)
    return vec.float().numpy()
