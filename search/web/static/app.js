// wherein web page: talks to the JSON API of `wherein serve` (see /docs). No build step, no libraries.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  q: "", like: [], minProb: 0, under: "", taken: "", camera: "", near: "", kind: "",
  sort: "score", page: 1, perPage: 48,
};
const FILTERS = ["taken", "camera", "near", "kind"];  // text filters kept in the address
let hits = [];        // the hits on this page
let current = -1;     // index in hits of the open detail view
let maskPrompt = "";  // default prompt from the last search
let searchSeq = 0;    // drops answers to superseded searches
let maskSeq = 0;
let whereSeq = 0;     // drops the grid boxes of superseded searches
let moments = [];     // the open video hit's moments ({start, end, time, score, probability})
let moment = -1;      // index in moments of the one shown
let pendingSeek = null;  // a time to seek to once the video's metadata is in

// -- URL <-> state: the address bar holds the search, so back/forward and reload work ----------
function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  state.q = p.get("q") || "";
  state.like = p.getAll("like").map(Number).filter((n) => Number.isInteger(n) && n > 0);
  state.minProb = Number(p.get("p")) || 0;
  state.under = p.get("under") || "";
  for (const f of FILTERS) state[f] = p.get(f) || "";
  state.sort = p.get("sort") || "score";
  state.page = Math.max(1, parseInt(p.get("page") || "1", 10) || 1);
  state.perPage = parseInt(p.get("n") || "48", 10) || 48;
}

function writeHash() {
  const p = new URLSearchParams();
  if (state.q) p.set("q", state.q);
  state.like.forEach((id) => p.append("like", String(id)));
  if (state.minProb) p.set("p", String(state.minProb));
  if (state.under) p.set("under", state.under);
  for (const f of FILTERS) if (state[f]) p.set(f, state[f]);
  if (state.sort !== "score") p.set("sort", state.sort);
  if (state.page > 1) p.set("page", String(state.page));
  if (state.perPage !== 48) p.set("n", String(state.perPage));
  const h = "#" + p.toString();
  if (location.hash !== h) history.pushState(null, "", h);
}

function syncControls() {
  $("q").value = state.q;
  $("min-prob").value = String(state.minProb);
  $("min-prob-out").textContent = state.minProb ? state.minProb.toFixed(2) : "off";
  $("under").value = state.under;
  for (const f of FILTERS) $(f).value = state[f];
  $("sort").value = state.sort;
  $("per-page").value = String(state.perPage);
  renderChips();
}

// -- API ------------------------------------------------------------------------------------
async function api(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (Array.isArray(v)) v.forEach((x) => url.searchParams.append(k, String(x)));
    else if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, String(v));
  }
  const res = await fetch(url);
  let body = null;
  try { body = await res.json(); } catch (_) { /* not JSON */ }
  if (!res.ok) throw new Error((body && body.error) || `${res.status} ${res.statusText}`);
  return body;
}

// -- search ---------------------------------------------------------------------------------
async function runSearch() {
  syncControls();
  const grid = $("grid");
  if (!state.q.trim() && !state.like.length) {
    hits = [];
    grid.replaceChildren(emptyState("Type what you are looking for", "e.g. a red car, beach - people, or open a photo and pick “More like this”."));
    $("pager").hidden = true;
    setMessage("");
    return;
  }
  const seq = ++searchSeq;
  setMessage("Searching…");
  grid.setAttribute("aria-busy", "true");
  try {
    const r = await api("/api/search", {
      q: state.q, like: state.like, min_probability: state.minProb || null,
      under: state.under, taken: state.taken, camera: state.camera, near: state.near, kind: state.kind,
      sort: state.sort, page: state.page, per_page: state.perPage,
    });
    if (seq !== searchSeq) return;
    hits = r.hits;
    maskPrompt = r.mask_prompt || "";
    renderGrid(r);
    showWhere(r.hits, maskPrompt);
  } catch (err) {
    if (seq !== searchSeq) return;
    hits = [];
    grid.replaceChildren();
    $("pager").hidden = true;
    setMessage(err.message, true);
  } finally {
    grid.removeAttribute("aria-busy");
  }
}

