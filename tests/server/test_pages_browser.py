"""The service's pages in a real headless browser (Debian's chromium through selenium) against a real
``medretrieve serve`` process: the search page asked by keyboard only, its hits, its streamed cited answer whose
marks lead to the hits (extractive, with no LLM configured; and an LLM's, written in pieces), its timings, and no
request beyond the server; the OpenAPI docs page renders offline.
Skipped, with the reason, where no browser can be driven (CI installs chromium and chromium-driver)."""
from __future__ import annotations

import json
import re

import httpx
import pytest

from browser import browser_unavailable, console_errors, headless_chromium, requests_seen

pytestmark = pytest.mark.skipif(bool(browser_unavailable()), reason=browser_unavailable() or "browser available")

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
K = 5
PMIDS = {"demo-002": "31000002", "demo-001": "31000001"}  # documents that stand for PubMed articles
# an LLM's answer in pieces that cut its citation marks in two
LLM_PIECES = ("Metformin is the first-line drug for type 2 diabetes [", "1]. Lifestyle measures come first [1, ",
              "2].")
# a deadline no busy test machine reaches: no stage is cut, so the page's searches and the test's agree
SERVE_ARGS = ["--deadline-ms", "60000"]
WAIT_S = 60.0  # the longest wait for anything the page shows


@pytest.fixture(scope="module")
def pmid_collection(tmp_path_factory):
    """The first 12 demo documents, two of them under PubMed ids."""
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir
    from medretrieve.testing.collection import DEMO_CORPUS

    docs = [json.loads(line) for line in DEMO_CORPUS.read_text(encoding="utf-8").splitlines()[:12]]
    for i, doc in enumerate(docs):
        doc["id"] = PMIDS.get(doc["id"], doc["id"])
        # metadata for the filter and facet controls: a year and publication types per document
        doc["year"] = 2010 + i
        doc["publication_type"] = ["Journal Article", "Review" if i % 3 == 0 else "Randomized Controlled Trial"]
    out = tmp_path_factory.mktemp("page-collection") / "pmids"
    Collection.build(docs, out, encoder=default_model_dir(), progress=False)
    return out


@pytest.fixture(scope="module")
def page_server(pmid_collection):
    """No LLM configured: answers are extractive."""
    from medretrieve.testing.server import ServerProcess

    with ServerProcess(pmid_collection, SERVE_ARGS) as srv:
        yield srv


@pytest.fixture(scope="module")
def llm_page_server(pmid_collection):
    """Answers from a scripted LLM that streams :data:`LLM_PIECES`."""
    from llm_server import FakeLLMServer, stream_reply

    from medretrieve.testing.server import ServerProcess

    def reply(request_json):
        if request_json and request_json.get("stream"):
            return stream_reply(LLM_PIECES)
        return "".join(LLM_PIECES)

    with FakeLLMServer(reply) as llm:
        with ServerProcess(pmid_collection, ["--llm", llm.base_url, "--model", "fake", *SERVE_ARGS]) as srv:
            yield srv


@pytest.fixture(scope="module")
def browser():
    with headless_chromium() as d:
        yield d


@pytest.fixture
def driver(browser):
    """The module's browser, its logs emptied: what a test reads of them is its own."""
    requests_seen(browser)
    console_errors(browser)
    return browser


def _wait(driver, condition, what):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(condition, message=f"waited {WAIT_S} s for {what}")


def _answered(driver):
    return driver.execute_script(
        "const a = document.getElementById('answer');"
        "return a.getAttribute('aria-busy') === 'false' && a.querySelector('a.cite') !== null &&"
        " /answered/.test(document.getElementById('status').textContent);")


