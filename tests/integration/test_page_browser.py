"""The page ``refactx serve`` answers at ``/``, in a real browser: headless Chromium (Debian's
package, installed by ./dev's setup) driven by Selenium, against a live ``refactx serve`` with
SmolLM2 and an API key, serving two indexes -- the shared sample's facts as a PostgreSQL build
with provenance (the real Wikidata ids of Germany's statements), and a tiny index file whose
labels hold markup and quotes.

``REFACTX_SCREENSHOTS=DIR`` saves the screenshots the tests take (``page-*.png``) in DIR
(docs/figures/ keeps the one the README shows)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.pg]

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("selenium", reason="Selenium is not installed (./dev's setup installs it)")
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("Chromium or chromedriver is not installed (./dev's setup installs Debian's chromium and "
                "chromium-driver with apt-get, which failed or could not run here)", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException, TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

REFACTX = str(Path(sys.executable).with_name("refactx"))
KEY = "page-" + "5" * 20
HOSTILE = "<script>alert(1)</script>\"'"
# a label with no ">" (the explorer cuts a label at its first one): shown whole by the type-ahead
HOSTILE_SUBJECT = "Quote \"'<img src=x onerror=alert(2)"
HOSTILE_FACTS = [f"<Hostile> <note> <{HOSTILE}> .", f"<Hostile> <quote> <{HOSTILE_SUBJECT}> .",
                 f"<{HOSTILE_SUBJECT}> <description> <a label that is markup & quotes> ."]
# Germany's statements in the sample, with their Wikidata ids (the truthy dump's); an object
# label's "(description)" is the verbalizer's disambiguation
ITEMS = {"Germany": "Q183", "Berlin": "Q64", "Europe": "Q46", "European Union": "Q458", "German language": "Q188",
         "Austria": "Q40", "Belgium": "Q31", "Czech Republic": "Q213", "Denmark": "Q35", "France": "Q142",
         "Luxembourg": "Q32", "Netherlands": "Q55", "Switzerland": "Q39"}
PROPERTIES = {"capital": "P36", "contains administrative territorial entity": "P150", "continent": "P30",
              "country": "P17", "member of": "P463", "official language": "P37", "shares border with": "P47"}
TIMEOUT_S = 300  # an answer of SmolLM2 on a shared 2-core CPU, beside the suite's other worker


def _sources(text: str) -> list[tuple]:
    """The provenance rows ``(kind, subject, property, object, value)`` of a sample fact about Germany."""
    m = re.fullmatch(r"<(.*)> <(.*)> <(.*)> \.", text)
    if not m or m[1] != "Germany":
        return []
    s, p, o = m[1], m[2], re.sub(r" \(.*\)$", "", m[3])
    if p == "description":
        return [("description", ITEMS[s], None, None, m[3])]
    if p in PROPERTIES and o in ITEMS:
        return [("statement", ITEMS[s], PROPERTIES[p], ITEMS[o], None)]
    return []


@pytest.fixture(scope="module")
def served(pg_server, sample_fact_texts, tmp_path_factory):
    """``refactx serve`` with its API key, over the sample's PostgreSQL build (with provenance)
    and the hostile index file."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from refactx_index.qa.models import model_directory
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.tree.provenance import fact_id
    from refactx_index.vocab import as_vocabulary, encode_facts, open_tokenizer

    from ..pgtree import load_tree, store_provenance_rows

    tokenizer_file = str(model_directory("smollm2") / "tokenizer.json")
    hostile = tmp_path_factory.mktemp("page") / "hostile.rfx"
    MemoryTreeIndex.from_facts(HOSTILE_FACTS, tokenizer_file).save(hostile)
    database = f"refactx_page_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dsn = make_conninfo(**{**conninfo_to_dict(pg_server), "dbname": database})
    proc = None
    try:
        vocabulary = as_vocabulary(tokenizer_file)
        encoded = encode_facts(open_tokenizer(tokenizer_file), sample_fact_texts, ())
        build_id = load_tree(dsn, "sample", [encoded.ids(i) for i in range(len(sample_fact_texts))],
                             vocabulary="smollm2", vocabulary_sha256=vocabulary.sha256,
                             vocab_size=vocabulary.vocab_size)
        rows = [(fact_id(t), *source) for t in sample_fact_texts for source in _sources(t)]
        assert len(rows) >= 10
        store_provenance_rows(dsn, build_id, rows)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX")}
        env.update(REFACTX_DSN=dsn, REFACTX_API_KEY=KEY)
        proc = subprocess.Popen([REFACTX, "serve", "--index", "sample", "--index-file", f"hostile={hostile}",
                                 "--port", str(port), "--max-new-tokens", "64"],
                                env=env, stderr=subprocess.PIPE, text=True)
        seen = []
        for line in proc.stderr:  # until the server's line once it listens (or its error and EOF)
            seen.append(line)
            if "refactx: serving" in line:
                break
        assert "refactx: serving ['hostile', 'sample']" in seen[-1], "".join(seen)
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # drained: the pipe never fills
        yield {"url": f"http://127.0.0.1:{port}", "build_id": build_id}
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout: float = 60):
    try:
        return WebDriverWait(driver, timeout).until(condition)
    except TimeoutException:
        messages = driver.find_element(By.ID, "messages").text
        console = [entry["message"] for entry in driver.get_log("browser")]
        raise AssertionError(f"not within {timeout} s; the page says {messages!r}; its console: {console}") from None