function renderGrid(r) {
  const grid = $("grid");
  const frag = document.createDocumentFragment();
  r.hits.forEach((h, i) => frag.appendChild(card(h, i)));
  if (!r.hits.length) frag.appendChild(emptyState("No matches", state.minProb ? "Lower the minimum probability, or change the folder." : "Try other words."));
  grid.replaceChildren(frag);
  const first = (r.page - 1) * r.per_page + 1;
  const last = first + r.hits.length - 1;
  const of = r.total !== null ? ` of ${r.total}` : r.has_more ? "" : ` of ${last}`;
  const said = r.hits.length ? `Hits ${first}–${last}${of} for ${r.query}` : "";
  const warned = (r.warnings || []).join(" ");
  setMessage([said, warned].filter(Boolean).join(" · "), !r.hits.length && !!warned);
  $("pager").hidden = r.page === 1 && !r.has_more;
  $("prev").disabled = r.page <= 1;
  $("next").disabled = !r.has_more;
  $("page-label").textContent = `Page ${r.page}`;
}

// -- where: each thumbnail outlines its mask's box, fetched one at a time in hit order, so the
// first hits' boxes come first and a click on a hit waits for at most one of them ----------
async function showWhere(shown, prompt) {
  const seq = ++whereSeq;
  if (!prompt) return;
  for (const h of shown) {
    if (seq !== whereSeq) return;
    let m = null;
    try { m = await api(`/api/mask/${h.id}`, { prompt, t: frameTime(h) }); } catch (_) { continue; }  // no mask: no box
    if (seq !== whereSeq) return;
    drawWhere(h.id, m);
  }
}

function drawWhere(id, m) {
  const thumb = document.querySelector(`#grid .card[data-id="${id}"] .thumb`);
  const largest = m.bbox && m.bbox.largest;  // [x0, y0, x1, y1], x1/y1 exclusive
  if (!thumb || !largest || !m.width || !m.height) return;
  thumb.querySelector(".where")?.remove();
  thumb.appendChild(outline("where", largest, m.width, m.height, `${m.prompt}: ${pct(m.mask_area)} of the image`));
}

// A box [x0, y0, x1, y1] of a width x height photo, outlined on its thumbnail.
function outline(cls, [x0, y0, x1, y1], width, height, title) {
  // The thumbnail is contained in a square: the photo's long side spans it, centred.
  const side = Math.max(width, height);
  const box = document.createElement("div");
  box.className = cls;
  box.title = title;
  box.style.left = `${(((side - width) / 2 + x0) / side) * 100}%`;
  box.style.top = `${(((side - height) / 2 + y0) / side) * 100}%`;
  box.style.width = `${((x1 - x0) / side) * 100}%`;
  box.style.height = `${((y1 - y0) / side) * 100}%`;
  return box;
}

