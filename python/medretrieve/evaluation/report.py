"""Markdown tables and PNG plots for evaluation results (``medretrieve eval``).

MedRGB tables follow the paper's layout: one table per scenario and metric,
rows are models or pipelines (one per run, named by its ``label``), columns are
datasets x settings (standard n=0 is the no-retrieval baseline); a last table
says which LLM judged each run's sub-answers. Plots show a metric against the
signal ratio p (accuracy for each scenario, noise detection for sufficiency,
fact detection for robustness), one panel per dataset, one line per run and n,
the no-retrieval accuracy as a dashed line. Matplotlib runs on the Agg backend
(no display needed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

DATASET_NAMES = {"mmlu_med": "MMLU-Med", "medqa": "MedQA-US", "pubmedqa": "PubMedQA*", "bioasq": "BioASQ-Y/N"}

#: Metrics shown per scenario (the first is the main one), with their column titles.
SCENARIO_METRICS = {
    "standard": [("accuracy", "accuracy")],
    "sufficiency": [
        ("accuracy", "accuracy"),
        ("noise_detection_accuracy", "noise-detection accuracy"),
        ("insufficient_share", "insufficient-information share"),
    ],
    "integration": [
        ("accuracy", "accuracy"),
        ("sub_answer_em", "sub-answer exact match"),
        ("judge_score", "LLM-judge score"),
    ],
    "robustness": [
        ("accuracy", "accuracy"),
        ("fact_detection_rate", "fact-detection rate"),
        ("false_alarm_rate", "false-alarm rate"),
        ("sub_answer_em", "sub-answer exact match"),
        ("judge_score", "LLM-judge score"),
    ],
}
#: (scenario, metric) pairs plotted against p; accuracy keeps the file name ``medrgb_<scenario>.png``.
PLOTS = (("sufficiency", "accuracy"), ("integration", "accuracy"), ("robustness", "accuracy"),
         ("sufficiency", "noise_detection_accuracy"), ("robustness", "fact_detection_rate"))


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: numbers rounded, None as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _setting_title(s: Mapping[str, Any]) -> str:
    if s["scenario"] == "standard":
        return "n=0 (no retrieval)" if s["n"] == 0 else f"n={s['n']}"
    return f"n={s['n']} p={s['p']}"


def judge_text(run: Mapping[str, Any]) -> str:
    """Which LLM graded a run's sub-answers, as the report says it."""
    judge = run.get("judge") or {}
    if judge and not judge.get("used", True):
        return "no judge (--no-judge)"
    if judge.get("separate"):
        return f"{judge['model']} (separate from the model under test)"
    return f"{judge.get('model') or run.get('model')} (the model under test: no separate judge was given)"


def medrgb_markdown(runs: Sequence[Mapping[str, Any]]) -> str:
    """MedRGB tables for several runs (``MedRGBRun.to_dict()`` plus a ``label`` each)."""
    if not runs:
        raise ValueError("no runs to tabulate")
    datasets: list[str] = []
    for r in runs:
        if r["dataset"] not in datasets:
            datasets.append(r["dataset"])
    labels: list[str] = []
    for r in runs:
        label = r.get("label") or r.get("model") or "run"
        if label not in labels:
            labels.append(label)
    parts = []
    for scenario, metric_list in SCENARIO_METRICS.items():
        # column = (dataset, setting key) in first-seen order
        columns: list[tuple[str, str, str]] = []
        for ds in datasets:
            for r in runs:
                if r["dataset"] != ds:
                    continue
                for key, s in r["settings"].items():
                    col = (ds, key, f"{DATASET_NAMES.get(ds, ds)} {_setting_title(s)}")
                    if s["scenario"] == scenario and col not in columns:
                        columns.append(col)
        if not columns:
            continue
        for metric, title in metric_list:
            rows = []
            for label in labels:
                row: list[Any] = [label]
                for ds, key, _ in columns:
                    value = None
                    for r in runs:
                        if (r.get("label") or r.get("model") or "run") == label and r["dataset"] == ds:
                            value = r["settings"].get(key, {}).get(metric, value)
                    row.append(value)
                rows.append(row)
            if all(v is None for row in rows for v in row[1:]):
                continue
            parts.append(f"### {scenario}: {title}\n\n" + _table(["model / pipeline"] + [c[2] for c in columns], rows))
    counts = []
    for r in runs:
        n_items = sum(s.get("count", 0) for s in r["settings"].values())
        n_err = len(r.get("errors", []))
        counts.append([r.get("label") or r.get("model"), DATASET_NAMES.get(r["dataset"], r["dataset"]), n_items, n_err])
    parts.append("### answered items and errors\n\n" + _table(["model / pipeline", "dataset", "items", "errors"], counts))
    judges = [[r.get("label") or r.get("model"), DATASET_NAMES.get(r["dataset"], r["dataset"]), judge_text(r)]
              for r in runs]
    parts.append("### LLM judge of sub-answers\n\n" + _table(["model / pipeline", "dataset", "judge"], judges))
    return "\n\n".join(parts) + "\n"