def _open(driver, url: str, state: str = "", key: str | None = KEY) -> None:
    """A fresh page at ``url`` with the hash ``state``, the API key in the tab's session (as
    the key box leaves it) or none."""
    driver.get(url + "/static/icon.svg")  # same origin: its sessionStorage is the page's
    driver.execute_script("sessionStorage.clear(); if (arguments[0]) sessionStorage.setItem('refactx.apiKey', "
                          "arguments[0]);", key)
    driver.get(url + "/" + (f"#{state}" if state else ""))
    if key:
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#indexes tbody tr"))


def _screenshot(driver, name: str, element=None) -> None:
    folder = os.environ.get("REFACTX_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        path = str(Path(folder) / f"page-{name}.png")
        element.screenshot(path) if element is not None else driver.save_screenshot(path)


def _text(driver, selector: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, selector).text


def test_the_page_loads_without_the_key_and_the_api_answers_401(served):
    url = served["url"]
    page = httpx.get(url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "<script src=\"/static/app.js\"" in page.text
    again = httpx.get(url + "/", headers={"if-none-match": page.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    script = httpx.get(url + "/static/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "innerHTML" not in script.text and "insertAdjacentHTML" not in script.text
    assert httpx.get(url + "/v1/indexes").status_code == 401
    assert httpx.get(url + "/static/nothing.js").status_code == 401  # not a page file: the guard's
    rebound = httpx.get(url + "/", headers={"host": "attacker.example"})
    assert rebound.status_code == 400 and rebound.json()["error"]["type"] == "host_not_allowed"
    assert httpx.post(url + "/", json={}).status_code == 401  # only GET and HEAD serve the page


def test_a_401_shows_a_message_and_the_key_box_and_the_key_opens_the_indexes(served, browser):
    url = served["url"]
    _open(browser, url, key=None)
    box = _wait(browser, lambda d: d.find_element(By.ID, "key-box").is_displayed() and d.find_element(By.ID, "key-box"))
    _wait(browser, lambda d: "401 unauthorized" in _text(d, "#messages"))
    assert "API key" in _text(browser, "#key-why")
    assert not browser.find_elements(By.CSS_SELECTOR, "#indexes tbody tr")
    _screenshot(browser, "key")
    browser.find_element(By.ID, "key-input").send_keys("wrong-key")
    browser.find_element(By.ID, "key-use").click()
    _wait(browser, lambda d: "refused this API key" in _text(d, "#key-why"))
    browser.find_element(By.ID, "key-input").send_keys(KEY)
    browser.find_element(By.ID, "key-use").click()
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#indexes tbody tr")) == 2)
    assert not box.is_displayed()
    rows = {r.find_element(By.TAG_NAME, "td").text: r.text for r in
            browser.find_elements(By.CSS_SELECTOR, "#indexes tbody tr")}
    assert "3,828" in rows["sample"] and str(served["build_id"]) in rows["sample"]
    assert browser.execute_script("return sessionStorage.getItem('refactx.apiKey')") == KEY
    assert browser.execute_script("return localStorage.length") == 0  # the session only
    assert _text(browser, "#model") == "model smollm2"


def test_type_ahead_finds_an_entity_whose_relations_objects_and_facts_browse_on(served, browser):
    url = served["url"]
    _open(browser, url, "index=sample")  # the first index listed is "hostile"
    browser.find_element(By.ID, "entity-input").send_keys("Germ")
    pick = _wait(browser, lambda d: [b for b in d.find_elements(By.CSS_SELECTOR, "#suggestions button")
                                     if b.find_element(By.CLASS_NAME, "label").text == "Germany"])
    assert pick[0].find_element(By.CLASS_NAME, "count").text == "85"
    pick[0].click()
    _wait(browser, lambda d: _text(d, "#entity .entity-label") == "Germany")
    relation = _wait(browser, lambda d: [b for b in d.find_elements(By.CSS_SELECTOR, ".relations button")
                                         if b.text.startswith("shares border with")])
    assert relation[0].find_element(By.CLASS_NAME, "count").text == "8"
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#entity ol.facts li"))
    assert all(li.text.startswith("<Germany> <") for li in browser.find_elements(By.CSS_SELECTOR, "#entity ol.facts li"))
    relation[0].click()
    belgium = _wait(browser, lambda d: [b for b in d.find_elements(By.CSS_SELECTOR, ".objects button")
                                        if b.find_element(By.CLASS_NAME, "label").text == "Belgium"])
    assert len(browser.find_elements(By.CSS_SELECTOR, ".objects button")) == 8
    assert "relation=shares+border+with" in browser.current_url  # the share link holds the state
    belgium[0].click()  # browsing on: the object is the next entity
    _wait(browser, lambda d: _text(d, "#entity .entity-label") == "Belgium")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#entity ol.facts li"))
    assert "entity=Belgium" in browser.current_url
    # a share link opens the same view in a new page
    shared = browser.current_url
    _open(browser, url, shared.split("#", 1)[1])
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#entity ol.facts li"))
    assert _text(browser, "#entity .entity-label") == "Belgium"
    assert browser.find_element(By.ID, "entity-input").get_attribute("value") == "Belgium"


def test_a_question_streams_with_and_without_the_index_its_facts_marked_and_their_provenance(served, browser):
    from refactx_index.tree.provenance import fact_id

    url = served["url"]
    _open(browser, url, "index=sample")  # the first index listed is "hostile"
    question = browser.find_element(By.ID, "question")
    question.send_keys("What is the capital of Germany?")
    limit = browser.find_element(By.ID, "max-tokens")
    limit.clear()
    limit.send_keys("40")
    browser.find_element(By.ID, "ask").click()
    for column in ("with-index", "without-index"):
        _wait(browser, lambda d: d.find_element(By.ID, column).get_attribute("data-state") in ("done", "error"),
              TIMEOUT_S)
        assert browser.find_element(By.ID, column).get_attribute("data-state") == "done", _text(browser, "#messages")
        assert int(browser.find_element(By.ID, column).get_attribute("data-chunks")) > 1  # streamed, not at once
    assert "q=What+is+the+capital+of+Germany" in browser.current_url
    stored = browser.find_elements(By.CSS_SELECTOR, "#with-index ol.facts li")
    assert stored, _text(browser, "#with-index")
    badges = [li.find_element(By.CLASS_NAME, "badge").text for li in stored]
    assert set(badges) <= {"stored", "cut off"} and "stored" in badges  # the index allows stored facts only
    assert browser.find_elements(By.CSS_SELECTOR, "#with-index .reply .fact-line.stored")
    # the first stored fact this test gave sources: its provenance (fact id, its sources linked
    # to Wikidata) and its narrowing
    texts = [li.find_element(By.CLASS_NAME, "fact-text").text for li in stored]
    sourced = [i for i, (badge, t) in enumerate(zip(badges, texts)) if badge == "stored" and _sources(t)]
    assert sourced, f"the model wrote {texts}: no fact of Germany's that this test gave sources"
    first, text = stored[sourced[0]], texts[sourced[0]]
    first.find_element(By.TAG_NAME, "summary").click()
    head = _wait(browser, lambda d: first.find_elements(By.CLASS_NAME, "provenance-head"))[0]
    assert f"fact id {fact_id(text)}" in head.text
    expected = _sources(text)
    links = {a.get_attribute("href") for a in first.find_elements(By.CSS_SELECTOR, ".provenance a.wikidata")}
    assert "https://www.wikidata.org/wiki/Q183" in links
    assert f"https://www.wikidata.org/wiki/Property:{expected[0][2]}" in links or expected[0][0] == "description"
    steps = _wait(browser, lambda d: first.find_elements(By.CSS_SELECTOR, ".narrowing .step"))
    counts = [int(s.find_element(By.CLASS_NAME, "count").text.replace(",", "")) for s in steps]
    assert counts[0] == 3828 and counts == sorted(counts, reverse=True) and counts[-1] == 1
    # the unconstrained reply's facts are looked up in the index, each marked in it or not
    free = browser.find_elements(By.CSS_SELECTOR, "#without-index ol.facts li .badge")
    assert all(b.text in ("in sample", "not in sample") for b in free)
    assert _text(browser, "#with-index .answer")
    _screenshot(browser, "ask", browser.find_element(By.ID, "ask-panel"))
    # from a written fact to its subject in the browser
    first.find_element(By.XPATH, ".//button[starts-with(., 'browse ')]").click()
    _wait(browser, lambda d: _text(d, "#entity .entity-label") == "Germany"
          and d.find_elements(By.CSS_SELECTOR, "#entity ol.facts li"))
    browser.execute_script("window.scrollTo(0, 0)")
    _screenshot(browser, "overview")


def test_hostile_labels_are_shown_as_text_and_errors_as_messages(served, browser):
    url = served["url"]
    _open(browser, url, "index=hostile&entity=Hostile")
    facts = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#entity ol.facts li"))
    assert f"<Hostile> <note> <{HOSTILE}> ." in [li.text for li in facts]
    browser.find_element(By.ID, "entity-input").clear()
    browser.find_element(By.ID, "entity-input").send_keys("Quote")
    labels = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#suggestions .label"))
    assert [x.text for x in labels] == [HOSTILE_SUBJECT]
    # no element came from a label: no script or image anywhere in the page's content
    assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img, #messages *:not(div):not(span):not(button)")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    _screenshot(browser, "hostile")
    # a share link naming no served index: a message, and the page shows the first index
    _open(browser, url, "index=nosuch")
    _wait(browser, lambda d: 'no index "nosuch" is served' in _text(d, "#messages"))
    assert browser.find_element(By.ID, "index-select").get_attribute("value") == "hostile"
    # the server's limit on max_tokens: its 422 as a message in both columns, the page still working
    browser.find_element(By.ID, "question").send_keys("Who?")
    limit = browser.find_element(By.ID, "max-tokens")
    limit.clear()
    limit.send_keys("1000")
    browser.find_element(By.ID, "ask").click()
    _wait(browser, lambda d: d.find_element(By.ID, "without-index").get_attribute("data-state") == "error")
    assert "422 invalid_max_tokens" in _text(browser, "#messages")
    assert "max_tokens must be 1..64" in _text(browser, "#with-index .answer")