function card(h, i) {
  const li = document.createElement("li");
  li.className = "card" + (h.exists ? "" : " missing");
  li.tabIndex = 0;
  li.dataset.id = String(h.id);
  li.setAttribute("aria-label", `${basename(h.path)}${h.probability !== null ? ", probability " + pct(h.probability) : ""}`);
  const thumb = document.createElement("div");
  thumb.className = "thumb";
  const img = document.createElement("img");
  img.loading = "lazy";
  img.alt = basename(h.path);
  img.src = h.thumb_url;
  thumb.appendChild(img);
  // Where it matched before any mask runs: the region of the photo that scored best.
  if (h.region && h.width && h.height) thumb.appendChild(outline("region", h.region, h.width, h.height, "the region that matched best"));
  if (isVideo(h)) {
    // The thumbnail is the best frame; the badge says it is a video, and how long.
    const badge = el("span", "badge", `\u25B6 ${clock(h.duration)}`);
    badge.title = `video, ${clock(h.duration)}; best at ${clock(h.time)}`;
    thumb.appendChild(badge);
  }
  const meta = document.createElement("div");
  meta.className = "meta";
  // A long name is cut, never a video's time: it sits beside the name, not inside it.
  const name = el("div", "name", "");
  name.append(el("span", "file", basename(h.path)));
  if (isVideo(h)) name.append(el("span", "at", ` @ ${clock(h.time)}`));
  name.title = h.path;
  const nums = document.createElement("div");
  nums.className = "nums";
  nums.append(el("span", "prob", h.probability !== null ? pct(h.probability) : "—"),
              el("span", "score", `score ${h.score.toFixed(3)}`));
  meta.append(name, nums);
  if (h.probability !== null) {
    const bar = el("div", "bar", "");
    const fill = document.createElement("i");
    fill.style.width = `${Math.round(h.probability * 100)}%`;
    bar.appendChild(fill);
    meta.appendChild(bar);
  }
  li.append(thumb, meta);
  li.addEventListener("click", () => openDetail(i));
  li.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); openDetail(i); } });
  return li;
}

function renderChips() {
  const box = $("like-chips");
  box.replaceChildren();
  state.like.forEach((id) => {
    const chip = el("span", "chip", "");
    const img = document.createElement("img");
    img.src = `/api/thumb/${id}`;
    img.alt = "";
    const x = document.createElement("button");
    x.type = "button";
    x.textContent = "×";
    x.title = "Remove";
    x.addEventListener("click", () => { state.like = state.like.filter((v) => v !== id); state.page = 1; go(); });
    chip.append(img, document.createTextNode(`like #${id}`), x);
    box.appendChild(chip);
  });
}

// -- detail view ------------------------------------------------------------------------------
function openDetail(i) {
  current = i;
  const h = hits[i];
  $("d-name").textContent = basename(h.path);
  $("d-path").textContent = h.path;
  $("d-prob").textContent = h.probability !== null ? pct(h.probability) : "— (image query)";
  $("d-score").textContent = h.score.toFixed(4);
  $("d-size").textContent = `${h.width ?? "?"} × ${h.height ?? "?"} px · ${humanBytes(h.size)}`;
  $("d-prompt").value = maskPrompt;
  // "More like this" of a video searches by the mean of its frames (search/searcher.py).
  $("d-like").title = isVideo(h) ? "Like what this video shows overall (all its frames)" : "";
  openVideo(h);
  if (!$("detail").open) $("detail").showModal();
  if (maskPrompt) showMask(maskPrompt); else showOriginal();
}

// -- a video hit: the player starts paused at the moment; the timeline marks the moments --------
function openVideo(h) {
  const v = $("d-video");
  const video = isVideo(h);
  for (const e of document.querySelectorAll(".video-only")) e.hidden = !video;
  $("d-videobar").hidden = !video;
  v.hidden = !video;
  $("v-original").textContent = video ? "Video" : "Original";
  $("d-img").hidden = video;  // a video's overlay shows once its frame's mask is in
  v.pause();
  if (!video) {
    moments = [];
    moment = -1;
    pendingSeek = null;
    if (v.getAttribute("src")) { v.removeAttribute("src"); v.load(); }
    return;
  }
  // Only the moments are marked: a clip with none (it never shows the thing) has a bare
  // timeline, and the player waits at the hit's time, its best frame.
  moments = (h.moments || []).slice().sort((a, b) => a.start - b.start || a.time - b.time);
  // The hit's own moment (its best frame's) first, else the first one.
  moment = moments.length ? Math.max(0, moments.findIndex((m) => m.time === h.time)) : -1;
  if (v.getAttribute("src") !== h.video_url) { v.src = h.video_url; }
  seekTo(moment >= 0 ? moments[moment].time : h.time);
  renderTimeline();
}

