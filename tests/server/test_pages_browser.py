"""The service's pages in a real headless browser (Debian's chromium through selenium) against a real
``medretrieve serve`` process: the search page asked by keyboard only, its hits, its streamed cited answer whose
marks lead to the hits, its timings, and no request beyond the server; the OpenAPI docs page renders offline.
Skipped, with the reason, where no browser can be driven (CI installs chromium and chromium-driver)."""
from __future__ import annotations

import json

import httpx
import pytest

from browser import browser_unavailable, console_errors, headless_chromium, requests_seen

pytestmark = pytest.mark.skipif(bool(browser_unavailable()), reason=browser_unavailable() or "browser available")

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
K = 5
PMIDS = {"demo-002": "31000002", "demo-001": "31000001"}  # documents that stand for PubMed articles
ANSWER_PIECES = ("Metformin is the first-line drug for type 2 diabetes [", "1]. Lifestyle measures come first [1, ",
                 "2].")
WAIT_S = 60.0  # the longest wait for anything the page shows


@pytest.fixture(scope="module")
def pmid_collection(tmp_path_factory):
    """The first 12 demo documents, two of them under PubMed ids."""
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir
    from medretrieve.testing.collection import DEMO_CORPUS

    docs = [json.loads(line) for line in DEMO_CORPUS.read_text(encoding="utf-8").splitlines()[:12]]
    for doc in docs:
        doc["id"] = PMIDS.get(doc["id"], doc["id"])
    out = tmp_path_factory.mktemp("page-collection") / "pmids"
    Collection.build(docs, out, encoder=default_model_dir(), progress=False)
    return out


@pytest.fixture(scope="module")
def page_server(pmid_collection):
    from llm_server import FakeLLMServer, stream_reply

    from medretrieve.testing.server import ServerProcess

    def reply(request_json):
        if request_json and request_json.get("stream"):
            return stream_reply(ANSWER_PIECES)
        return "".join(ANSWER_PIECES)

    with FakeLLMServer(reply) as llm:
        # a deadline no busy test machine reaches: no stage is cut, so the page's searches and the test's agree
        args = ["--llm", llm.base_url, "--model", "fake", "--deadline-ms", "60000"]
        with ServerProcess(pmid_collection, args) as srv:
            yield srv


@pytest.fixture(scope="module")
def driver():
    with headless_chromium() as d:
        yield d


def _wait(driver, condition, what):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(condition, message=f"waited {WAIT_S} s for {what}")


def _answered(driver):
    return driver.execute_script(
        "const a = document.getElementById('answer');"
        "return a.getAttribute('aria-busy') === 'false' && a.querySelector('a.cite') !== null &&"
        " /answered/.test(document.getElementById('status').textContent);")


def _check_hit_list(driver, search, answer):
    """The page lists the search's hits in order, then each cited evidence passage of the answer that the search
    did not return (marked as such), so that every citation has its hit to point at."""
    from selenium.webdriver.common.by import By

    items = driver.find_elements(By.CSS_SELECTOR, "#hits li.hit")
    shown = [i.get_attribute("data-chunk") for i in items]
    searched = [h["chunk_id"] for h in search["hits"]]
    assert shown[:len(searched)] == searched
    cited = {answer["evidence"][n - 1]["chunk_id"] for c in answer["citations"] for n in c["sources"]}
    assert set(shown[len(searched):]) == cited - set(searched)
    for item in items[len(searched):]:
        assert item.find_element(By.CSS_SELECTOR, ".extra").text == "evidence of the answer"


def _offsite(urls, server_url):
    return [u for u in urls if not u.startswith((server_url + "/", "data:", "about:", "blob:"))]