def _ask_by_keyboard(driver, url, question, k, explain=False):
    """Open the page and ask, with keys only: the question box has the focus on arrival; Enter submits."""
    from selenium.webdriver.common.keys import Keys

    driver.get(url + "/")
    # autofocus is applied at the first rendering update after load, which may come after get() returns
    _wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "question", "the question's focus")
    box = driver.switch_to.active_element
    box.send_keys(Keys.TAB)  # to "Hits"
    hits_box = driver.switch_to.active_element
    assert hits_box.get_attribute("id") == "k"
    hits_box.send_keys(Keys.BACKSPACE * 3, str(k), Keys.TAB)  # to "Why each stage"
    if explain:
        driver.switch_to.active_element.send_keys(Keys.SPACE)
    driver.switch_to.active_element.send_keys(Keys.SHIFT, Keys.TAB, Keys.TAB)  # back to the question
    driver.switch_to.active_element.send_keys(question, Keys.ENTER)
    _wait(driver, _answered, "the streamed answer")


def _server_answer(url, question, k):
    """The search and the (whole) answer the server gives the same question."""
    with httpx.Client(base_url=url, timeout=60.0) as http:
        search = http.post("/v1/search", json={"question": question, "k": k, "explain": True}).json()
        answer = http.post("/v1/answer", json={"question": question, "k": k}).json()
    return search, answer


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


def _check_citations(driver, answer):
    """The answer shown is the server's, and each of its citation marks is a link to the shown hit that holds the
    evidence passage it cites."""
    from selenium.webdriver.common.by import By

    assert driver.find_element(By.ID, "answer").text == answer["text"]
    marks = driver.find_elements(By.CSS_SELECTOR, "#answer .cite")
    assert [int(m.text) for m in marks] == [n for c in answer["citations"] for n in c["sources"]] and marks
    for mark in marks:
        assert mark.tag_name == "a" and "invalid" not in mark.get_attribute("class")
        target = driver.find_element(By.CSS_SELECTOR, "#" + mark.get_attribute("href").split("#")[-1])
        assert target.is_displayed() and target.get_attribute("class") == "hit"
        n = int(mark.get_attribute("data-source"))
        assert target.get_attribute("data-chunk") == answer["evidence"][n - 1]["chunk_id"]
    return marks


def _offsite(urls, server_url):
    return [u for u in urls if not u.startswith((server_url + "/", "data:", "about:", "blob:"))]