function seekTo(t) {
  const v = $("d-video");
  v.pause();
  if (v.readyState >= 1) { pendingSeek = null; v.currentTime = t; } else pendingSeek = t;
  showClock();
}

function videoDuration() {
  const h = hits[current];
  const v = $("d-video");
  return (h && h.duration) || (isFinite(v.duration) ? v.duration : 0) || Math.max(0, ...moments.map((m) => m.end));
}

function renderTimeline() {
  const line = $("d-timeline");
  const d = videoDuration();
  line.querySelectorAll(".mark").forEach((e) => e.remove());
  moments.forEach((m, j) => {
    const mark = document.createElement("button");
    mark.type = "button";
    mark.className = "mark" + (j === moment ? " on" : "");
    mark.dataset.time = String(m.time);
    mark.style.left = `${d ? (m.start / d) * 100 : 0}%`;
    mark.style.width = `${d ? Math.max(0, ((m.end - m.start) / d) * 100) : 0}%`;
    const p = m.probability !== null && m.probability !== undefined ? `, ${pct(m.probability)}` : "";
    mark.title = `${clock(m.start)}–${clock(m.end)}, best at ${clock(m.time)}${p}`;
    mark.setAttribute("aria-label", `moment ${j + 1}: ${mark.title}`);
    mark.addEventListener("click", (e) => { e.stopPropagation(); gotoMoment(j); });
    line.appendChild(mark);
  });
  $("d-prev-moment").disabled = moment <= 0;
  $("d-next-moment").disabled = moment >= moments.length - 1;
  const m = moments[moment];
  $("d-moment").textContent = m ? `${clock(m.time)} (${moment + 1} of ${moments.length}: ${clock(m.start)}–${clock(m.end)})` : "–";
  showClock();
}

function gotoMoment(j) {
  if (j < 0 || j >= moments.length) return;
  moment = j;
  seekTo(moments[j].time);
  renderTimeline();
  // The overlay belongs to the paused frame: a new moment gets its own mask.
  const p = $("d-prompt").value.trim();
  if ($("v-overlay").classList.contains("on") && p) showMask(p); else showOriginal();
}

function showClock() {
  const v = $("d-video");
  const d = videoDuration();
  const t = pendingSeek !== null ? pendingSeek : v.currentTime;
  $("d-playhead").style.left = `${d ? Math.min(100, (t / d) * 100) : 0}%`;
  $("d-clock").textContent = `${clock(t)} / ${clock(d)}`;
  $("d-play").innerHTML = v.paused ? "&#9654;" : "&#9646;&#9646;";
}

function frameTime(h) {
  // The moment a video hit's mask and frame are of: the one shown in the detail view, else its best.
  if (!isVideo(h)) return null;
  if (h === hits[current] && moments[moment]) return moments[moment].time;
  return h.time;
}

async function showMask(prompt) {
  const h = hits[current];
  const seq = ++maskSeq;
  clearMaskFacts();
  $("d-error").hidden = true;
  $("d-spinner").hidden = false;
  setView("overlay");
  try {
    const m = await api(`/api/mask/${h.id}`, { prompt, t: frameTime(h) });
    if (seq !== maskSeq) return;
    await loadImage(m.overlay_url);
    $("d-img").hidden = false;
    if (seq !== maskSeq) return;
    $("d-area").textContent = `${(m.mask_area * 100).toFixed(1)} % of the image`;
    const box = m.bbox && m.bbox.largest;
    $("d-bbox").textContent = box ? `x ${box[0]}–${box[2]}, y ${box[1]}–${box[3]} (${box[2] - box[0]} × ${box[3] - box[1]} px)` : "none (nothing found)";
    $("d-regions").textContent = String(m.regions);
    $("d-mscore").textContent = m.regions ? pct(m.mask_score) : "–";
    $("d-mask-link").href = m.mask_url;
    $("d-mask-link").hidden = false;
  } catch (err) {
    if (seq !== maskSeq) return;
    $("d-error").textContent = err.message;
    $("d-error").hidden = false;
    showOriginal();
  } finally {
    if (seq === maskSeq) $("d-spinner").hidden = true;
  }
}

