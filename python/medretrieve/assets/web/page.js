// The search page of `medretrieve serve`: plain JavaScript, no build step, no request to any other host.
// On submit it asks POST v1/search (the hits and each stage's time; each stage's reason too when "Why each stage"
// is ticked, as "explain": true), then POST v1/answer with "stream": true and
// reads its server-sent events: `evidence` (the hits the answer is grounded on), `delta` (answer text as it is
// written), `answer` (the whole answer, citations checked) or `error`. Each citation mark [n] names evidence hit n;
// it becomes a link to that hit in the list shown (by chunk id), so a reader can check the source; below the
// answer, each source it cites is listed with its document's year and publication types (when recorded). The
// filter box and the retracted box reach the answer's own search as they reach the search.
// A server with API keys answers 401 without one: the page then shows its key field; the key is kept in this
// tab's sessionStorage (never in localStorage or a cookie) and sent as `Authorization: Bearer <key>`.
"use strict";

(function () {
  const SEARCH_TIMEOUT_MS = 30000;   // the whole search request, queueing included
  const ANSWER_TIMEOUT_MS = 120000;  // the whole answer stream (the server's own default deadline is 60 s)
  // The same citation marks the server's verifier reads (generation/parsers.py CITE_RE): [1], [1, 2], [1-3].
  const CITE = /\[\s*(\d+(?:\s*(?:[-\u2013,;]|and)\s*\d+)*)\s*\]/g;
  const WORD = /[\p{L}\p{N}]+(?:['\u2019-][\p{L}\p{N}]+)*/gu;
  const STOPWORDS = new Set((
    "a about above after again against all am an and any are as at be because been before being below between " +
    "both but by can could did do does doing down during each few for from further had has have having he her " +
    "here hers him his how i if in into is it its itself just me more most my no nor not now of off on once only " +
    "or other our out over own same she should so some such than that the their them then there these they this " +
    "those through to too under until up very was we were what when where which while who whom why will with " +
    "would you your used use using patients patient"
  ).split(" "));
  const SUFFIXES = ["ations", "ation", "ments", "ment", "ings", "ing", "ies", "ic", "al", "es", "ed", "ly", "s"];

  const $ = (id) => document.getElementById(id);
  const form = $("ask"), question = $("question"), kInput = $("k"), explainBox = $("explain");
  const statusLine = $("status");
  const answerSection = $("answer-section"), answerBox = $("answer"), answerNote = $("answer-note");
  const sourcesList = $("answer-sources");
  const hitsSection = $("hits-section"), hitsList = $("hits");
  const timingsSection = $("timings-section"), timings = $("timings"), timingsBody = timings.querySelector("tbody");

  const whereInput = $("where"), retractedBox = $("include-retracted"), fieldsNote = $("fields");
  const facetsSection = $("facets-section"), facetsBox = $("facets");
  const FACETS = ["year", "publication_type"];  // the views offered, where the collection has the field
  let fieldTypes = null;  // the collection's metadata fields (GET v1/collection), read once

  const keyForm = $("key-form"), keyInput = $("api-key"), keyForget = $("key-forget");
  const KEY_STORE = "medretrieve.apiKey";

  let running = null;  // the AbortController of the search in progress

  // ------------------------------------------------------------------ small helpers

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (name === "text") node.textContent = value;
      else node.setAttribute(name, value);
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  function say(text, isError) {
    statusLine.textContent = text;
    statusLine.classList.toggle("error", Boolean(isError));
  }

  function stem(word) {
    const w = word.toLowerCase();
    for (const suffix of SUFFIXES) {
      if (w.endsWith(suffix) && w.length - suffix.length >= 4) return w.slice(0, -suffix.length);
    }
    return w;
  }

  // The link to a hit's source: its metadata's http(s) `url`, else PubMed when the document id is a PMID (all
  // digits): the rule of medretrieve.integrations.source.source_url.
  function sourceUrl(hit) {
    const url = hit.metadata && typeof hit.metadata.url === "string" ? hit.metadata.url : "";
    if (/^https?:\/\//i.test(url)) return url;
    const id = String(hit.document_id || "");
    return /^\d+$/.test(id) ? `https://pubmed.ncbi.nlm.nih.gov/${id}/` : "";
  }

  // The question's content words and the expansions the search added (synonyms, abbreviations), as stems.
  function queryStems(text, expansions) {
    const stems = new Set();
    const add = (phrase) => {
      for (const m of String(phrase).matchAll(WORD)) {
        const w = m[0];
        const abbreviation = w.length >= 2 && w === w.toUpperCase() && /\p{L}/u.test(w);
        if ((w.length >= 3 || abbreviation) && !STOPWORDS.has(w.toLowerCase())) stems.add(stem(w));
      }
    };
    add(text);
    for (const terms of Object.values(expansions || {})) for (const term of terms || []) add(term);
    return stems;
  }

  // `text` as text nodes, with every word whose stem is a query stem inside <mark>.
  function highlighted(text, stems) {
    const out = [];
    let last = 0;
    for (const m of text.matchAll(WORD)) {
      if (!stems.has(stem(m[0]))) continue;
      if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
      out.push(el("mark", { text: m[0] }));
      last = m.index + m[0].length;
    }
    if (last < text.length) out.push(document.createTextNode(text.slice(last)));
    return out;
  }

  // The API key this tab keeps ("" when none; storage may be off in a private window).
  function storedKey() {
    try { return sessionStorage.getItem(KEY_STORE) || ""; } catch (_) { return ""; }
  }

  function askForKey(message) {
    keyForm.hidden = false;
    say(message, true);
    keyInput.focus();
  }

  async function postJson(path, body, signal) {
    const headers = { "Content-Type": "application/json", "Accept": "application/json, text/event-stream" };
    const key = storedKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, { method: "POST", signal, headers, body: JSON.stringify(body) });
    if (!response.ok) {
      let message = `${response.status} ${response.statusText}`;
      try {
        const data = await response.json();
        if (data && data.error && data.error.message) message = data.error.message;
      } catch (_) { /* not JSON: keep the status line */ }
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return response;
  }

  // ------------------------------------------------------------------ hits and timings

  function hitItem(hit, position, stems, note) {
    const url = sourceUrl(hit);
    const title = highlighted(String(hit.title || hit.document_id || hit.chunk_id), stems);
    const heading = el("h3", {}, [el("span", { class: "rank", text: `[${position}] ` }),
      ...(url ? [el("a", { href: url, rel: "noopener noreferrer", target: "_blank" }, title)] : title)]);
    const meta = el("p", { class: "meta" }, [
      el("span", { class: "section", text: hit.section || "no section" }), " · ",
      ...describe(hit).map((text) => [el("span", { class: "doc-meta", text }), " · "]).flat(),
      el("span", { class: "doc", text: String(hit.document_id) }), " · ",
      // one score scale per list: a hit a later stage placed (hit.placed_by) shows why it is there, not a score
      hit.placed_by
        ? el("span", { class: "score placed", text: "added by a second search: the first found little" })
        : el("span", { class: "score", text: `score ${Number(hit.score).toFixed(3)}` }),
    ]);
    if (note) meta.append(" · ", el("span", { class: "extra", text: note }));
    const body = el("p", { class: "text" }, highlighted(String(hit.text || ""), stems));
    return el("li", { id: `hit-${position}`, class: "hit", tabindex: "-1", "data-chunk": hit.chunk_id },
      [heading, meta, body]);
  }

  // What a hit's document is, for a reader weighing it: its year and its publication types (when recorded).
  function describe(hit) {
    const meta = hit.metadata || {};
    const out = [];
    if (meta.year !== undefined && meta.year !== null) out.push(String(meta.year));
    const types = Array.isArray(meta.publication_type) ? meta.publication_type : (meta.publication_type ? [meta.publication_type] : []);
    const shown = types.filter((t) => t !== "Journal Article");
    if (shown.length) out.push(shown.join(", "));
    if (meta.retracted === true) out.push("RETRACTED");
    return out;
  }

  // ------------------------------------------------------------------ facets

  async function collectionFields(signal) {
    if (fieldTypes === null) {
      try {
        const key = storedKey();
        const response = await fetch("v1/collection", { signal, headers: key ? { Authorization: `Bearer ${key}` } : {} });
        fieldTypes = response.ok ? ((await response.json()).metadata || {}) : {};
      } catch (_) { fieldTypes = {}; }
      const names = Object.keys(fieldTypes);
      if (names.length) fieldsNote.textContent = names.join(", ");
    }
    return fieldTypes;
  }

  // Documents per value among the hits (one document once per value; a date by its year).
  function hitCounts(hits, field) {
    const counts = new Map(), seen = new Set();
    for (const hit of hits) {
      const value = (hit.metadata || {})[field];
      for (let item of Array.isArray(value) ? value : (value === undefined || value === null ? [] : [value])) {
        if (typeof item === "string" && /^\d{4}(-\d{2}(-\d{2})?)?$/.test(item)) item = Number(item.slice(0, 4));
        const key = `${hit.document_id}\u0000${item}`;
        if (seen.has(key)) continue;
        seen.add(key);
        counts.set(item, (counts.get(item) || 0) + 1);
      }
    }
    return counts;
  }

  function literal(value) {
    return typeof value === "string" ? JSON.stringify(value) : String(value);
  }

  async function showFacets(hits, where, includeRetracted, signal) {
    const known = await collectionFields(signal);
    const fields = FACETS.filter((f) => f in known);
    if (!fields.length) { facetsSection.hidden = true; return; }
    const body = { fields, top: 12 };
    if (where) body.where = where;
    if (includeRetracted) body.include_retracted = true;
    const counted = await (await postJson("v1/facets", body, signal)).json();
    const tables = fields.map((field) => {
      const inHits = hitCounts(hits, field);
      const rows = (counted.facets[field] || []).map(({ value, count }) => {
        const choose = el("button", { type: "button", class: "facet-value", text: String(value),
          "aria-label": `filter by ${field} ${value}` });
        choose.addEventListener("click", () => {
          const clause = `${field} == ${literal(value)}`;
          whereInput.value = whereInput.value.trim() ? `(${whereInput.value.trim()}) and ${clause}` : clause;
          form.requestSubmit();
        });
        return el("tr", {}, [el("td", {}, [choose]), el("td", { class: "count", text: String(count) }),
          el("td", { class: "count", text: String(inHits.get(value) || 0) })]);
      });
      return el("table", { class: "facet" }, [
        el("caption", { text: `By ${field.replace("_", " ")} (${counted.documents} documents)` }),
        el("thead", {}, [el("tr", {}, [el("th", { scope: "col", text: field }),
          el("th", { scope: "col", text: "collection" }), el("th", { scope: "col", text: "hits" })])]),
        el("tbody", {}, rows)]);
    });
    facetsBox.replaceChildren(...tables);
    facetsSection.hidden = false;
  }

  function showHits(hits, stems) {
    hitsList.replaceChildren(...hits.map((hit, i) => hitItem(hit, i + 1, stems)));
    hitsSection.hidden = false;
  }

  // The shown hit holding `hit` (by chunk id); an evidence hit the search did not show is added to the list.
  function shownPosition(hit, stems) {
    const items = Array.from(hitsList.children);
    const found = items.findIndex((item) => item.dataset.chunk === hit.chunk_id);
    if (found >= 0) return found + 1;
    hitsList.append(hitItem(hit, items.length + 1, stems, "evidence of the answer"));
    hitsSection.hidden = false;
    return items.length + 1;
  }

  // One row of the timings table; its bar is `ms` against the whole search (`totalMs`), at most 6rem long.
  function timingRow(name, ran, ms, note, totalMs) {
    const bar = el("span", { class: "bar", "aria-hidden": "true" });
    bar.style.width = `${(6 * Math.min(1, Math.max(0, ms) / Math.max(totalMs, 1e-3))).toFixed(2)}rem`;  // CSSOM: CSP allows it
    return el("tr", {}, [el("th", { scope: "row", text: name }), el("td", { text: ran }),
      el("td", { class: "ms" }, [`${ms.toFixed(1)}`, bar]), el("td", { class: "why", text: note || "" })]);
  }

  // Stage reasons come only when the search was asked with "explain" (the "Why each stage" box).
  function showSearchTimings(result, explain) {
    const stages = result.stages || [];
    timings.classList.toggle("lean", !explain);
    const total = Number((result.timings_ms && result.timings_ms.total) || 0);
    const rows = stages.map((s) => timingRow(
      s.name, s.cut ? "cut" : (s.ran ? "yes" : "no"), Number(s.elapsed_ms || 0), s.reason, total));
    rows.push(timingRow("search total", "yes", total, "", total));
    timingsBody.replaceChildren(...rows);
    timingsSection.hidden = false;
  }

  function showAnswerTimings(timings) {
    const total = Number(timings.total || 0);
    for (const name of ["retrieve", "generate", "verify", "total"]) {
      if (typeof timings[name] === "number") {
        timingsBody.append(timingRow(`answer ${name}`, "yes", timings[name], "", total));
      }
    }
  }

  // ------------------------------------------------------------------ the answer

  // `text` with each citation number as a link to its hit; numbers naming no evidence stay plain, marked.
  function renderAnswer(text, evidence, stems, unsupported) {
    const out = [];
    let last = 0;
    for (const m of text.matchAll(CITE)) {
      if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
      const mark = el("span", { class: "cites" }, ["["]);
      const parts = m[1].split(/(\s*(?:[-\u2013,;]|and)\s*)/);
      for (const part of parts) {
        const n = Number(part);
        if (!/^\d+$/.test(part)) { mark.append(part); continue; }
        const hit = evidence[n - 1];
        if (!hit) {
          mark.append(el("span", { class: "cite invalid", title: `no source [${n}] was given`, text: part }));
          continue;
        }
        const position = shownPosition(hit, stems);
        const about = describe(hit);
        const link = el("a", { class: "cite", href: `#hit-${position}`, "data-source": String(n),
          "aria-label": `source ${n}: ${hit.title || hit.document_id}${about.length ? ` (${about.join("; ")})` : ""}`,
          title: about.join("; "), text: part });
        if (unsupported.has(n)) link.classList.add("unsupported");
        mark.append(link);
      }
      mark.append("]");
      out.push(mark);
      last = m.index + m[0].length;
    }
    if (last < text.length) out.push(document.createTextNode(text.slice(last)));
    answerBox.replaceChildren(...out);
  }

  // The sources the answer cites, in number order, each a link to its hit with what a reader weighs it by: its
  // document's year and publication types, as the hits show them (nothing where the collection records none).
  function showSources(citations, evidence, stems) {
    const cited = new Set();
    for (const c of citations || []) {
      for (const n of c.sources || []) if (evidence[n - 1] && !(c.invalid_sources || []).includes(n)) cited.add(n);
    }
    const items = [...cited].sort((a, b) => a - b).map((n) => {
      const hit = evidence[n - 1];
      const link = el("a", { class: "source", href: `#hit-${shownPosition(hit, stems)}`, "data-source": String(n),
        text: `[${n}] ${hit.title || hit.document_id}` });
      return el("li", {}, [link, ...describe(hit).map((text) => [" · ", el("span", { class: "doc-meta", text })]).flat()]);
    });
    sourcesList.replaceChildren(...items);
    sourcesList.hidden = !items.length;
  }

  // The server-sent events of one answer stream, as {event, data} objects.
  async function* events(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      let cut;
      while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
        let event = "message", data = "";
        for (const line of block.split(/\r?\n/)) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (data) yield { event, data: JSON.parse(data) };
      }
      if (done) return;
    }
  }

  // `filters`: the search's own filter options (where, include_retracted), for the answer's search.
  async function streamAnswer(text, k, filters, stems, signal) {
    answerSection.hidden = false;
    answerBox.replaceChildren();
    sourcesList.replaceChildren();
    sourcesList.hidden = true;
    answerNote.textContent = "";
    answerBox.setAttribute("aria-busy", "true");  // announced once, when the whole answer is there
    let evidence = [], written = "";
    try {
      const response = await postJson("v1/answer", { question: text, k, stream: true, ...filters }, signal);
      for await (const { event, data } of events(response)) {
        if (event === "evidence") {
          evidence = data.hits || [];
        } else if (event === "delta") {
          if (!written) performance.mark("medretrieve:first-words");
          written += data.text || "";
          renderAnswer(written, evidence, stems, new Set());
        } else if (event === "answer") {
          evidence = data.evidence && data.evidence.length ? data.evidence : evidence;
          const unsupported = new Set();
          for (const c of data.citations || []) if (!c.supported) for (const n of c.sources) unsupported.add(n);
          renderAnswer(String(data.text || ""), evidence, stems, unsupported);
          showSources(data.citations, evidence, stems);
          answerNote.textContent = data.abstained ? `No answer: ${data.abstain_reason}` :
            (data.error ? `The answer failed: ${data.error}` :
              (unsupported.size ? "Dotted citations are not supported by their source." : ""));
          showAnswerTimings(data.timings || {});
          return data;
        } else if (event === "error") {
          throw new Error(data.error ? data.error.message : "the answer failed");
        }
      }
      throw new Error("the answer stream ended early");
    } finally {
      answerBox.setAttribute("aria-busy", "false");
    }
  }

  // ------------------------------------------------------------------ one question

  async function ask(text, k, explain, where, includeRetracted) {
    if (running) running.abort();
    const controller = new AbortController();
    running = controller;
    const searchTimer = setTimeout(() => controller.abort(new Error("the search took too long")), SEARCH_TIMEOUT_MS);
    document.body.classList.add("busy");
    for (const section of [answerSection, hitsSection, timingsSection, facetsSection]) section.hidden = true;  // nothing stale
    performance.clearMarks();
    performance.mark("medretrieve:asked");  // marks for DevTools and bench/page.py: asked, hits, first-words, answered
    say("Searching\u2026");
    try {
      const filters = {};  // the answer's search takes them as the search does
      if (where) filters.where = where;
      if (includeRetracted) filters.include_retracted = true;
      const scope = where || includeRetracted ? " (filtered)" : "";
      const result = await (await postJson("v1/search", { question: text, k, explain, ...filters },
        controller.signal)).json();
      clearTimeout(searchTimer);
      const stems = queryStems(text, result.expansions);
      showHits(result.hits || [], stems);
      showSearchTimings(result, explain);
      showFacets(result.hits || [], where, includeRetracted, controller.signal).catch(() => {
        facetsSection.hidden = true;  // the counts are a view: a search without them is still whole
      });
      performance.mark("medretrieve:hits");
      say(`${(result.hits || []).length} hits in ${Number(result.timings_ms.total).toFixed(0)} ms${scope}; answering\u2026`);
      const answerTimer = setTimeout(() => controller.abort(new Error("the answer took too long")), ANSWER_TIMEOUT_MS);
      try {
        const answer = await streamAnswer(text, k, filters, stems, controller.signal);
        performance.mark("medretrieve:answered");
        // the search's own time, as the stage table shows it; the answer (its own search included) apart
        say(`${(result.hits || []).length} hits in ${Number(result.timings_ms.total).toFixed(0)} ms${scope}; answered in ` +
          `${Number(answer.timings.total || 0).toFixed(0)} ms more`);
      } catch (error) {
        if (controller.signal.aborted && running !== controller) return;  // a newer question replaced this one
        answerNote.textContent = `No answer: ${error.message}`;
        say(`${(result.hits || []).length} hits; no answer (${error.message})`, true);
      } finally {
        clearTimeout(answerTimer);
      }
    } catch (error) {
      if (controller.signal.aborted && running !== controller) return;
      const reason = controller.signal.aborted && controller.signal.reason ? controller.signal.reason.message : error.message;
      if (error.status === 401) askForKey(`Search failed: ${reason}. Enter the server's API key below.`);
      else say(`Search failed: ${reason}`, true);
    } finally {
      clearTimeout(searchTimer);
      if (running === controller) {
        running = null;
        document.body.classList.remove("busy");
      }
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = question.value.trim();
    const k = Number(kInput.value);
    if (!text) { say("Type a question first.", true); question.focus(); return; }
    if (!Number.isInteger(k) || k < 1 || k > 100) { say("Hits must be a whole number from 1 to 100.", true); kInput.focus(); return; }
    ask(text, k, explainBox.checked, whereInput.value.trim(), retractedBox.checked);
  });

  keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = keyInput.value.trim();
    if (!key) { say("Type the API key first.", true); keyInput.focus(); return; }
    try { sessionStorage.setItem(KEY_STORE, key); } catch (_) { say("This browser keeps no key (storage is off).", true); return; }
    keyInput.value = "";
    keyForm.hidden = true;
    question.focus();
    if (question.value.trim()) form.requestSubmit();  // ask again, with the key
    else say("Key kept for this tab.");
  });

  keyForget.addEventListener("click", () => {
    try { sessionStorage.removeItem(KEY_STORE); } catch (_) { /* nothing kept */ }
    keyInput.value = "";
    say("Key forgotten.");
    keyInput.focus();
  });

  // A citation link, or a cited source's, takes the keyboard focus to its hit (not only the scroll position).
  function focusHit(event) {
    const link = event.target.closest("a.cite, a.source");
    if (!link) return;
    const target = document.querySelector(link.getAttribute("href"));
    if (target) {
      event.preventDefault();
      history.replaceState(null, "", link.getAttribute("href"));
      target.focus();
    }
  }
  answerBox.addEventListener("click", focusHit);
  sourcesList.addEventListener("click", focusHit);
})();
