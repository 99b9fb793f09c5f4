"""A three-question BioASQ golden file whose snippets are cut from known abstracts (offsets as BioASQ counts them:
end exclusive), the JSON schema of submissions, and a scripted LLM that answers BioASQ prompts by type. Shared
by the submission tests (``tests/evaluation``) and the ``medretrieve bioasq`` CLI tests."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

URL = "http://www.ncbi.nlm.nih.gov/pubmed/"
ABSTRACTS = {
    "501": "Background text comes first. Aspirin irreversibly inhibits platelet cyclooxygenase and thromboxane. "
           "Low dose aspirin prevents heart attacks in adults.",
    "502": "Metformin is the first line drug for type 2 diabetes. It lowers blood glucose without weight gain.",
    "503": "Cystic fibrosis is caused by mutations in the CFTR gene. The disease affects the lung and pancreas.",
}
SNIPPETS = {"501": ["Aspirin irreversibly inhibits platelet cyclooxygenase and thromboxane.",
                    "Low dose aspirin prevents heart attacks in adults."],
            "502": ["Metformin is the first line drug for type 2 diabetes."],
            "503": ["Cystic fibrosis is caused by mutations in the CFTR gene."]}
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "bioasq" / "submission.schema.json")
                    .read_text())


def snip(pmid: str, text: str) -> dict:
    """A golden snippet of ``text`` in the abstract of ``pmid`` with its offsets."""
    begin = ABSTRACTS[pmid].index(text)
    return {"document": URL + pmid, "text": text, "offsetInBeginSection": begin,
            "offsetInEndSection": begin + len(text), "beginSection": "abstract", "endSection": "abstract"}


def golden_questions() -> list:
    return [
        {"id": "g1", "type": "yesno", "body": "Does aspirin inhibit platelet cyclooxygenase?", "exact_answer": "yes",
         "ideal_answer": ["Yes."], "documents": [URL + "501"], "snippets": [snip("501", t) for t in SNIPPETS["501"]]},
        {"id": "g2", "type": "factoid", "body": "What is the first line drug for type 2 diabetes?",
         "exact_answer": [["metformin"]], "ideal_answer": ["Metformin."], "documents": [URL + "502"],
         "snippets": [snip("502", t) for t in SNIPPETS["502"]]},
        {"id": "g3", "type": "summary", "body": "What causes cystic fibrosis?", "ideal_answer": ["CFTR mutations."],
         "documents": [URL + "503"], "snippets": [snip("503", t) for t in SNIPPETS["503"]]},
    ]


def write_golden(path: Path) -> Path:
    path.write_text(json.dumps({"questions": golden_questions()}))
    return path


def validate(doc: dict, phase: str) -> None:
    """``doc`` against the submission schema of ``phase`` (phaseA, phaseB, phaseAplus)."""
    import jsonschema

    jsonschema.validate(doc, {**SCHEMA, "$ref": f"#/$defs/{phase}"})


def offsets_index_the_text(doc: dict, articles: dict = ABSTRACTS) -> bool:
    """Whether every snippet's offsets cut exactly its text out of its article."""
    return all(articles[s["document"][len(URL):]][s["offsetInBeginSection"]:s["offsetInEndSection"]] == s["text"]
               for q in doc["questions"] for s in q.get("snippets", []))


def bioasq_llm(request: Any) -> tuple:
    """Scripted LLM: a BioASQ answer of the type the prompt asks for, as the JSON object the prompt shows (and
    the request's ``response_format`` schema asks for)."""
    from llm_server import chat_reply

    prompt = request["messages"][-1]["content"]
    if "(yes/no)" in prompt:
        reply = {"exact_answer": "yes", "ideal_answer": "Yes, aspirin inhibits it."}
    elif "(factoid)" in prompt:
        reply = {"exact_answer": ["metformin", "insulin"], "ideal_answer": "Metformin."}
    elif "(list)" in prompt:
        reply = {"exact_answer": ["lung", "pancreas"], "ideal_answer": "The lung and the pancreas."}
    else:
        reply = {"ideal_answer": "Mutations in the CFTR gene."}
    return 200, chat_reply(json.dumps(reply)), 0.0