function showOriginal() {
  const h = hits[current];
  setView("original");
  if (isVideo(h)) {  // the player itself, paused at the moment
    $("d-img").hidden = true;
    $("d-spinner").hidden = true;
    return;
  }
  $("d-img").hidden = false;
  $("d-spinner").hidden = false;
  loadImage(h.image_url).catch((err) => {
    $("d-error").textContent = err.message;
    $("d-error").hidden = false;
  }).finally(() => { $("d-spinner").hidden = true; });
}

function loadImage(url) {
  // Resolves once the image shows; an error answer of the API is turned into its message.
  return new Promise((resolve, reject) => {
    const img = $("d-img");
    img.onload = () => resolve();
    img.onerror = async () => {
      try {
        const res = await fetch(url);
        const body = await res.json();
        reject(new Error(body.error || "image failed to load"));
      } catch (_) { reject(new Error("image failed to load")); }
    };
    img.alt = basename(hits[current].path);
    img.src = url;
  });
}

function clearMaskFacts() {
  for (const id of ["d-area", "d-bbox", "d-regions", "d-mscore"]) $(id).textContent = "…";
  $("d-mask-link").hidden = true;
}

function setView(which) {
  $("v-overlay").classList.toggle("on", which === "overlay");
  $("v-original").classList.toggle("on", which === "original");
}

function moreLikeThis() {
  const h = hits[current];
  $("detail").close();
  state.like = [h.id];
  state.q = "";
  state.page = 1;
  go();
}

