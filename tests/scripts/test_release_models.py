"""scripts/release_models.py: the release steps write the shipped encoder and ranker where they are told, from
the golden files they are given, and refuse what they cannot use before any work."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_QUESTIONS = ROOT / "examples" / "demo_questions.json"

_spec = importlib.util.spec_from_file_location("release_models", ROOT / "scripts" / "release_models.py")
release = sys.modules.setdefault("release_models", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(release)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_ranker_step_fits_on_the_given_sets_and_writes_only_the_assets_folder_named(tmp_path):
    from medretrieve.retrieval.shipped_ranker import DEFAULT_RANKER_FILE, RankerBundle

    shipped = _digest(DEFAULT_RANKER_FILE)
    assets = tmp_path / "assets"
    assets.mkdir()
    release.main(["ranker", "--golden-set", f"demo={DEMO_QUESTIONS}", "--work", str(tmp_path / "work"),
                  "--assets", str(assets)])
    bundle = RankerBundle.load(assets / "default_ranker.json")
    sets = bundle.training["sets"]
    assert [s["name"].split(" (")[0] for s in sets] == ["BioASQ demo"] and sets[0]["questions_used"] > 30
    assert sets[0]["positives"] > 0 and "doc_subject" in bundle.matched.features
    assert _digest(DEFAULT_RANKER_FILE) == shipped  # the package's own file is untouched
    assert sorted(p.name for p in assets.iterdir()) == ["default_ranker.json"]


@pytest.mark.parametrize("argv, message", [
    (["ranker", "--golden-set", "demo=nowhere.json"], "golden files not found: nowhere.json"),
    (["ranker", "--golden-set", f"demo={DEMO_QUESTIONS}", "--assets", "no-such-folder"], "is not a folder"),
    (["encoder", "--golden", "nowhere.json", "--fitted", "x"], "golden files not found"),
])
def test_bad_arguments_stop_before_any_work(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "assets").mkdir()
    if "--assets" not in argv:
        argv = argv + ["--assets", "assets"]
    with pytest.raises(SystemExit, match=message):
        release.main(argv + ["--work", "work"])
    assert not (tmp_path / "work").exists() and list((tmp_path / "assets").iterdir()) == []


def test_a_golden_set_needs_a_name_and_files():
    with pytest.raises(SystemExit):
        release.main(["ranker", "--golden-set", "no-equals-sign"])


def test_the_encoder_step_ships_weight_only_int8_with_a_record_free_of_local_paths(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from encoder_fixtures import make_tiny_bert_dir
    from medretrieve.models.encoders import read_manifest
    from medretrieve.models.export import export_onnx

    base = make_tiny_bert_dir(tmp_path, "symmetric", sentence_transformers="mean", seed=3, name="base")
    stock = export_onnx(base, tmp_path / "stock", "symmetric")
    fitted = release.fit_fp32_encoder([DEMO_QUESTIONS], base, str(stock), tmp_path / "work", epochs=1,
                                      progress=False)
    assert read_manifest(fitted).quantization == "none"
    assets = tmp_path / "assets"
    assets.mkdir()
    out = release.ship_encoder(fitted, [DEMO_QUESTIONS.name], assets)
    assert out == assets / "minilm-bioasq-int8"
    manifest = read_manifest(out)
    assert manifest.quantization == "int8-weights" and manifest.fidelity["metric"] == "mean_cosine" and manifest.fidelity["value"] > 0.99
    assert "demo_questions.json" in manifest.source and str(tmp_path) not in manifest.source
    record = (out / "fit.json").read_text()
    assert json.loads(record)["training_files"] == ["demo_questions.json"] and json.loads(record)["out_dir"] is None
    assert str(tmp_path) not in record


def test_shipping_refuses_a_folder_that_is_not_a_fit(tmp_path):
    (tmp_path / "assets").mkdir()
    with pytest.raises(FileNotFoundError, match="adaptation.json is missing"):
        release.ship_encoder(tmp_path, ["7B1_golden.json"], tmp_path / "assets")
    assert list((tmp_path / "assets").iterdir()) == []
