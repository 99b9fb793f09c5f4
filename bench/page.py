"""The service's pages in headless Chromium (Debian's chromium + chromium-driver through selenium): how long the
search page and the API docs page take to load, how many bytes they fetch, how long the page takes to show the
hits and the answer; and the screenshot of the page after an answer that docs/serving.md shows.

    python bench/page.py [--runs 5] [--corpus PATH] [--question Q] [--k 5] [--llm URL --model NAME]
                         [--screenshot docs/search-page.png]

The server: ``medretrieve serve`` over ``--corpus`` (default: the demo corpus, 52 documents; any corpus
``medretrieve build`` reads, e.g. a BioASQ golden file, whose snippets are PubMed articles), built once into a
temporary folder with the embedded model, one worker, on loopback; without ``--llm`` its answers are extractive.
Every run opens each page in a fresh browser tab with the cache off:

- load: navigation start to the load event (ms), and the bytes the page fetched (its document and every
  resource, as transferred);
- ask: the question typed into the box and Enter pressed, then the page's own marks (``performance.mark`` in
  page.js): ``hits`` (the hits and timings shown), ``first-words`` (the first piece of the answer shown),
  ``answered`` (the whole answer with its links), each from ``asked`` (ms);
- the API docs: ``/docs`` from navigation start until Swagger UI shows the operations (ms), and its bytes.

Both pages come from the same server in the same runs, interleaved, so the ratio docs / search page does not
depend on the machine's load the way the absolute times do.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from browser import browser_unavailable, headless_chromium  # noqa: E402

from medretrieve.server.pages import WEB  # noqa: E402
from medretrieve.testing.server import ServerProcess  # noqa: E402

WAIT_S = 60.0  # the longest wait for anything a page shows

BYTES_FETCHED = """
const nav = performance.getEntriesByType('navigation')[0];
return [nav.loadEventEnd - nav.startTime,
        nav.transferSize + performance.getEntriesByType('resource').reduce((n, r) => n + r.transferSize, 0)];