// -- helpers ------------------------------------------------------------------------------
function count(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text) e.textContent = text;
  return e;
}
function emptyState(title, text) {
  const li = el("li", "empty", "");
  li.append(el("b", "", title), document.createTextNode(text));
  return li;
}
function setMessage(text, isError) {
  $("message").textContent = text;
  $("message").classList.toggle("error", !!isError);
}
const basename = (p) => p.split(/[\\/]/).pop();
const isVideo = (h) => !!(h && h.video_url);
function clock(t) {
  // m:ss (h:mm:ss past an hour); tenths under ten seconds, where moments are close together
  if (t === null || t === undefined || !isFinite(t)) return "?";
  const tenths = Math.round(Math.max(0, t) * 10) / 10;
  if (tenths < 10) return `0:0${tenths.toFixed(1)}`;
  const s = Math.round(tenths);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
  const ss = String(sec).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${ss}` : `${m}:${ss}`;
}
const pct = (x) => `${(x * 100).toFixed(x < 0.1 ? 1 : 0)} %`;
function humanBytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
function go() { writeHash(); runSearch(); }

async function loadStatus() {
  try {
    const s = await api("/api/status");
    // One vocabulary: files (photos, videos) yield items (a photo one, a video its frames).
    const what = `${count(s.files, "file")}, ${count(s.searchable, "item")}`;
    $("footer").textContent = `${what} indexed · ${s.index}` + (s.standin ? " · stand-in models" : "");
    // The kinds to choose from are the ones wherein knows (status lists each registered kind),
    // so a new kind needs no change here; the address's kind=... is chosen once they are in.
    const kinds = Object.keys(s.kinds || {});
    $("kind").replaceChildren(new Option("every kind", ""), ...kinds.map((k) => new Option(`${k}s`, k)));
    $("kind").value = state.kind;
    if (s.standin) {
      $("banner").textContent = "Stand-in models: this index was built with the colour-only test models; they only know colours (try “red” or “blue”).";
      $("banner").hidden = false;
    }
    const f = await api("/api/folders");
    const list = $("folders");
    list.replaceChildren(...f.folders.slice(0, 500).map((x) => {
      const o = document.createElement("option");
      o.value = x.folder;
      o.label = `${x.count} images`;
      return o;
    }));
  } catch (err) {
    $("footer").textContent = `status unavailable: ${err.message}`;
  }
}

// -- wiring -------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("search-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.q = $("q").value.trim();
    state.page = 1;
    go();
  });
  $("min-prob").addEventListener("input", () => {
    const v = Number($("min-prob").value);
    $("min-prob-out").textContent = v ? v.toFixed(2) : "off";
  });
  $("min-prob").addEventListener("change", () => { state.minProb = Number($("min-prob").value); state.page = 1; go(); });
  $("under").addEventListener("change", () => { state.under = $("under").value.trim(); state.page = 1; go(); });
  for (const f of FILTERS) {
    $(f).addEventListener("change", () => { state[f] = $(f).value.trim(); state.page = 1; go(); });
  }
  $("sort").addEventListener("change", () => { state.sort = $("sort").value; state.page = 1; go(); });
  $("per-page").addEventListener("change", () => { state.perPage = Number($("per-page").value); state.page = 1; go(); });
  $("show-where").addEventListener("change", () => $("grid").classList.toggle("no-where", !$("show-where").checked));
  $("prev").addEventListener("click", () => { state.page = Math.max(1, state.page - 1); go(); window.scrollTo(0, 0); });
  $("next").addEventListener("click", () => { state.page += 1; go(); window.scrollTo(0, 0); });
  $("mask-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const p = $("d-prompt").value.trim();
    if (p) showMask(p);
  });
  $("v-overlay").addEventListener("click", () => { const p = $("d-prompt").value.trim(); if (p) showMask(p); });
  $("v-original").addEventListener("click", () => { maskSeq++; showOriginal(); });
  $("d-close").addEventListener("click", () => $("detail").close());
  $("detail").addEventListener("close", () => $("d-video").pause());
  const v = $("d-video");
  v.addEventListener("loadedmetadata", () => {
    if (pendingSeek !== null) { v.currentTime = pendingSeek; pendingSeek = null; }
    renderTimeline();  // the duration may only be known now
  });
  v.addEventListener("timeupdate", showClock);
  v.addEventListener("seeked", showClock);
  v.addEventListener("pause", showClock);
  v.addEventListener("play", () => {
    // Playing leaves the paused frame: the overlay (of that frame) goes.
    maskSeq++;
    setView("original");
    $("d-img").hidden = true;
    $("d-spinner").hidden = true;
    showClock();
  });
  $("d-play").addEventListener("click", () => { if (v.paused) v.play().catch(() => {}); else v.pause(); });
  $("d-prev-moment").addEventListener("click", () => gotoMoment(moment - 1));
  $("d-next-moment").addEventListener("click", () => gotoMoment(moment + 1));
  $("d-timeline").addEventListener("click", (e) => {
    // A click between the marks seeks there, showing the video itself.
    const box = $("d-timeline").getBoundingClientRect();
    const d = videoDuration();
    if (!d || !box.width) return;
    maskSeq++;
    showOriginal();
    seekTo(Math.min(d, Math.max(0, ((e.clientX - box.left) / box.width) * d)));
  });
  $("d-like").addEventListener("click", moreLikeThis);
  $("detail").addEventListener("click", (e) => { if (e.target === $("detail")) $("detail").close(); });
  $("detail").addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT") return;
    if (e.key === "ArrowRight" && current < hits.length - 1) openDetail(current + 1);
    if (e.key === "ArrowLeft" && current > 0) openDetail(current - 1);
    if (e.key === "]" && moments.length) gotoMoment(moment + 1);
    if (e.key === "[" && moments.length) gotoMoment(moment - 1);
  });
  window.addEventListener("popstate", () => { readHash(); runSearch(); });
  readHash();
  runSearch();
  loadStatus();
  if (!state.q) $("q").focus();
});