def test_a_question_asked_by_keyboard_gets_hits_and_a_cited_answer_without_an_llm(driver, page_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _ask_by_keyboard(driver, page_server.url, QUESTION, K)
    search, answer = _server_answer(page_server.url, QUESTION, K)
    assert answer["citations"] and not answer["abstained"]  # extractive: the evidence's own sentences, cited

    # the hits: the server's, in its order, with their sections, highlighted terms and source links
    _check_hit_list(driver, search, answer)
    top = driver.find_elements(By.CSS_SELECTOR, "#hits li.hit")[0]
    assert search["hits"][0]["document_id"] == "31000002"
    assert top.find_element(By.CSS_SELECTOR, ".section").text == search["hits"][0]["section"]
    assert top.find_element(By.CSS_SELECTOR, "h3 a").get_attribute("href") == "https://pubmed.ncbi.nlm.nih.gov/31000002/"
    marked = {m.text.lower() for m in driver.find_elements(By.CSS_SELECTOR, "#hits mark")}
    assert "diabetes" in marked and "drug" in marked and "the" not in marked and "what" not in marked
    for item, hit in zip(driver.find_elements(By.CSS_SELECTOR, "#hits li.hit"), search["hits"]):
        links = item.find_elements(By.CSS_SELECTOR, "h3 a")
        assert bool(links) == (hit["document_id"] in PMIDS.values())  # demo ids have no source to link to

    marks = _check_citations(driver, answer)

    # the time each stage took (no reasons: the box "Why each stage" was not ticked), then the answer's parts
    rows = driver.find_elements(By.CSS_SELECTOR, "#timings tbody tr")
    names = [r.find_element(By.TAG_NAME, "th").text for r in rows]
    assert names[:len(search["stages"])] == [s["name"] for s in search["stages"]]
    assert "search total" in names and "answer retrieve" in names and "answer total" in names
    assert not any(cell.is_displayed() for cell in driver.find_elements(By.CSS_SELECTOR, "#timings .why"))

    # keyboard only: from the question, Tab reaches the hits count, the box, the button, then the first citation;
    # Enter on it moves the focus to its hit, with a visible focus ring
    driver.find_element(By.ID, "question").click()
    focused = driver.switch_to.active_element
    order = []
    for _ in range(6):
        focused.send_keys(Keys.TAB)
        focused = driver.switch_to.active_element
        order.append(focused.get_attribute("id") or focused.get_attribute("class").split()[0])
    assert order == ["k", "explain", "where", "include-retracted", "submit", "cite"]
    focused.send_keys(Keys.ENTER)
    focused = driver.switch_to.active_element
    assert focused.get_attribute("id") == marks[0].get_attribute("href").split("#")[-1]
    ring = driver.execute_script("const s = getComputedStyle(document.activeElement);"
                                 "return [s.outlineStyle, parseFloat(s.outlineWidth)];")
    assert ring[0] == "solid" and ring[1] >= 2

    urls = requests_seen(driver)
    assert any(u.endswith("/v1/answer") for u in urls) and any(u.endswith("/static/page/page.js") for u in urls)
    assert not _offsite(urls, page_server.url), _offsite(urls, page_server.url)
    assert not console_errors(driver)


def test_a_filtered_search_shows_only_passing_hits_with_their_year_and_type_and_facet_counts(driver, page_server):
    """The filter box and the retracted box reach the search; each hit shows its year and type; the facet tables
    count the filtered collection and the hits, and choosing a value narrows the filter and searches again."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(page_server.url + "/")
    _wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "question", "the question's focus")
    driver.find_element(By.ID, "where").send_keys("year >= 2016")
    driver.find_element(By.ID, "question").send_keys(QUESTION)
    driver.find_element(By.ID, "submit").click()
    _wait(driver, lambda d: d.find_element(By.ID, "facets-section").is_displayed(), "the facet counts")
    # the filtered search is answered too: the page settles once its answer is there (or said to be missing)
    _wait(driver, lambda d: re.search(r"answered|no answer", d.find_element(By.ID, "status").text), "the answer")
    with httpx.Client(base_url=page_server.url, timeout=60.0) as http:
        search = http.post("/v1/search", json={"question": QUESTION, "k": 5, "where": "year >= 2016"}).json()
        counted = http.post("/v1/facets", json={"fields": ["year", "publication_type"], "where": "year >= 2016",
                                                "top": 12}).json()
    items = driver.find_elements(By.CSS_SELECTOR, "#hits li.hit")
    assert [i.get_attribute("data-chunk") for i in items] == [h["chunk_id"] for h in search["hits"]]
    for item, hit in zip(items, search["hits"]):
        assert hit["metadata"]["year"] >= 2016
        shown = [m.text for m in item.find_elements(By.CSS_SELECTOR, ".doc-meta")]
        assert shown[0] == str(hit["metadata"]["year"]) and shown[1] == hit["metadata"]["publication_type"][-1]
    assert "filtered" in driver.find_element(By.ID, "status").text
    tables = driver.find_elements(By.CSS_SELECTOR, "#facets table.facet")
    assert len(tables) == 2
    year_rows = tables[0].find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [(r.find_elements(By.TAG_NAME, "td")[0].text, int(r.find_elements(By.TAG_NAME, "td")[1].text))
            for r in year_rows] == [(str(f["value"]), f["count"]) for f in counted["facets"]["year"]]
    in_hits = sum(int(r.find_elements(By.TAG_NAME, "td")[2].text) for r in year_rows)
    assert in_hits == len({h["document_id"] for h in search["hits"]})
    # by keyboard: the answer above makes the page scroll (smoothly), where a pointer's click may land elsewhere
    year_rows[0].find_element(By.CSS_SELECTOR, "button.facet-value").send_keys(Keys.ENTER)
    first = str(counted["facets"]["year"][0]["value"])
    _wait(driver, lambda d: d.find_element(By.ID, "where").get_attribute("value") == f"(year >= 2016) and year == {first}",
          "the chosen value in the filter")
    _wait(driver, lambda d: d.find_element(By.ID, "facets-section").is_displayed() and all(
        m.text == first for m in d.find_elements(By.CSS_SELECTOR, "#hits .doc-meta:first-of-type")), "the narrowed hits")
    assert not console_errors(driver)


def test_a_filtered_answer_lists_each_cited_source_with_its_year_and_type(driver, page_server):
    """The filter box reaches the answer's own search: the answer shown is the server's filtered one, every source
    it cites passes the filter, and each is listed under the answer with its year and type, linked to its hit."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(page_server.url + "/")
    _wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "question", "the question's focus")
    driver.find_element(By.ID, "where").send_keys("year <= 2015")
    driver.find_element(By.ID, "question").send_keys(QUESTION, Keys.ENTER)
    _wait(driver, _answered, "the filtered answer")
    assert "(filtered)" in driver.find_element(By.ID, "status").text
    with httpx.Client(base_url=page_server.url, timeout=60.0) as http:
        answer = http.post("/v1/answer", json={"question": QUESTION, "k": K, "where": "year <= 2015"}).json()
        unfiltered = http.post("/v1/answer", json={"question": QUESTION, "k": K}).json()
    assert any(h["metadata"]["year"] > 2015 for h in unfiltered["evidence"])  # the filter has something to drop
    assert answer["evidence"] and all(h["metadata"]["year"] <= 2015 for h in answer["evidence"])
    _check_citations(driver, answer)
    cited = sorted({n for c in answer["citations"] for n in c["sources"]})
    items = driver.find_elements(By.CSS_SELECTOR, "#answer-sources li")
    assert cited and [i.find_element(By.CSS_SELECTOR, "a.source").get_attribute("data-source") for i in items] == \
        [str(n) for n in cited]
    for item, n in zip(items, cited):
        meta = answer["evidence"][n - 1]["metadata"]
        assert meta["year"] <= 2015
        # the year, then the types but the generic "Journal Article", as the hits show them
        assert [m.text for m in item.find_elements(By.CSS_SELECTOR, ".doc-meta")] == [
            str(meta["year"]), meta["publication_type"][-1]]
    link = items[0].find_element(By.CSS_SELECTOR, "a.source")
    link.send_keys(Keys.ENTER)
    focused = driver.switch_to.active_element
    assert focused.get_attribute("id") == link.get_attribute("href").split("#")[-1]
    assert focused.get_attribute("data-chunk") == answer["evidence"][cited[0] - 1]["chunk_id"]
    assert not console_errors(driver)