"""
MARKS = "return Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime]));"


def _wait(driver, condition, what: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT_S, poll_frequency=0.02).until(condition, message=f"waited {WAIT_S} s for {what}")


def _fresh_tab(driver, url: str) -> None:
    driver.switch_to.new_window("tab")
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    driver.get(url)


def _close_tab(driver) -> None:
    driver.close()
    driver.switch_to.window(driver.window_handles[0])


def _ask(driver, question: str, k: int) -> Dict[str, float]:
    """Type the question, press Enter, wait for the answer (or the page's error line); the page's marks (ms)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_element(By.ID, "k").clear()
    driver.find_element(By.ID, "k").send_keys(str(k))
    driver.find_element(By.ID, "question").send_keys(question, Keys.ENTER)
    _wait(driver, lambda d: "medretrieve:answered" in d.execute_script(MARKS) or
          d.find_element(By.ID, "status").get_attribute("class") == "error", "the answer")
    return driver.execute_script(MARKS)


def search_page_run(driver, url: str, question: str, k: int) -> Dict[str, float]:
    _fresh_tab(driver, url + "/")
    _wait(driver, lambda d: d.execute_script("return document.readyState") == "complete", "the page's load")
    load_ms, fetched = driver.execute_script(BYTES_FETCHED)
    marks = _ask(driver, question, k)
    asked = marks["medretrieve:asked"]
    out = {"load_ms": load_ms, "bytes": fetched}
    for name in ("hits", "first-words", "answered"):
        if f"medretrieve:{name}" in marks:
            out[f"{name}_ms"] = marks[f"medretrieve:{name}"] - asked
    _close_tab(driver)
    return out


def docs_page_run(driver, url: str) -> Dict[str, float]:
    from selenium.webdriver.common.by import By

    _fresh_tab(driver, url + "/docs")
    _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")) >= 5, "Swagger UI")
    rendered_ms = driver.execute_script("return performance.now()")  # from the page's navigation start
    load_ms, fetched = driver.execute_script(BYTES_FETCHED)
    _close_tab(driver)
    return {"load_ms": load_ms, "bytes": fetched, "rendered_ms": rendered_ms}


def screenshot(driver, url: str, question: str, k: int, path: Path) -> None:
    """The whole page after an answer (PNG, at most 2,400 CSS pixels high), in 64 colours: a page of flat colours
    stays sharp at a fraction of the bytes."""
    import base64
    import io

    from PIL import Image

    driver.get(url + "/")
    _ask(driver, question, k)
    width, height = driver.execute_script("return [document.documentElement.scrollWidth,"
                                          " document.documentElement.scrollHeight]")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": min(height, 2400), "scale": 1}})
    with Image.open(io.BytesIO(base64.b64decode(shot["data"]))) as image:
        small = image.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    path.parent.mkdir(parents=True, exist_ok=True)
    small.save(path, optimize=True)


def _median(rows: List[Dict[str, float]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--corpus", type=Path, help="the corpus to serve (default: the demo corpus)")
    ap.add_argument("--question", default="What is the first-line drug treatment for type 2 diabetes?")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--llm", help="an OpenAI-compatible server for the answers (default: none)")
    ap.add_argument("--model", help="its model name (with --llm)")
    ap.add_argument("--screenshot", type=Path, help="write the page after an answer here (PNG)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if bool(args.llm) != bool(args.model):
        ap.error("--llm and --model go together")
    reason = browser_unavailable()
    if reason:
        sys.exit(f"no browser: {reason}")
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir
    from medretrieve.testing.collection import DEMO_CORPUS

    served = ["--deadline-ms", "60000"] + (["--llm", args.llm, "--model", args.model] if args.llm else [])
    with tempfile.TemporaryDirectory(prefix="medretrieve-page-bench-") as work:
        collection = Path(work) / "demo"
        Collection.build(args.corpus or DEMO_CORPUS, collection, encoder=default_model_dir(), progress=False)
        with ServerProcess(collection, served) as server, headless_chromium(width=1000, height=1400) as driver:
            search_page_run(driver, server.url, args.question, args.k)  # warm: the server's first question
            page_rows, docs_rows = [], []
            for _ in range(args.runs):
                page_rows.append(search_page_run(driver, server.url, args.question, args.k))
                docs_rows.append(docs_page_run(driver, server.url))
            if args.screenshot:
                screenshot(driver, server.url, args.question, args.k, args.screenshot)
    files = {p.name: p.stat().st_size for p in sorted(WEB.iterdir())}
    page_load, docs_load = _median(page_rows, "load_ms"), _median(docs_rows, "load_ms")
    print(json.dumps({"search_page": page_rows, "docs_page": docs_rows, "files": files}, indent=1), file=sys.stderr)
    print(f"runs: {args.runs} (medians), corpus: {(args.corpus or DEMO_CORPUS).name}, question: {args.question!r}, "
          f"k={args.k}, "
          f"answers: {'LLM ' + args.model if args.llm else 'no LLM configured'}\n")
    print("| page | load (ms) | bytes fetched | hits shown (ms) | first words (ms) | answer shown (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| search page `/` | {page_load:.0f} | {_median(page_rows, 'bytes'):,.0f} | "
          f"{_median(page_rows, 'hits_ms'):.0f} | {_median(page_rows, 'first-words_ms'):.0f} | "
          f"{_median(page_rows, 'answered_ms'):.0f} |")
    print(f"| API docs `/docs` (Swagger UI) | {docs_load:.0f} | {_median(docs_rows, 'bytes'):,.0f} | "
          f"operations shown: {_median(docs_rows, 'rendered_ms'):.0f} | | |")
    print(f"\nratio docs / search page, load: {docs_load / page_load:.1f}x; "
          f"search page files: {', '.join(f'{n} {b:,} B' for n, b in files.items())} ({sum(files.values()):,} B)")
    if args.screenshot:
        print(f"screenshot: {args.screenshot}")


if __name__ == "__main__":
    main()