def plot_vs_p(runs: Sequence[Mapping[str, Any]], out_dir: Path, plots: Sequence[tuple[str, str]] = PLOTS
              ) -> list[Path]:
    """One PNG per (scenario, metric) with a p axis: ``medrgb_<scenario>.png`` for accuracy,
    ``medrgb_<scenario>_<metric>.png`` otherwise; one line per run and n, the no-retrieval accuracy (standard
    n=0) dashed. Returns the files written (a pair without values is skipped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    datasets: list[str] = []
    for r in runs:
        if r["dataset"] not in datasets:
            datasets.append(r["dataset"])
    for scenario, metric in plots:
        series: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
        baseline: dict[tuple[str, str], float] = {}
        for r in runs:
            label = r.get("label") or r.get("model") or "run"
            for s in r["settings"].values():
                if s["scenario"] == scenario and s.get(metric) is not None:
                    series.setdefault((r["dataset"], label, s["n"]), []).append((s["p"], s[metric]))
                if metric == "accuracy" and s["scenario"] == "standard" and s["n"] == 0 and s.get(metric) is not None:
                    baseline[(r["dataset"], label)] = s[metric]
        if not series:
            continue
        shown = [d for d in datasets if any(k[0] == d for k in series)]
        fig, axes = plt.subplots(1, len(shown), figsize=(4.5 * len(shown), 3.6), squeeze=False)
        for ax, ds in zip(axes[0], shown):
            for (d, label, n), points in sorted(series.items()):
                if d == ds:
                    points.sort()
                    ax.plot([p for p, _ in points], [v for _, v in points], marker="o", label=f"{label} n={n}")
            for (d, label), value in sorted(baseline.items()):
                if d == ds:
                    ax.axhline(value, linestyle="--", color="grey", linewidth=1, label=f"{label} no retrieval")
            ax.set_title(f"{DATASET_NAMES.get(ds, ds)}: {scenario}")
            ax.set_xlabel("signal ratio p (%)" if scenario != "robustness" else "factually correct documents p (%)")
            ax.set_ylabel(metric.replace("_", " "))
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / (f"medrgb_{scenario}.png" if metric == "accuracy" else f"medrgb_{scenario}_{metric}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def retrieval_markdown(result: Mapping[str, Any], label: Optional[str] = None) -> str:
    """Document- and snippet-level table of a retrieval evaluation (``results.json`` layout)."""
    k = result["k"]
    header = ["level", "questions", f"MAP@{k}", f"P@{k}", f"R@{k}", f"nDCG@{k}", "MRR"]
    rows = []
    for level in ("document", "snippet"):
        m = result[level]
        rows.append([level, m.get("count"), m.get("map"), m.get("precision"), m.get("recall"), m.get("ndcg"), m.get("mrr")])
    title = f"## Retrieval{': ' + label if label else ''}\n\n"
    out = title + _table(header, rows) + "\n"
    by_type = result.get("by_type") or {}
    if by_type:
        rows = [
            [t, v["count"], v["document"].get("map"), v["document"].get("recall"), v["snippet"].get("map"), v["snippet"].get("recall")]
            for t, v in by_type.items()
        ]
        out += "\n### by question type\n\n" + _table(
            ["type", "questions", f"doc MAP@{k}", f"doc R@{k}", f"snippet MAP@{k}", f"snippet R@{k}"], rows
        ) + "\n"
    t = result.get("latency_ms")
    if t:
        out += f"\nsearch latency (ms): mean {fmt(t['mean'], 1)}, p50 {fmt(t['p50'], 1)}, p95 {fmt(t['p95'], 1)}\n"
    return out


def bioasq_markdown(result: Mapping[str, Any]) -> str:
    """Exact-answer and ROUGE table of a BioASQ answer evaluation."""
    rows = []
    ex = result.get("exact", {})
    if ex.get("yesno"):
        rows.append(["yes/no", ex["yesno"]["count"], "accuracy", ex["yesno"]["accuracy"]])
        rows.append(["yes/no", ex["yesno"]["count"], "macro F1", ex["yesno"]["macro_f1"]])
    if ex.get("factoid"):
        for m in ("strict", "lenient", "mrr"):
            rows.append(["factoid", ex["factoid"]["count"], m, ex["factoid"][m]])
    if ex.get("list"):
        for m in ("precision", "recall", "f1"):
            rows.append(["list", ex["list"]["count"], m, ex["list"][m]])
    ideal = result.get("ideal")
    if ideal:
        rows.append(["ideal (all types)", ideal["count"], "ROUGE-2 F1", ideal["rouge2_f"]])
        rows.append(["ideal (all types)", ideal["count"], "ROUGE-SU4 F1", ideal["rougesu4_f"]])
    ret = result.get("retrieval") or {}
    if ret.get("count"):
        rows.append(["evidence documents", ret["count"], "MAP@10", ret["map"]])
        rows.append(["evidence documents", ret["count"], "R@10", ret["recall"]])
    out = "## BioASQ answers\n\n" + _table(["question type", "questions", "metric", "value"], rows) + "\n"
    if result.get("errors"):
        out += f"\n{len(result['errors'])} questions failed (see results.json: errors)\n"
    return out