def test_an_llm_answer_written_in_pieces_links_every_citation(driver, llm_page_server):
    _ask_by_keyboard(driver, llm_page_server.url, QUESTION, K)
    search, answer = _server_answer(llm_page_server.url, QUESTION, K)
    assert "".join(LLM_PIECES) in answer["text"]
    _check_hit_list(driver, search, answer)
    assert [m.text for m in _check_citations(driver, answer)] == ["1", "1", "2"]
    assert not _offsite(requests_seen(driver), llm_page_server.url)


def _timeless(reason: str) -> str:
    """A stage's reason without the milliseconds left of the deadline, which differ from one search to the next."""
    return re.sub(r"\d+(\.\d+)? ms left", "N ms left", reason)


def test_a_new_question_replaces_the_last_one_and_reasons_come_on_request(driver, page_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(page_server.url + "/")
    box = driver.find_element(By.ID, "question")
    box.send_keys("   ", Keys.ENTER)  # blank: refused by the page, nothing is asked
    assert driver.find_element(By.ID, "hits-section").get_attribute("hidden") is not None
    assert "question" in driver.find_element(By.ID, "status").text.lower()
    box.clear()
    box.send_keys("x" * 4001)  # the box holds at most what the API accepts
    assert len(box.get_attribute("value")) == 4000

    question = "How is asthma diagnosed?"
    _ask_by_keyboard(driver, page_server.url, QUESTION, K)
    box = driver.find_element(By.ID, "question")
    box.clear()
    driver.find_element(By.ID, "explain").click()
    driver.find_element(By.ID, "k").clear()
    driver.find_element(By.ID, "k").send_keys("2")
    box.send_keys(question, Keys.ENTER)
    _wait(driver, _answered, "the second answer")  # the status line said "Searching" at Enter
    search, answer = _server_answer(page_server.url, question, 2)
    _check_hit_list(driver, search, answer)
    _check_citations(driver, answer)
    why = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.CSS_SELECTOR, ".why").text
           for r in driver.find_elements(By.CSS_SELECTOR, "#timings tbody tr")}
    reasons = {s["name"]: _timeless(s["reason"]) for s in search["stages"]}  # two searches: the time left differs
    assert {name: _timeless(why[name]) for name in reasons} == reasons and reasons["classify"]
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
    offsite = _offsite(requests_seen(driver), page_server.url)
    assert not offsite, offsite


