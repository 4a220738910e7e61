// The console: every datum comes from the API, with the key typed in (kept for this tab only). What a key may
// see is the API's to decide: an admin sees everything, a teach key its own documents.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const PENDING = ["queued", "training", "evaluating"];
const keyInput = $("#key");
keyInput.value = sessionStorage.getItem("ckl-key") || "";
keyInput.addEventListener("change", () => { sessionStorage.setItem("ckl-key", keyInput.value); refresh(); });

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  if (keyInput.value) h.Authorization = `Bearer ${keyInput.value}`;
  return h;
}

async function api(path, options = {}) {
  const response = await fetch(path, { method: options.method || "GET", headers: headers(options.body !== undefined),
                                       body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  const body = await response.json().catch(() => ({}));
  if (!response.ok && !(options.allow || []).includes(response.status)) {
    const error = new Error((body.error && body.error.message) || `${response.status} on ${path}`);
    error.status = response.status;
    error.body = body;
    throw error;
  }
  return { status: response.status, body };
}

function show(error) {
  const box = $("#error");
  box.textContent = error ? error.message : "";
  box.hidden = !error;
}

async function guarded(work) {
  try { show(null); return await work(); } catch (error) { show(error); }
}

function cell(row, content) {
  const td = document.createElement("td");
  if (content instanceof Node) td.append(content); else td.textContent = content ?? "";
  row.append(td);
  return td;
}

function button(label, onClick) {
  const b = document.createElement("button");
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

const percent = (value) => (value === null || value === undefined ? "" : `${Math.round(value * 100)}%`);

// -- versions -------------------------------------------------------------------------------------------------
function drawCurves(rows) {
  const svg = $("#curves"), [w, h, pad] = [720, 240, 30];
  const x = (i) => pad + (i * (w - 2 * pad)) / Math.max(rows.length - 1, 1);
  const y = (v) => h - pad - v * (h - 2 * pad);
  const parts = [0, 0.5, 1].map((t) => `<line x1="${pad}" x2="${w - pad}" y1="${y(t)}" y2="${y(t)}" stroke="#e5e7eb"/>` +
    `<text x="2" y="${y(t) + 4}" font-size="10">${t}</text>`);
  for (const [field, colour] of [["nf_acc", "#2563eb"], ["learned_acc", "#16a34a"], ["general_drift", "#dc2626"]]) {
    const points = rows.map((r, i) => (r[field] === null || r[field] === undefined ? null : [x(i), y(r[field])]));
    const path = points.filter(Boolean).map(([px, py], i) => `${i ? "L" : "M"}${px},${py}`).join(" ");
    parts.push(`<path d="${path}" fill="none" stroke="${colour}" stroke-width="2" class="${field}"/>`);
    points.filter(Boolean).forEach(([px, py]) => parts.push(`<circle cx="${px}" cy="${py}" r="3" fill="${colour}"/>`));
  }
  rows.forEach((r, i) => parts.push(`<text x="${x(i) - 6}" y="${h - 8}" font-size="10">v${r.version}</text>`));
  svg.innerHTML = parts.join("");
}

// The history comes a page at a time (the newest first); `pageBefore` asks for the page shown (null: the newest),
// `newerPages` holds the `before` of each page shown before it, the way back.
let pageBefore = null, olderBefore = null, loads = 0;
const newerPages = [];

// Draw the page `before` asks for; `then` (the way back updated) runs once it is drawn. False: not drawn, a later
// load being on its way (a page asked for since: an answer to this one is stale).
async function loadVersions(before = pageBefore, then = () => {}) {
  const load = ++loads;
  const { body } = await api(before === null ? "/health/forgetting" : `/health/forgetting?before=${before}`);
  if (load !== loads) return false;
  pageBefore = before;
  then();
  olderBefore = body.history_before;
  $("#older").disabled = olderBefore === null;
  $("#newer").disabled = newerPages.length === 0;
  $("#current").textContent = `current: ${body.current_version}`;
  drawCurves(body.history);
  const rows = $("#version-rows");
  rows.replaceChildren();
  for (const v of body.history) {
    const tr = document.createElement("tr");
    tr.dataset.version = v.version;
    if (v.version === body.current_version) tr.className = "current";
    [v.version, v.parent, v.method, v.documents.join(", "), percent(v.nf_acc), percent(v.learned_acc),
     percent(v.must_keep_acc), percent(v.neighbours_acc), percent(v.general_drift), v.replaces || "", v.removes || ""]
      .forEach((value) => cell(tr, value));
    cell(tr, v.version === body.current_version ? "current" : button("Activate", () => guarded(() => activate(v.version))));
    rows.append(tr);
  }
}

async function activate(version) {
  const answer = await api(`/versions/${version}/activate`, { method: "POST", body: {}, allow: [409] });
  if (answer.status === 409) {  // it would bring removed documents back: say which, and ask
    if (!confirm(`${answer.body.error.message}\n\nActivate version ${version} anyway?`)) return;
    await api(`/versions/${version}/activate`, { method: "POST", body: { force: true } });
  }
  await loadVersions();
}

$("#older").addEventListener("click", () => guarded(async () => {
  const shown = pageBefore;
  await loadVersions(olderBefore, () => newerPages.push(shown));
}));
$("#newer").addEventListener("click", () => guarded(async () => {
  await loadVersions(newerPages.at(-1) ?? null, () => newerPages.pop());
}));

$("#png").addEventListener("click", (event) => guarded(async () => {
  event.preventDefault();
  const response = await fetch("/health/forgetting.png", { headers: headers(false) });
  if (!response.ok) throw new Error(`${response.status} on /health/forgetting.png`);
  window.open(URL.createObjectURL(await response.blob()));
}));

// -- documents ------------------------------------------------------------------------------------------------
let shown = null, polling = null;

const SHOWN_DOCUMENTS = 500;

async function loadDocuments() {  // the newest SHOWN_DOCUMENTS, newest first (the list is oldest first)
  const { body: count } = await api("/documents?limit=1");
  const offset = Math.max(count.total - SHOWN_DOCUMENTS, 0);
  const { body } = await api(`/documents?limit=${SHOWN_DOCUMENTS}&offset=${offset}`);
  const rows = $("#document-rows");
  rows.replaceChildren();
  for (const d of body.items.slice().reverse()) {
    const tr = document.createElement("tr");
    tr.dataset.id = d.document_id;
    [d.document_id, d.status, d.method, d.version, new Date(d.created_at * 1000).toLocaleString()]
      .forEach((value) => cell(tr, value));
    tr.addEventListener("click", () => guarded(() => showDocument(d.document_id)));
    rows.append(tr);
  }
}

function heat(tokens) {
  const box = $("#doc-heat");
  box.replaceChildren();
  const top = Math.max(...tokens.map(([, w]) => w), 1e-9);
  for (const [text, weight] of tokens) {
    const span = document.createElement("span");
    span.textContent = text;
    span.title = weight;
    span.style.background = `rgba(234, 88, 12, ${(weight / top).toFixed(3)})`;
    box.append(span);
  }
}

async function showDocument(id) {
  clearTimeout(polling);
  shown = id;
  const { body: d } = await api(`/documents/${id}`);
  $("#document").hidden = false;
  $("#doc-id").textContent = id;
  $("#doc-status").textContent = d.status;
  const progress = d.progress || { step: 0, steps: 0 };
  $("#doc-progress").max = Math.max(progress.steps, 1);
  $("#doc-progress").value = d.status === "committed" ? $("#doc-progress").max : progress.step;
  $("#doc-steps").textContent = `${progress.step} / ${progress.steps} steps`;
  const gate = d.gate || {};
  $("#doc-gate").textContent = gate.reason ? `${gate.accepted ? "accepted" : "rejected"}: ${gate.reason}` : "";
  $("#doc-scores").textContent = d.scores ? JSON.stringify(d.scores, null, 1) : "";
  $("#doc-key").textContent = d.routing_key ? Object.entries(d.routing_key).map(([t, w]) => `${t} (${w})`).join(", ") : "";
  const probes = (d.probes && d.probes.length ? d.probes : d.auto_probes || []);
  $("#doc-probes").textContent = probes.map((p) => `${p.prompt} → ${p.answer}`).join("\n") +
    (d.probes && d.probes.length ? "" : probes.length ? "\n(made by the server)" : "");
  heat(d.token_weights || []);
  $("#doc-remove").hidden = d.status !== "committed" || Boolean(d.removes) || Boolean(d.removed_in_version);
  if (PENDING.includes(d.status)) polling = setTimeout(() => guarded(() => showDocument(id)), 1000);
  else if (!$("#documents").hidden) await loadDocuments();
}

$("#doc-remove").addEventListener("click", () => guarded(async () => {
  if (!confirm(`Remove document ${shown}? A new version without it is made and gated.`)) return;
  const { body } = await api(`/documents/${shown}`, { method: "DELETE" });
  await showDocument(body.document_id);
}));

// -- ask ------------------------------------------------------------------------------------------------------
async function loadAskChoices() {
  const { body } = await api("/v1/models");
  const options = [["auto", "auto: the current version, routed"], ["off", "off: the base model"]]
    .concat(body.data.filter((m) => m.id !== "ckl").map((m) => [m.id, `version ${m.id.slice(5)}`]));
  document.querySelectorAll(".side .who").forEach((select, i) => {
    const before = select.value;
    select.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
    select.value = before || (i === 0 ? "off" : "auto");
  });
}

function clear(side) {
  $(".answer", side).textContent = "";
  $(".used", side).replaceChildren();
}

async function askSide(side) {
  const prompt = $("#prompt").value, who = $(".who", side).value;
  clear(side);
  let text, knowledge;
  if (who === "auto" || who === "off") {
    const { body } = await api("/generate", { method: "POST", body: { prompt, max_new_tokens: 32, knowledge: who } });
    [text, knowledge] = [body.text, body.knowledge];
  } else {
    const { body } = await api("/v1/completions", { method: "POST",
      body: { model: who, prompt, max_tokens: 32, temperature: 0 } });
    [text, knowledge] = [body.choices[0].text, body.knowledge];
  }
  $(".answer", side).textContent = text;
  const used = $(".used", side);
  used.replaceChildren(...(knowledge.used.length ? knowledge.used : [null]).map((u) => {
    const li = document.createElement("li");
    li.textContent = !u ? `version ${knowledge.version}: the base model's weights only`
      : u.whole_version ? `version ${knowledge.version}: all of ${u.method}'s state`
      : `version ${knowledge.version}: document ${u.document_id} (${u.method}, score ${u.score}, ${u.terms.join(", ")})`;
    return li;
  }));
}

document.querySelectorAll(".side").forEach((side) =>
  $(".go", side).addEventListener("click", () => guarded(() => askSide(side))));
$("#ask-both").addEventListener("click", () => guarded(async () => {
  const sides = [...document.querySelectorAll(".side")];
  sides.forEach(clear);
  for (const side of sides) await askSide(side);
}));

// -- teach ----------------------------------------------------------------------------------------------------
function addProbe() {
  const row = document.createElement("div");
  row.className = "probe";
  row.innerHTML = '<input class="p" placeholder="prompt"> <input class="a" placeholder="answer">';
  $("#probes").append(row);
}
$("#add-probe").addEventListener("click", addProbe);

function teachBody() {
  const probes = [...document.querySelectorAll(".probe")]
    .map((row) => ({ prompt: $(".p", row).value.trim(), answer: $(".a", row).value.trim() }))
    .filter((p) => p.prompt && p.answer);
  return { text: $("#text").value, probes, method: $("#method").value };
}

// What the server would make of the document, nothing sent to learn: its refusal, or the auto-probes it would check.
$("#preview").addEventListener("click", () => guarded(async () => {
  $("#previewed").textContent = "";
  const body = teachBody();
  const { body: seen } = await api("/documents/preview", { method: "POST", body });
  const made = seen.auto_probes;
  $("#previewed").textContent = body.probes.length ? `checked by your ${body.probes.length} probe(s)`
    : made === null ? "no auto-probes: this model has no Train-Attention checkpoint to make them with"
    : made.length ? `auto-probes:\n${made.map((p) => `${p.prompt} → ${p.answer}`).join("\n")}`
    : "no auto-probes: nothing in the text to ask about; add a probe";
  $("#previewed").textContent += `\n(${seen.cost.tokens} tokens, ${seen.cost.documents_ahead} documents ahead)`;
}));

$("#send").addEventListener("click", () => guarded(async () => {
  const { body } = await api("/documents", { method: "POST", body: teachBody() });
  $("#sent").textContent = `document ${body.document_id}: ${body.status}` +
    (body.cost ? ` (${body.cost.tokens} tokens, ${body.cost.documents_ahead} ahead, at most ${body.cost.train_s_at_most} s of training)` : "");
  select("documents");
  await showDocument(body.document_id);
}));

// -- tabs -----------------------------------------------------------------------------------------------------
const LOADERS = { versions: loadVersions, documents: loadDocuments, ask: loadAskChoices, teach: async () => {} };

function select(tab) {
  document.querySelectorAll("nav button").forEach((b) => b.classList.toggle("active", b.dataset.tab === tab));
  document.querySelectorAll(".tab").forEach((s) => { s.hidden = s.id !== tab; });
  return guarded(async () => {
    try {
      await LOADERS[tab]();
    } catch (error) {  // versions are an admin's: a teach key's console opens on its documents
      if (tab === "versions" && error.status === 403) return select("documents");
      throw error;
    }
  });
}

function refresh() {
  return select($("nav button.active").dataset.tab);
}

document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => select(b.dataset.tab)));
addProbe();
refresh();
