// The refactx page: the served indexes, an entity browser and a question asked with and
// without an index, all through the server's own API (same origin; docs/server-api.md).
//
// Safe by construction: every label, fact and message reaches the document as text
// (createElement, textContent, append of strings), never as markup; the only links are
// built here from ids that match Wikidata's id patterns.
"use strict";

(() => {
  const KEY_STORE = "refactx.apiKey";
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  // what the page shows, kept in the URL's hash so a link reopens it
  const state = { index: null, entity: null, relation: null, q: "" };
  let indexes = [];  // /v1/indexes' data

  // ------------------------------------------------------------------ the document
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "className") node.className = value;
      else if (name === "onclick") node.addEventListener("click", value);
      else if (name === "href") throw new Error("links are made by wikidataLink only");
      else node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(typeof child === "object" ? child : String(child));
    }
    return node;
  }

  const number = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : n === null || n === undefined ? "—" : String(n));

  // a Wikidata id (item Q…, property P…, lexeme L…) as a link to its page; anything else as text
  function wikidataLink(id) {
    const page = /^Q[1-9][0-9]*$/.test(id) ? id : /^P[1-9][0-9]*$/.test(id) ? "Property:" + id
      : /^L[1-9][0-9]*$/.test(id) ? "Lexeme:" + id : null;
    if (page === null) return document.createTextNode(id);
    const a = el("a", { target: "_blank", rel: "noopener noreferrer", className: "wikidata" }, id);
    a.href = "https://www.wikidata.org/wiki/" + page;
    return a;
  }

  // "<s> <p> <o> ." as its three labels (null when the text is not of that shape)
  function parseFact(text) {
    const t = text.trim();
    if (!t.startsWith("<") || !t.endsWith("> .")) return null;
    const parts = t.slice(1, -3).split("> <");
    return parts.length === 3 ? { s: parts[0], p: parts[1], o: parts[2] } : null;
  }

  // ------------------------------------------------------------------ messages
  function showMessage(text, kind = "error") {
    const box = $("messages");
    for (const old of box.children) if (old.dataset.text === text) return;  // once
    const close = el("button", { type: "button", className: "close", "aria-label": "dismiss" }, "×");
    const message = el("div", { className: "message " + kind }, el("span", {}, text), close);
    message.dataset.text = text;
    close.addEventListener("click", () => message.remove());
    box.append(message);
  }

  class ApiError extends Error {
    constructor(status, type, message) {
      super(message);
      this.status = status;
      this.type = type;
    }
    toString() { return `${this.status || "no answer"} ${this.type}: ${this.message}`; }
  }

  function report(err) {
    if (err && err.name === "AbortError") return;
    if (err instanceof ApiError && err.status === 401) return;  // askForKey said it
    showMessage(String(err));
  }

  // ------------------------------------------------------------------ the API
  // a refusal to retry at once (429, or 503 with "Retry-After: 1": its work pools or in-flight
  // places are full, docs/server-api.md) is retried a second later, a few times, before it is shown
  const RETRIES = 3;
  const busy = (response) => (response.status === 429 || response.status === 503)
    && response.headers.get("Retry-After") === "1";

  async function api(path, options = {}) {
    const headers = new Headers(options.headers || {});
    const key = sessionStorage.getItem(KEY_STORE);
    if (key) headers.set("Authorization", "Bearer " + key);
    let response;
    for (let attempt = 0; ; attempt++) {
      try {
        response = await fetch(path, { ...options, headers, credentials: "omit" });
      } catch (err) {
        if (err.name === "AbortError") throw err;
        throw new ApiError(0, "network_error", "the server does not answer (" + err.message + ")");
      }
      if (attempt >= RETRIES || !busy(response)) break;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    if (response.ok) return response;
    let type = "http_error", message = response.statusText || "request failed";
    try {
      const body = await response.json();
      if (body && body.error) ({ type, message } = body.error);
    } catch (_) { /* not the server's error body: the status says it */ }
    const err = new ApiError(response.status, String(type), String(message));
    if (response.status === 401) askForKey(err, key);
    throw err;
  }

  const getJson = async (path, signal) => (await api(path, { signal })).json();
  const indexPath = (what) => `/v1/indexes/${enc(state.index)}/${what}`;

  function askForKey(err, sent) {
    $("key-box").hidden = false;
    $("key-why").textContent = sent
      ? "The server refused this API key. Type the right one; it is kept in this tab's session only."
      : "This server requires an API key. It is kept in this tab's session only.";
    showMessage(String(err));
    $("key-input").focus();
  }

  function useKey() {
    const key = $("key-input").value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORE, key);
    $("key-input").value = "";
    $("key-box").hidden = true;
    $("messages").replaceChildren();
    start();
  }

  // ------------------------------------------------------------------ share links
  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    state.index = params.get("index") || state.index;
    state.entity = params.get("entity");
    state.relation = params.get("relation");
    state.q = params.get("q") || "";
  }

  function writeHash() {
    const params = new URLSearchParams();
    for (const name of ["index", "entity", "relation", "q"]) if (state[name]) params.set(name, state[name]);
    history.replaceState(null, "", "#" + params.toString());
  }

  function share() {
    writeHash();
    const field = $("share-url");
    field.hidden = false;
    field.value = location.href;
    field.select();
    if (navigator.clipboard) navigator.clipboard.writeText(location.href).then(
      () => showMessage("link copied", "info"), () => {});
  }

  // ------------------------------------------------------------------ indexes
  async function loadReady() {
    try {
      const response = await fetch("/ready", { credentials: "omit" });
      const body = await response.json();
      $("ready").textContent = response.ok ? "ready" : "not ready: " + JSON.stringify(body.indexes || body.status);
      $("ready").className = response.ok ? "ok" : "bad";
    } catch (err) {
      $("ready").textContent = "the server does not answer";
      $("ready").className = "bad";
    }
  }

  function renderIndexes() {
    const columns = [];
    for (const row of indexes) for (const k of Object.keys(row)) if (!columns.includes(k)) columns.push(k);
    const table = $("indexes");
    const head = el("tr", {}, ...columns.map((c) => el("th", {}, c.replaceAll("_", " "))));
    const rows = indexes.map((row) => {
      const tr = el("tr", { className: row.name === state.index ? "selected" : "" },
        ...columns.map((c) => {
          const v = row[c];
          return el("td", { className: typeof v === "number" ? "num" : "" },
            v !== null && typeof v === "object" ? JSON.stringify(v) : number(v));
        }));
      tr.addEventListener("click", () => selectIndex(row.name));
      return tr;
    });
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
    const select = $("index-select");
    select.replaceChildren(...indexes.map((row) => el("option", { value: row.name }, row.name)));
    select.value = state.index;
    for (const span of document.querySelectorAll(".index-name")) span.textContent = state.index;
  }

  function selectIndex(name, keep = false) {
    if (!indexes.some((row) => row.name === name)) {
      showMessage(`no index ${JSON.stringify(name)} is served; served: ${indexes.map((r) => r.name).join(", ")}`);
      name = indexes.length ? indexes[0].name : null;
    }
    const changed = name !== state.index;
    state.index = name;
    if (changed && !keep) {
      state.entity = state.relation = null;
      $("entity").replaceChildren();
      $("entity-input").value = "";
    }
    writeHash();
    renderIndexes();
    if (changed || keep) loadExamples();
  }

  // ------------------------------------------------------------------ examples
  async function loadExamples() {
    const box = $("examples");
    box.replaceChildren("…");
    try {
      const page = await getJson(indexPath("facts?limit=100"));
      const seen = new Set();
      const picks = [];
      for (const text of page.data) {
        const f = parseFact(text);
        // a question that reads well: a short subject, a relation that is a noun ("capital",
        // not "shares border with")
        if (!f || seen.has(f.s) || seen.has(f.p) || f.s.includes("(") || f.s.length > 40
            || /description|\b(with|of|in|by|to|from|for|on|at|as)$/.test(f.p)) continue;
        seen.add(f.s);
        seen.add(f.p);
        picks.push(f);
        if (picks.length === 4) break;
      }
      box.replaceChildren(...picks.map((f) => {
        const question = `What is the ${f.p} of ${f.s}?`;
        return el("button", { type: "button", className: "example", onclick: () => {
          $("question").value = question;
          browse(f.s, f.p);
          ask(question);
        } }, question);
      }));
      if (!picks.length) box.replaceChildren("no facts of the shape <s> <p> <o> . in this index's first page");
    } catch (err) {
      box.replaceChildren("—");
      report(err);
    }
  }

  // ------------------------------------------------------------------ type-ahead
  let suggestTimer = null, suggestAbort = null;

  function onType() {
    clearTimeout(suggestTimer);
    suggestTimer = setTimeout(suggest, 120);
  }

  async function suggest() {
    const q = $("entity-input").value.trim();
    const list = $("suggestions");
    if (suggestAbort) suggestAbort.abort();
    if (!q) { list.replaceChildren(); return; }
    suggestAbort = new AbortController();
    try {
      const found = await getJson(indexPath(`entities?q=${enc(q)}&limit=10`), suggestAbort.signal);
      list.replaceChildren(...found.data.map((x) => el("li", { role: "option" },
        el("button", { type: "button", onclick: () => { list.replaceChildren(); browse(x.label); } },
          el("span", { className: "label" }, x.label), el("span", { className: "count" }, number(x.facts))))));
      if (!found.data.length) list.replaceChildren(el("li", { className: "muted" }, "no subject starts with this"));
      list.dataset.for = q;
    } catch (err) {
      report(err);
    }
  }

  // ------------------------------------------------------------------ entity browser
  let browseAbort = null;

  async function browse(entity, relation = null) {
    if (browseAbort) browseAbort.abort();
    browseAbort = new AbortController();
    const signal = browseAbort.signal;
    state.entity = entity;
    state.relation = relation;
    writeHash();
    $("entity-input").value = entity;
    $("suggestions").replaceChildren();
    const box = $("entity");
    const relations = el("ul", { className: "relations" });
    const objects = el("div", { className: "objects" });
    const facts = el("div", { className: "facts-box" });
    box.replaceChildren(el("h3", { className: "entity-label" }, entity), el("h4", {}, "relations"), relations, objects,
      facts);
    try {
      const found = await getJson(indexPath(`relations?entity=${enc(entity)}&limit=100`), signal);
      if (!found.data.length) relations.replaceChildren(el("li", { className: "muted" }, "no facts with this subject"));
      else relations.replaceChildren(...found.data.map((r) => el("li", {},
        el("button", { type: "button", className: r.label === relation ? "selected" : "",
          onclick: () => browse(entity, r.label) }, el("span", { className: "label" }, r.label),
          el("span", { className: "count" }, number(r.facts))))));
      if (relation) await showObjects(objects, entity, relation, signal);
      await showFacts(facts, entity, relation, 0, signal);
    } catch (err) {
      report(err);
    }
  }

  async function showObjects(box, entity, relation, signal) {
    const found = await getJson(indexPath(`objects?entity=${enc(entity)}&relation=${enc(relation)}&limit=100`), signal);
    box.replaceChildren(el("h4", {}, relation), el("ul", {}, ...found.data.map((o) => el("li", {},
      el("button", { type: "button", title: "browse on", onclick: () => browse(o.label) },
        el("span", { className: "label" }, o.label), el("span", { className: "count" }, number(o.facts)))))));
  }

  const FACTS_PAGE = 25;

  async function showFacts(box, entity, relation, offset, signal) {
    const prefix = relation ? `<${entity}> <${relation}> <` : `<${entity}> <`;
    const page = await getJson(indexPath(`facts?prefix=${enc(prefix)}&offset=${offset}&limit=${FACTS_PAGE}`), signal);
    const list = offset ? box.querySelector("ol") : el("ol", { className: "facts", start: 1 });
    if (!offset) box.replaceChildren(el("h4", {}, "facts"), list);
    for (const text of page.data) list.append(el("li", { className: "fact" }, text));
    const more = box.querySelector("button.more");
    if (more) more.remove();
    if (page.data.length === FACTS_PAGE) {
      box.append(el("button", { type: "button", className: "more",
        onclick: () => showFacts(box, entity, relation, offset + FACTS_PAGE).catch(report) }, "more facts"));
    }
  }

  // ------------------------------------------------------------------ ask
  async function ask(question) {
    question = question.trim();
    if (!question) { showMessage("type a question first"); return; }
    if (!state.index) { showMessage("no index is served"); return; }
    state.q = question;
    writeHash();
    const maxTokens = Number($("max-tokens").value) || 64;
    const body = (index, grounded) => ({
      messages: [{ role: "user", content: question }], max_tokens: maxTokens, temperature: 0, stream: true,
      refactx: { index, grounded },
    });
    $("ask").disabled = true;
    try {
      await Promise.all([
        streamInto($("with-index"), body(state.index, $("grounded").checked), state.index),
        streamInto($("without-index"), body(null, false), null),
      ]);
    } finally {
      $("ask").disabled = false;
    }
  }

  function renderReply(pre, text, facts) {
    const byText = new Map((facts || []).map((f) => [f.text.trim(), f]));
    pre.replaceChildren(...text.split("\n").flatMap((line, i) => {
      const m = /^(\s*Fact:)(.*)$/.exec(line);
      let node = line;
      if (m) {
        const f = byText.get(m[2].trim());
        const mark = !facts ? "pending" : f && f.stored ? "stored" : "not-stored";
        node = el("span", { className: "fact-line " + mark }, line);
      }
      return i ? ["\n", node] : [node];
    }));
  }

  async function streamInto(column, body, index) {
    const pre = column.querySelector(".reply");
    const answer = column.querySelector(".answer");
    const list = column.querySelector(".facts");
    pre.replaceChildren();
    answer.replaceChildren();
    list.replaceChildren();
    column.dataset.state = "streaming";
    column.dataset.chunks = 0;
    let text = "", last = null;
    try {
      const response = await api("/v1/chat/completions", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ")) continue;
            const data = line.slice(6);
            if (data === "[DONE]") continue;
            // a fact id is a 64-bit integer, more than a JavaScript number holds exactly: read as text
            const chunk = JSON.parse(data.replace(/"fact_id":\s*(-?\d+)/g, '"fact_id":"$1"'));
            if (chunk.error) throw new ApiError(chunk.error.code, chunk.error.type, chunk.error.message);
            const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
            if (delta && delta.content) {
              text += delta.content;
              column.dataset.chunks = Number(column.dataset.chunks || 0) + 1;
              renderReply(pre, text, null);
            }
            if (chunk.facts) last = chunk;
          }
        }
      }
      if (!last) throw new ApiError(0, "stream_error", "the stream ended before its last chunk");
      const facts = index === null ? await checkFacts(text, state.index) : last.facts;
      renderReply(pre, text, facts);
      renderFacts(list, facts, index);
      renderAnswer(answer, text, last, index);
      column.dataset.state = "done";
    } catch (err) {
      column.dataset.state = "error";
      if (!(err instanceof ApiError && err.status === 401)) answer.replaceChildren(el("p", { className: "error" }, String(err)));
      report(err);
    }
  }

  // the Fact: lines of a reply written without an index, each looked up in ``index`` with the
  // exploration API (the server checks only the facts of a constrained reply)
  async function checkFacts(text, index) {
    const written = text.split("\n").map((l) => /^\s*Fact:(.*)$/.exec(l)).filter(Boolean).map((m) => m[1].trim());
    return Promise.all(written.map(async (fact) => {
      const page = await getJson(`/v1/indexes/${enc(index)}/facts?prefix=${enc(fact)}&limit=2`);
      const stored = page.data.some((t) => t.trim() === fact);
      return { text: fact, stored, complete: true, provenance: null, checkedIn: index };
    }));
  }

  function renderAnswer(box, text, last, index) {
    const lines = text.split("\n").filter((l) => /^\s*Answer:/.test(l));
    const finish = el("p", { className: "muted" }, `${last.choices[0].finish_reason}, ${number(last.usage.completion_tokens)} tokens`
      + (last.refactx && last.refactx.build_id !== null && last.refactx.build_id !== undefined ? `, build ${last.refactx.build_id}` : ""));
    if (!lines.length) { box.replaceChildren(el("p", { className: "muted" }, "no Answer: line"), finish); return; }
    const said = lines[lines.length - 1].replace(/^\s*Answer:\s*/, "").trim();
    const nodes = [el("p", { className: "final" }, el("strong", {}, "Answer: "), said)];
    if (index !== null) {
      const bare = said.replace(/\.$/, "");
      const ground = last.facts.find((f) => f.stored && f.complete && parseFact(f.text) && parseFact(f.text).o === bare);
      nodes.push(ground ? el("p", { className: "grounded" }, "grounded in the stored fact ", el("code", {}, ground.text.trim()))
        : /^I don't know\.?$/.test(said) ? el("p", { className: "muted" }, "the model found no stored fact that answers")
          : el("p", { className: "ungrounded" }, "not the object of a stored fact the reply wrote"));
    }
    box.replaceChildren(...nodes, finish);
  }

  function renderFacts(list, facts, index) {
    if (!facts.length) { list.replaceChildren(el("li", { className: "muted" }, "no Fact: line written")); return; }
    list.replaceChildren(...facts.map((f) => {
      const mark = f.checkedIn ? (f.stored ? "in " : "not in ") + f.checkedIn
        : f.stored ? "stored" : f.complete ? "not stored" : "cut off";
      const kind = f.stored ? "stored" : f.complete ? "not-stored" : "cut-off";
      const details = el("details", { className: "fact" },
        el("summary", {}, el("span", { className: "badge " + kind }, mark), " ",
          el("span", { className: "fact-text" }, f.text.trim())));
      details.addEventListener("toggle", () => {
        if (details.open && !details.dataset.filled) { details.dataset.filled = "1"; fillFact(details, f, index); }
      });
      return el("li", {}, details);
    }));
  }

  function fillFact(details, f, index) {
    const parsed = parseFact(f.text);
    const body = el("div", { className: "fact-body" });
    details.append(body);
    if (f.provenance) {
      const sources = f.provenance.sources || [];
      body.append(el("p", { className: "provenance-head" }, "fact id ", el("code", {}, String(f.provenance.fact_id)),
        sources.length ? `, ${sources.length} source${sources.length > 1 ? "s" : ""}` : ", no source recorded"));
      if (sources.length) {
        body.append(el("table", { className: "provenance" },
          el("tr", {}, ...["kind", "subject", "property", "object or value"].map((h) => el("th", {}, h))),
          ...sources.map((s) => el("tr", {}, el("td", {}, s.kind), el("td", {}, wikidataLink(s.subject)),
            el("td", {}, s.property ? wikidataLink(s.property) : "—"),
            el("td", {}, s.object ? wikidataLink(s.object) : s.value !== null && s.value !== undefined ? s.value : "—")))));
      }
    } else {
      body.append(el("p", { className: "muted" }, f.checkedIn
        ? `written without an index; ${f.stored ? "it is" : "it is not"} a fact of ${f.checkedIn}`
        : f.stored ? "this build records no provenance" : "not a stored fact: no provenance"));
    }
    if (parsed && f.stored) {
      body.append(el("button", { type: "button", onclick: () => browse(parsed.s) }, "browse " + parsed.s));
      narrowing(body, parsed, index === null ? f.checkedIn : index).catch(report);
    }
  }

  // the facts below each label of a fact, from the exploration API: how the constraint narrows
  // (per token counts of allowed tokens are not served by the API)
  async function narrowing(box, f, index) {
    const base = `/v1/indexes/${enc(index)}/`;
    const total = (indexes.find((r) => r.name === index) || {}).facts;
    const [ents, rels, objs] = await Promise.all([
      getJson(base + `entities?q=${enc(f.s)}&limit=50`),
      getJson(base + `relations?entity=${enc(f.s)}&limit=1000`),
      getJson(base + `objects?entity=${enc(f.s)}&relation=${enc(f.p)}&limit=1000`),
    ]);
    const count = (found, label) => (found.data.find((x) => x.label === label) || { facts: 0 }).facts;
    const steps = [["Fact: <", total], [`<${f.s}> <`, count(ents, f.s)], [`<${f.s}> <${f.p}> <`, count(rels, f.p)],
      [`<${f.s}> <${f.p}> <${f.o}> .`, count(objs, f.o)]];
    const top = Math.log10((typeof total === "number" ? total : steps[1][1]) + 1) || 1;
    box.append(el("div", { className: "narrowing" }, el("p", { className: "muted" }, "facts below each step"),
      ...steps.map(([label, n]) => {
        const bar = el("span", { className: "bar" });
        bar.style.width = (typeof n === "number" ? Math.max(1, 100 * Math.log10(n + 1) / top) : 0) + "%";
        return el("div", { className: "step" }, el("span", { className: "step-label" }, label),
          el("span", { className: "track" }, bar), el("span", { className: "count" }, number(n)));
      })));
  }

  // ------------------------------------------------------------------ start
  async function start() {
    readHash();
    loadReady();
    try {
      const [models, found] = await Promise.all([getJson("/v1/models"), getJson("/v1/indexes")]);
      const model = models.data && models.data[0];
      $("model").textContent = model ? "model " + model.id : "";
      indexes = found.data;
    } catch (err) {
      report(err);
      return;
    }
    if (!indexes.length) { showMessage("this server serves no index"); return; }
    selectIndex(state.index || indexes[0].name, true);
    if (state.q) $("question").value = state.q;
    if (state.entity) browse(state.entity, state.relation);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("key-use").addEventListener("click", useKey);
    $("key-input").addEventListener("keydown", (e) => { if (e.key === "Enter") useKey(); });
    $("share").addEventListener("click", share);
    $("index-select").addEventListener("change", (e) => selectIndex(e.target.value));
    $("entity-input").addEventListener("input", onType);
    $("entity-input").addEventListener("keydown", (e) => {
      if (e.key !== "Enter") return;
      e.preventDefault();
      const first = $("suggestions").querySelector("button .label");
      const label = first ? first.textContent : $("entity-input").value.trim();
      if (label) browse(label);
    });
    $("ask-form").addEventListener("submit", (e) => { e.preventDefault(); ask($("question").value); });
    $("question").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); ask($("question").value); }
    });
    window.addEventListener("hashchange", () => {
      const before = state.index;
      readHash();
      if (state.index !== before) selectIndex(state.index, true);
      if (state.q) $("question").value = state.q;
      if (state.entity) browse(state.entity, state.relation);
    });
    start();
  });
})();