def test_a_question_asked_by_keyboard_gets_hits_and_a_cited_answer(driver, page_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(page_server.url + "/")
    focused = driver.switch_to.active_element
    assert focused.get_attribute("id") == "question"  # the question box has the focus on arrival
    driver.find_element(By.ID, "k").clear()
    driver.find_element(By.ID, "k").send_keys(str(K))
    driver.find_element(By.ID, "question").send_keys(QUESTION, Keys.ENTER)
    _wait(driver, _answered, "the streamed answer")

    with httpx.Client(base_url=page_server.url, timeout=60.0) as http:
        search = http.post("/v1/search", json={"question": QUESTION, "k": K}).json()
        answer = http.post("/v1/answer", json={"question": QUESTION, "k": K}).json()

    # the hits: the server's, in its order, with their sections, highlighted terms and source links
    items = driver.find_elements(By.CSS_SELECTOR, "#hits li.hit")
    _check_hit_list(driver, search, answer)
    top = items[0]
    assert search["hits"][0]["document_id"] == "31000002"
    assert top.find_element(By.CSS_SELECTOR, ".section").text == search["hits"][0]["section"]
    assert top.find_element(By.CSS_SELECTOR, "h3 a").get_attribute("href") == "https://pubmed.ncbi.nlm.nih.gov/31000002/"
    marked = {m.text.lower() for m in driver.find_elements(By.CSS_SELECTOR, "#hits mark")}
    assert "diabetes" in marked and "drug" in marked and "the" not in marked and "what" not in marked
    for item, hit in zip(items, search["hits"]):
        links = item.find_elements(By.CSS_SELECTOR, "h3 a")
        assert bool(links) == (hit["document_id"] in PMIDS.values())  # demo ids have no source to link to

    # the answer: every citation mark is a link to the shown hit holding that evidence passage
    text = driver.find_element(By.ID, "answer").text
    assert text == answer["text"] and "[1, 2]" in text
    marks = driver.find_elements(By.CSS_SELECTOR, "#answer .cite")
    assert [m.text for m in marks] == ["1", "1", "2"]
    for mark in marks:
        assert mark.tag_name == "a" and "invalid" not in mark.get_attribute("class")
        target = driver.find_element(By.CSS_SELECTOR, mark.get_attribute("href").split("/")[-1])
        assert target.is_displayed() and target.get_attribute("class") == "hit"
        n = int(mark.get_attribute("data-source"))
        assert target.get_attribute("data-chunk") == answer["evidence"][n - 1]["chunk_id"]

    # the time each stage took, then the answer's parts
    rows = driver.find_elements(By.CSS_SELECTOR, "#timings tbody tr")
    names = [r.find_element(By.TAG_NAME, "th").text for r in rows]
    assert names[:len(search["stages"])] == [s["name"] for s in search["stages"]]
    assert "search total" in names and "answer generate" in names and "answer total" in names

    # keyboard only: from the question, Tab reaches the hits count, the button, then the first citation; Enter on
    # it moves the focus to its hit, with a visible focus ring
    driver.find_element(By.ID, "question").click()
    body = driver.switch_to.active_element
    order = []
    for _ in range(3):
        body.send_keys(Keys.TAB)
        body = driver.switch_to.active_element
        order.append(body.get_attribute("id") or body.get_attribute("class").split()[0])
    assert order == ["k", "submit", "cite"]
    body.send_keys(Keys.ENTER)
    focused = driver.switch_to.active_element
    assert focused.get_attribute("id") == marks[0].get_attribute("href").split("#")[-1]
    ring = driver.execute_script("const s = getComputedStyle(document.activeElement);"
                                 "return [s.outlineStyle, parseFloat(s.outlineWidth)];")
    assert ring[0] == "solid" and ring[1] >= 2

    urls = requests_seen(driver)
    assert any(u.endswith("/v1/answer") for u in urls) and any(u.endswith("/static/page/page.js") for u in urls)
    assert not _offsite(urls, page_server.url), _offsite(urls, page_server.url)
    assert not console_errors(driver)


def test_a_new_question_replaces_the_last_one_and_errors_are_shown(driver, page_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(page_server.url + "/")
    box = driver.find_element(By.ID, "question")
    box.send_keys("   ", Keys.ENTER)  # blank: refused by the form itself, nothing is asked
    assert driver.find_element(By.ID, "hits-section").get_attribute("hidden") is not None
    box.clear()
    box.send_keys("x" * 4001)  # the box holds at most what the API accepts
    assert len(box.get_attribute("value")) == 4000
    box.clear()
    driver.find_element(By.ID, "k").clear()
    driver.find_element(By.ID, "k").send_keys("2")
    box.send_keys("Is levodopa used to treat Parkinson's disease?", Keys.ENTER)
    _wait(driver, _answered, "the second answer")
    with httpx.Client(base_url=page_server.url, timeout=60.0) as http:
        body = {"question": "Is levodopa used to treat Parkinson's disease?", "k": 2}
        search, answer = http.post("/v1/search", json=body).json(), http.post("/v1/answer", json=body).json()
    _check_hit_list(driver, search, answer)
    assert not _offsite(requests_seen(driver), page_server.url)


def test_the_api_docs_render_offline(driver, page_server):
    from selenium.webdriver.common.by import By

    driver.get(page_server.url + "/docs")
    operations = ".opblock-summary-path"
    _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, operations)) >= 5, "Swagger UI's operations")
    with httpx.Client(base_url=page_server.url, timeout=30.0) as http:
        documented = set(http.get("/openapi.json").json()["paths"])
    shown = {e.text.replace("\u200b", "") for e in driver.find_elements(By.CSS_SELECTOR, operations)}
    assert shown == documented and "/v1/search" in shown
    assert not console_errors(driver)
    assert not _offsite(requests_seen(driver), page_server.url), _offsite(requests_seen(driver), page_server.url)
