"""A scripted MedRGB world shared by the MedRGB run's tests and the ``eval medrgb`` command's: a search over
per-question documents that carry their question's answer, and a model that answers like a perfect one, reading
only what each prompt shows (its replies follow MedRGB's prompts: medretrieve.evaluation.medrgb.prompts)."""
from __future__ import annotations

import json
import re

GOLD = {"q1": "A", "q2": "B", "q3": "C"}

def fake_search(query: str, k: int) -> list[dict]:
    """Per question a corpus of 30 documents; topic j starts at document 3*j."""
    qid = re.search(r"q\d", query).group(0)
    m = re.search(r"topic (\d+)", query)
    start = 3 * int(m.group(1)) if m else 0
    return [
        {"chunk_id": f"{qid}-c{i}", "document_id": f"{qid}-d{i}", "title": f"doc {qid} {i}",
         "text": f"MARK-{qid}: the answer is {GOLD[qid]}."}
        for i in range(start, min(start + k, 30))
    ]


def _documents(user: str) -> list[str]:
    if not user.startswith("Here are the"):  # the no-retrieval prompt shows no documents
        return []
    return re.split(r"\n\nDocument \[\d+\] ", "\n\n" + user.split("\n\nHere is")[0].split(":\n\n", 1)[1])[1:]


def smart_llm(request: dict):
    """Answers like a perfect model, reading only what the prompt shows."""
    system = request["messages"][0]["content"]
    user = request["messages"][-1]["content"]
    if "medical librarian" in system:
        qid = re.search(r"q\d", user).group(0)
        n = int(re.search(r"Write (\d+)", user).group(1))
        return json.dumps([f"{qid} topic {j}" for j in range(n)])
    if "reading-comprehension" in system:
        qid = re.search(r"Main question: Question (q\d)", user).group(1)
        return json.dumps([{"question": f"Sub one of {qid}?", "answer": "alpha"},
                           {"question": f"Sub two of {qid}?", "answer": "beta"}])
    if "robustness test" in system:
        return json.dumps({"counterfactual_answer": "D", "document": "FAKE: the answer is D."})
    if "strict grader" in system:
        return "SCORE: 1" if "Gold answer: alpha\n\nPredicted answer: alpha" in user or "beta\n\nPredicted answer: beta" in user else "SCORE: 0"
    qid = re.search(r"Here is the (?:main )?question:\nQuestion (q\d)", user).group(1)
    docs = _documents(user)
    mine = [i + 1 for i, d in enumerate(docs) if f"MARK-{qid}" in d]
    fake = [i + 1 for i, d in enumerate(docs) if "FAKE" in d]
    reply = {"step_by_step_thinking": "read the documents"}
    if "relevant_documents" in user:  # sufficiency
        reply["relevant_documents"] = mine
        reply["answer_choice"] = GOLD[qid] if mine else "insufficient information"
    elif "document_analysis" in user:  # robustness (with sub-questions: sub-answers from the correct documents)
        reply["document_analysis"] = [{"document": i + 1, "has_factual_error": i + 1 in fake,
                                       "correction": "the answer is not D" if i + 1 in fake else ""} for i in range(len(docs))]
        reply["answer_choice"] = GOLD[qid] if mine else "D"
        if "sub_answers" in user:
            reply["sub_answers"] = [{"sub_question": "one", "answer": "alpha" if mine else "gamma"},
                                    {"sub_question": "two", "answer": "beta" if mine else "gamma"}]
    elif "sub_answers" in user:  # integration
        reply["sub_answers"] = [{"sub_question": "one", "answer": "alpha", "documents": mine[:1]},
                                {"sub_question": "two", "answer": "beta", "documents": mine[:1]}]
        reply["answer_choice"] = GOLD[qid]
    else:
        reply["answer_choice"] = GOLD[qid]
    return json.dumps(reply)