PAGE_KEY = "page-key-with-every-scope-0123456789"


@pytest.fixture(scope="module")
def keyed_page_server(pmid_collection, tmp_path_factory):
    """A server with an API key (every scope): the page must ask for it."""
    from medretrieve.testing.server import ServerProcess

    keys = tmp_path_factory.mktemp("page-keys") / "keys.txt"
    keys.write_text(f"{PAGE_KEY} search,answer\n", encoding="utf-8")
    with ServerProcess(pmid_collection, ["--api-key-file", str(keys), *SERVE_ARGS], api_key=PAGE_KEY) as srv:
        yield srv


def test_the_page_asks_for_a_key_keeps_it_in_the_tab_and_sends_it(driver, keyed_page_server):
    """On a server with keys the first question is refused (401): the page shows its key field with the focus in
    it; the key typed there goes to sessionStorage only and the question is asked again with it, by keyboard."""
    from selenium.webdriver.common.keys import Keys

    driver.get(keyed_page_server.url + "/")
    driver.execute_script("sessionStorage.clear(); localStorage.clear();")
    driver.get(keyed_page_server.url + "/")
    _wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "question", "the question's focus")
    assert not driver.find_element("id", "key-form").is_displayed()
    driver.switch_to.active_element.send_keys(QUESTION, Keys.ENTER)
    _wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "api-key", "the key field's focus")
    assert "API key" in driver.find_element("id", "status").text
    assert driver.find_element("id", "key-form").is_displayed()
    assert driver.find_element("id", "api-key").get_attribute("type") == "password"
    driver.switch_to.active_element.send_keys(PAGE_KEY, Keys.ENTER)
    _wait(driver, _answered, "the streamed answer asked with the key")
    assert not driver.find_element("id", "key-form").is_displayed()
    stored = driver.execute_script("return [sessionStorage.getItem('medretrieve.apiKey'), localStorage.length,"
                                   " document.cookie];")
    assert stored == [PAGE_KEY, 0, ""]
    assert driver.find_elements("css selector", "#hits li.hit")
    # a wrong key kept in the tab: refused again, the field comes back
    driver.execute_script("sessionStorage.setItem('medretrieve.apiKey', 'wrong-key-0123456789abcdef');")
    driver.find_element("id", "question").send_keys(Keys.ENTER)
    _wait(driver, lambda d: d.find_element("id", "key-form").is_displayed(), "the key field after a wrong key")
    driver.find_element("id", "key-forget").click()
    assert driver.execute_script("return sessionStorage.getItem('medretrieve.apiKey');") is None
    assert not _offsite(requests_seen(driver), keyed_page_server.url)
    assert not [e for e in console_errors(driver) if "401" not in e]  # the refused fetches log their status


def test_the_api_docs_offer_to_authorize_with_a_key(driver, keyed_page_server):
    from selenium.webdriver.common.by import By

    driver.get(keyed_page_server.url + "/docs")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "button.authorize"), "Swagger UI's Authorize button")
    locks = driver.find_elements(By.CSS_SELECTOR, ".opblock .authorization__btn")
    assert len(locks) >= 6  # every guarded operation shows its lock
    assert not console_errors(driver)
    assert not _offsite(requests_seen(driver), keyed_page_server.url)
