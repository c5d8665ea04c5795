// lockgate dashboard: polls the driver's REST API (/api/v1/...) and draws the job.
// Plain JavaScript, no framework, no build step, nothing loaded from elsewhere. The page is
// built with DOM calls only (never innerHTML with data), so names and tracebacks from the
// job are shown as text. The page keeps the job's token in sessionStorage (this origin's:
// scheme, host and port, and this tab's only) and sends it as an Authorization header; it
// keeps no cookie: a browser sends cookies to every port of a host, so another local user's
// server on another port would receive them.
"use strict";

(function () {
  const POLL_MS = 1500;
  const GET_TIMEOUT_MS = 10000;
  const POST_TIMEOUT_MS = 300000;
  const CHART_POINTS = 60;
  const TABLE_ROWS = 8;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const ENDED = ["FINISHED", "CANCELED", "FAILED"];
  const TOKEN_KEY = "lockgate.token";

  const state = {
    jobId: null,
    graphKey: null,
    vertexEls: new Map(),
    timer: null,
    busy: false,
    action: null, // "savepoint" | "stop" while the dialog is open
    status: null,
    pending: false, // a savepoint or stop is under way
  };

  const $ = (id) => document.getElementById(id);
  const fmtInt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const fmt1 = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

  // ------------------------------------------------------------------ helpers

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function rate(v) {
    if (v === null || v === undefined) return "–";
    return (v >= 100 ? fmtInt : fmt1).format(v) + "/s";
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    let v = n;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return (i === 0 ? fmtInt : fmt1).format(v) + " " + units[i];
  }

  function millis(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return fmt1.format(ms) + " ms";
    return fmt1.format(ms / 1000) + " s";
  }

  function duration(s) {
    if (s === null || s === undefined) return "";
    s = Math.max(0, Math.floor(s));
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    const sec = s % 60;
    const parts = [];
    if (d) parts.push(d + "d");
    if (d || h) parts.push(h + "h");
    if (d || h || m) parts.push(m + "m");
    parts.push(sec + "s");
    return parts.join(" ");
  }

  function clock(epochSeconds) {
    if (epochSeconds === null || epochSeconds === undefined) return "–";
    return new Date(epochSeconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  // the end of a long path (the whole path is the cell's tooltip)
  function shortPath(path) {
    if (!path) return "";
    const parts = path.split("/");
    return parts.length > 3 ? "…/" + parts.slice(-2).join("/") : path;
  }

  function timeOfDay(epochMs) {
    if (!epochMs) return "–";
    return new Date(epochMs).toISOString().slice(11, 19);
  }

  function watermarkText(ms) {
    if (ms === null || ms === undefined) return "none yet";
    // Long.MIN/MAX-like sentinels and event times far from now are shown as numbers
    if (ms <= -8.64e15 || ms >= 8.64e15) return ms > 0 ? "end of input (max)" : "min";
    return new Date(ms).toISOString() + " (" + fmtInt.format(ms) + ")";
  }

  function backpressureLevel(bp) {
    if (bp === null || bp === undefined) return "unknown";
    if (bp < 100) return "ok";
    if (bp < 500) return "warn";
    return "high";
  }

  function replaceChildren(node, ...children) {
    node.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
  }

  // ------------------------------------------------------------------ API

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function storedToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY);
    } catch (e) {
      return null; // storage disabled: every request gets 401 and the login form shows
    }
  }

  function storeToken(token) {
    try {
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) {
      // storage disabled: nothing kept
    }
  }

  async function api(method, path, body, timeoutMs) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), timeoutMs || GET_TIMEOUT_MS);
    const init = {
      method,
      credentials: "omit", // no cookie: the token goes in the header, to this origin only
      cache: "no-store",
      signal: ctl.signal,
      headers: { Accept: "application/json" },
    };
    const token = storedToken();
    if (token) init.headers.Authorization = "Bearer " + token;
    if (method !== "GET") {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body || {});
    }
    let resp;
    try {
      resp = await fetch("api/v1/" + path, init);
    } catch (e) {
      const why = e.name === "AbortError" ? "no answer within " + (timeoutMs || GET_TIMEOUT_MS) / 1000 + " s" : e.message;
      throw new ApiError(0, method + " /api/v1/" + path + ": cannot reach the driver (" + why + "); is the job still running?");
    } finally {
      clearTimeout(timer);
    }
    let data = null;
    try {
      data = await resp.json();
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      const msg = data && data.error ? data.error : "HTTP " + resp.status + " " + resp.statusText;
      throw new ApiError(resp.status, method + " /api/v1/" + path + " failed (" + resp.status + "): " + msg);
    }
    return data;
  }

  // ------------------------------------------------------------------ errors

  function showErrors(messages) {
    const box = $("errors");
    replaceChildren(box, ...messages.map((m) => el("p", { class: "error", text: m })));
  }

  function showLogin(show) {
    if (show && storedToken()) {
      // the job refused the token kept: forget it and ask again
      storeToken(null);
      $("login-message").textContent = "The job refused that token; check it and log in again.";
    }
    if (!show) $("login-message").textContent = "";
    $("login").hidden = !show;
    $("main").hidden = show;
    if (show) {
      $("job-name").textContent = "not logged in";
      $("uptime").textContent = "";
      $("progress").textContent = "";
      $("updated").textContent = "";
      setStatus(null);
    }
  }

  // ------------------------------------------------------------------ header

  function setStatus(status) {
    state.status = status;
    const node = $("status");
    const text = status || "…";
    if (node.textContent !== text) node.textContent = text; // announced only on a change
    node.dataset.status = status || "";
    // commands only for a running job, and one at a time
    const ready = status === "RUNNING" && !state.pending;
    $("savepoint-button").disabled = !ready;
    $("stop-button").disabled = !ready;
  }

  function renderJobs(jobs) {
    const select = $("job-select");
    const several = jobs.length > 1;
    select.hidden = !several;
    $("job-select-label").hidden = !several;
    const ids = jobs.map((j) => String(j.id)).join(",");
    if (select.dataset.ids !== ids) {
      select.dataset.ids = ids;
      replaceChildren(
        select,
        ...jobs.map((j) => el("option", { value: j.id, text: j.name + " (" + j.status + ")" })),
      );
    }
    select.value = state.jobId;
  }

  function pickJob(jobs) {
    const wanted = new URLSearchParams(location.hash.slice(1)).get("job");
    if (wanted && jobs.some((j) => String(j.id) === wanted)) return wanted;
    if (state.jobId && jobs.some((j) => String(j.id) === state.jobId)) return state.jobId;
    const running = jobs.find((j) => !ENDED.includes(j.status));
    return String((running || jobs[0]).id);
  }

  function renderProgress(p) {
    if (!p) return;
    const parts = [
      rate(p.input_records_per_s) + " records in",
      rate(p.output_records_per_s) + " out",
      "watermark " + (p.watermark === null || p.watermark === undefined ? "none" : new Date(p.watermark).toISOString()),
    ];
    const cp = p.last_checkpoint;
    parts.push(cp ? "last checkpoint " + cp.id + " (" + millis(cp.duration_ms) + ", " + bytes(cp.state_size) + ")" : "no checkpoint yet");
    const bp = p.most_backpressured;
    if (bp && bp.backpressured_ms_per_s !== null && bp.backpressured_ms_per_s !== undefined) {
      parts.push("most backpressured: " + bp.task + " " + fmtInt.format(bp.backpressured_ms_per_s) + " ms/s");
    }
    if (p.restarts) parts.push(p.restarts + " restart" + (p.restarts === 1 ? "" : "s"));
    $("progress").textContent = parts.join(" · ");
  }

  // ------------------------------------------------------------------ graph

  function layers(graph) {
    const incoming = new Map(graph.vertices.map((v) => [v.id, []]));
    for (const e of graph.edges) if (incoming.has(e.target)) incoming.get(e.target).push(e.source);
    const depth = new Map();
    const visiting = new Set();
    const depthOf = (id) => {
      if (depth.has(id)) return depth.get(id);
      if (visiting.has(id)) return 0; // a cycle (iterations): cut it
      visiting.add(id);
      const d = Math.max(-1, ...(incoming.get(id) || []).map(depthOf)) + 1;
      visiting.delete(id);
      depth.set(id, d);
      return d;
    };
    const cols = [];
    for (const v of graph.vertices) {
      const d = depthOf(v.id);
      (cols[d] = cols[d] || []).push(v);
    }
    return cols.filter(Boolean);
  }

  function buildGraph(graph) {
    const box = $("graph");
    state.vertexEls = new Map();
    const edgesSvg = svg("svg", { class: "edges", "aria-hidden": "true" });
    const columns = el("div", { class: "columns" });
    for (const col of layers(graph)) {
      const colEl = el("div", { class: "column" });
      for (const v of col) {
        const ops = el("ol", { class: "operators", "aria-label": "operators of this task" },
          ...v.operators.map((o) => el("li", { text: o.name, title: "uid " + o.uid })));
        const vin = el("span", { class: "rate-in", text: "–" });
        const vout = el("span", { class: "rate-out", text: "–" });
        const bp = el("span", { class: "bp-text", text: "not measured yet" });
        const busy = el("span", { class: "busy-text", text: "" });
        const subtasks = el("ul", { class: "subtasks" });
        const node = el("article", {
          class: "vertex bp-unknown",
          id: "vertex-" + v.id,
          "data-vertex-id": v.id,
          "data-backpressure": "",
          "data-level": "unknown",
          "aria-label": "task " + v.name,
        },
          el("h3", { class: "vertex-name", text: v.name }),
          el("p", { class: "meta", text: "parallelism " + v.parallelism + (v.is_source ? " · source" : "") }),
          ops,
          el("p", { class: "rates" }, "in ", vin, " · out ", vout),
          el("p", { class: "bp" }, "backpressure ", bp, busy),
          el("details", { class: "subtask-details" }, el("summary", { text: "subtasks" }), subtasks),
        );
        state.vertexEls.set(v.id, { node, vin, vout, bp, busy, subtasks });
        colEl.append(node);
      }
      columns.append(colEl);
    }
    replaceChildren(box, edgesSvg, columns);
    box.dataset.ready = "true";
    box.dataset.vertices = String(graph.vertices.length);
    drawEdges(graph);
  }

  function drawEdges(graph) {
    const box = $("graph");
    const edgesSvg = box.querySelector("svg.edges");
    if (!edgesSvg) return;
    const origin = box.getBoundingClientRect();
    // as large as the boxes, no larger (the SVG itself must not widen the scroll area)
    const columns = box.querySelector(".columns");
    edgesSvg.setAttribute("width", columns.scrollWidth);
    edgesSvg.setAttribute("height", columns.offsetTop + columns.offsetHeight);
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" }));
    defs.append(marker);
    const parts = [defs];
    for (const e of graph.edges) {
      const a = state.vertexEls.get(e.source);
      const b = state.vertexEls.get(e.target);
      if (!a || !b) continue;
      const ra = a.node.getBoundingClientRect();
      const rb = b.node.getBoundingClientRect();
      const x1 = ra.right - origin.left + box.scrollLeft;
      const y1 = ra.top + ra.height / 2 - origin.top;
      const x2 = rb.left - origin.left + box.scrollLeft - 2;
      const y2 = rb.top + rb.height / 2 - origin.top;
      const mid = (x1 + x2) / 2;
      const path = svg("path", {
        d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`,
        class: "edge" + (e.side_output ? " side-output" : ""),
        "marker-end": "url(#arrow)",
      });
      const kind = (e.partitioning || "").replace(/Partitioning$/, "");
      // how records go from one task to the next, named as Flink's web UI does (HASH, FORWARD, ...)
      const label = (kind === "KeyGroup" ? "HASH" : kind.toUpperCase()) + (e.side_output ? " [" + e.side_output + "]" : "");
      parts.push(path, svg("text", { x: mid, y: (y1 + y2) / 2 - 6, class: "edge-label", "text-anchor": "middle" }, label));
    }
    replaceChildren(edgesSvg, ...parts);
  }

  function renderGraph(graph, metrics) {
    const key = JSON.stringify(graph);
    if (key !== state.graphKey) {
      state.graphKey = key;
      state.graph = graph;
      buildGraph(graph);
    }
    const byId = new Map((metrics && metrics.vertices ? metrics.vertices : []).map((v) => [v.id, v]));
    for (const [id, parts] of state.vertexEls) {
      const m = byId.get(id);
      if (!m) continue;
      parts.vin.textContent = m.is_source ? "– (source)" : rate(m.records_in_per_s);
      parts.vout.textContent = m.is_sink ? "– (sink)" : rate(m.records_out_per_s);
      const bpv = m.backpressured_ms_per_s;
      const level = backpressureLevel(bpv);
      parts.node.className = "vertex bp-" + level;
      parts.node.dataset.backpressure = bpv === null || bpv === undefined ? "" : String(bpv);
      parts.node.dataset.level = level;
      parts.node.dataset.recordsInPerS = String(m.records_in_per_s);
      parts.node.dataset.recordsOutPerS = String(m.records_out_per_s);
      parts.bp.textContent = bpv === null || bpv === undefined ? "not measured yet" : fmtInt.format(bpv) + " ms/s (" + { ok: "low", warn: "medium", high: "high" }[level] + ")";
      parts.busy.textContent = m.busy_ms_per_s === null || m.busy_ms_per_s === undefined ? "" : " · busy " + fmtInt.format(m.busy_ms_per_s) + " ms/s";
      replaceChildren(parts.subtasks, ...(m.subtasks || []).map((s) => el("li", {
        text: "#" + s.subtask + (s.host ? " on " + s.host : "") +
          ": backpressure " + (s.backpressured_ms_per_s === null || s.backpressured_ms_per_s === undefined ? "–" : fmtInt.format(s.backpressured_ms_per_s) + " ms/s") +
          ", busy " + (s.busy_ms_per_s === null || s.busy_ms_per_s === undefined ? "–" : fmtInt.format(s.busy_ms_per_s) + " ms/s") +
          ", in " + bytes(s.bytes_in_per_s) + "/s, out " + bytes(s.bytes_out_per_s) + "/s" +
          (s.input_queue_fill === null || s.input_queue_fill === undefined ? "" : ", input queue " + Math.round(s.input_queue_fill * 100) + "%") +
          (s.output_queue_fill === null || s.output_queue_fill === undefined ? "" : ", output queue " + Math.round(s.output_queue_fill * 100) + "%"),
      })));
    }
    drawEdges(state.graph);
  }

  // ------------------------------------------------------------------ checkpoints

  function renderCheckpoints(list) {
    const chart = $("checkpoint-chart");
    const completed = list.filter((c) => c.status === "completed");
    const failed = list.filter((c) => c.status === "failed");
    const savepoints = list.filter((c) => c.is_savepoint && c.status === "completed");
    chart.dataset.completed = String(completed.length);
    chart.dataset.savepoints = String(savepoints.length);
    $("checkpoint-summary").textContent = list.length === 0
      ? "No checkpoint yet."
      : "Of the last " + list.length + ": " + completed.length + " completed, " + failed.length + " failed" +
        (savepoints.length ? ", " + savepoints.length + " savepoint" + (savepoints.length === 1 ? "" : "s") : "") +
        (completed.length ? "; last completed: " + completed[completed.length - 1].checkpoint_id : "");
    replaceChildren(chart, list.length ? drawChart(list.slice(-CHART_POINTS)) : el("p", { class: "empty", text: "The chart shows each checkpoint's duration and size once one completes." }));

    const rows = list.slice(-TABLE_ROWS).reverse().map((c) => el("tr", {
      class: "cp-" + c.status + (c.is_savepoint ? " savepoint" : ""),
      "data-checkpoint-id": c.checkpoint_id,
      "data-status": c.status,
      "data-savepoint": c.is_savepoint ? "true" : "false",
    },
      el("td", { text: c.checkpoint_id }),
      el("td", { text: c.is_savepoint ? "savepoint" : "checkpoint" }),
      el("td", { text: c.status }),
      el("td", { text: timeOfDay(c.trigger_timestamp), title: c.trigger_timestamp ? clock(c.trigger_timestamp / 1000) : null }),
      el("td", { class: "num", text: c.status === "completed" ? millis(c.duration_ms) : "–" }),
      el("td", { class: "num", text: c.status === "completed" ? bytes(c.state_size) : "–" }),
      el("td", { class: "num", text: millis(Math.max(0, ...(c.subtasks || []).map((s) => s.alignment_ms || 0))) }),
      el("td", { class: "num", text: bytes(c.persisted_inflight_bytes) }),
      c.failure_reason
        ? el("td", { class: "failure", text: c.failure_reason })
        : el("td", { class: "path", text: shortPath(c.external_path), title: c.external_path }),
    ));
    replaceChildren($("checkpoint-table").tBodies[0], ...rows);
  }

  function drawChart(list) {
    const W = 760, H = 250, L = 64, R = 72, T = 28, B = 36;
    const plotW = W - L - R, plotH = H - T - B;
    const done = list.filter((c) => c.status === "completed");
    const maxDur = Math.max(1, ...done.map((c) => c.duration_ms || 0));
    const maxSize = Math.max(1, ...done.map((c) => c.state_size || 0));
    const step = plotW / Math.max(list.length, 1);
    const barW = Math.max(2, Math.min(24, step * 0.7));
    const root = svg("svg", {
      viewBox: `0 0 ${W} ${H}`,
      class: "cp-chart",
      role: "img",
      "aria-labelledby": "cp-chart-title",
    });
    root.append(svg("title", { id: "cp-chart-title" },
      "Checkpoint history: duration (bars, left axis) and size (line, right axis) of the last " + list.length + " checkpoints"));
    // axes and grid
    for (let i = 0; i <= 4; i++) {
      const y = T + plotH - (plotH * i) / 4;
      root.append(svg("line", { x1: L, x2: L + plotW, y1: y, y2: y, class: "grid" }));
      root.append(svg("text", { x: L - 6, y: y + 4, class: "axis-label", "text-anchor": "end" }, millis((maxDur * i) / 4)));
      root.append(svg("text", { x: L + plotW + 6, y: y + 4, class: "axis-label size-label", "text-anchor": "start" }, bytes((maxSize * i) / 4)));
    }
    root.append(svg("text", { x: 4, y: 12, class: "axis-title" }, "duration"));
    root.append(svg("text", { x: W - 4, y: 12, class: "axis-title size-label", "text-anchor": "end" }, "size"));
    const labelEvery = Math.ceil(list.length / 12);
    const points = [];
    list.forEach((c, i) => {
      const cx = L + step * i + step / 2;
      const ok = c.status === "completed";
      // a failed checkpoint is a full-height pale bar, one in progress a short stub
      const h = ok ? Math.max(1, (plotH * (c.duration_ms || 0)) / maxDur) : c.status === "failed" ? plotH : 4;
      const bar = svg("rect", {
        x: cx - barW / 2, y: T + plotH - h, width: barW, height: h,
        class: "bar " + (ok ? (c.is_savepoint ? "bar-savepoint" : "bar-ok") : "bar-" + c.status),
        "data-checkpoint-id": c.checkpoint_id,
        "data-status": c.status,
        "data-savepoint": c.is_savepoint ? "true" : "false",
      });
      bar.append(svg("title", {}, (c.is_savepoint ? "savepoint " : "checkpoint ") + c.checkpoint_id + ": " + c.status +
        (ok ? ", " + millis(c.duration_ms) + ", " + bytes(c.state_size) : c.failure_reason ? " (" + c.failure_reason + ")" : "")));
      root.append(bar);
      if (ok) points.push([cx, T + plotH - (plotH * (c.state_size || 0)) / maxSize]);
      if (i % labelEvery === 0 || i === list.length - 1) {
        root.append(svg("text", { x: cx, y: H - B + 16, class: "axis-label", "text-anchor": "middle" }, c.checkpoint_id));
      }
    });
    root.append(svg("text", { x: L + plotW / 2, y: H - 4, class: "axis-title", "text-anchor": "middle" }, "checkpoint id"));
    if (points.length) {
      root.append(svg("polyline", { points: points.map((p) => p.join(",")).join(" "), class: "size-line" }));
      for (const [x, y] of points) root.append(svg("circle", { cx: x, cy: y, r: 2.5, class: "size-dot" }));
    }
    const legend = el("p", { class: "chart-legend" },
      el("span", { class: "swatch bar-ok-swatch", text: "duration" }),
      el("span", { class: "swatch bar-savepoint-swatch", text: "savepoint" }),
      el("span", { class: "swatch bar-failed-swatch", text: "failed" }),
      el("span", { class: "swatch size-swatch", text: "size" }));
    const wrap = el("div", { class: "chart-wrap" });
    wrap.append(root, legend);
    return wrap;
  }

  // ------------------------------------------------------------------ watermarks, exceptions

  function renderWatermarks(list, metrics) {
    const lag = new Map();
    for (const o of (metrics && metrics.operators) || []) lag.set(o.uid + "/" + o.subtask, o.watermark_lag_ms);
    const rows = list.map((w) => el("tr", { "data-uid": w.uid, "data-subtask": w.subtask },
      el("td", { text: w.operator }, el("span", { class: "uid", text: " " + w.uid })),
      el("td", { class: "num", text: w.subtask }),
      el("td", { text: watermarkText(w.watermark) }),
      el("td", { text: w.held_back_by || "nothing known" }),
    ));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 4, class: "empty", text: "No operator has reported a watermark yet." })));
    replaceChildren($("watermark-table").tBodies[0], ...rows);
  }

  function latencyText(ms) {
    if (ms === null || ms === undefined) return "–";
    return ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : ms.toFixed(1) + " ms";
  }

  function renderLatency(metrics) {
    // quantiles over about the last minute, markers over the run (docs/dashboard.md)
    const rows = ((metrics && metrics.latency) || []).map((s) => el("tr", { "data-uid": s.uid },
      el("td", { text: s.name }, el("span", { class: "uid", text: " " + s.uid })),
      el("td", { class: "num", text: s.subtasks }),
      el("td", { class: "num", text: latencyText(s.p50_ms) }),
      el("td", { class: "num", text: latencyText(s.p95_ms) }),
      el("td", { class: "num", text: latencyText(s.p99_ms) }),
      el("td", { class: "num", text: latencyText(s.max_ms) }),
      el("td", { class: "num", text: s.count }),
    ));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 7, class: "empty", text: "No latency markers yet (set latency_tracking_interval_ms to track latency)." })));
    replaceChildren($("latency-table").tBodies[0], ...rows);
  }

  function renderRescales(data) {
    // the autoscaler's settings and decisions (GET /rescales, docs/scale.md)
    const settings = data.autoscaling;
    $("autoscaling").textContent = settings ? "Autoscaling: " + settings.describe : "This job does not autoscale.";
    const changes = (d) => Object.keys(d.new).filter((u) => d.new[u] !== d.old[u]).map((u) => u + " " + d.old[u] + " → " + d.new[u]).join(", ");
    const rows = (data.rescales || []).slice().reverse().map((d) => el("tr", { "data-id": d.id, "data-status": d.status },
      el("td", { class: "num", text: d.id }),
      el("td", { text: clock(d.time) }),
      el("td", { text: d.direction + ": " + changes(d) }),
      el("td", { text: d.status + (d.duration_ms !== null && d.duration_ms !== undefined ? " in " + latencyText(d.duration_ms) : "") + (d.error ? " (" + d.error + ")" : "") }),
      el("td", { text: d.reason }),
    ));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 5, class: "empty", text: "No rescale yet." })));
    replaceChildren($("rescale-table").tBodies[0], ...rows);
  }

  function renderExceptions(list, job) {
    const box = $("exceptions");
    const restarts = job && job.restarts ? job.restarts : 0;
    // drawn again only when something changed: a traceback a reader opened stays open
    const key = JSON.stringify([restarts, list]);
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    const head = el("p", { class: "summary", text: restarts + " restart" + (restarts === 1 ? "" : "s") + (list.length ? ", " + list.length + " exception" + (list.length === 1 ? "" : "s") + " (newest first)" : ", no exception") });
    const items = list.slice().reverse().map((x, i) => {
      const details = el("details", { class: "exception" + (x.final ? " final" : ""), "data-index": i },
        el("summary", {},
          el("span", { class: "when", text: clock(x.time) }),
          " attempt " + x.attempt,
          x.operator ? " · " + x.operator : "",
          x.final ? " · final (the job failed)" : "",
          " · ",
          el("strong", { text: x.error })),
        el("pre", { class: "traceback", text: x.traceback || "(no traceback)" }));
      return details;
    });
    // keep the open/closed state of tracebacks across polls
    const open = new Set([...box.querySelectorAll("details[open]")].map((d) => d.querySelector("summary").textContent));
    for (const d of items) if (open.has(d.querySelector("summary").textContent)) d.open = true;
    replaceChildren(box, head, ...items);
  }

  // ------------------------------------------------------------------ polling

  async function poll() {
    if (state.busy) return;
    clearTimeout(state.timer);
    state.busy = true;
    const errors = [];
    try {
      const jobs = (await api("GET", "jobs")).jobs || [];
      showLogin(false);
      if (!jobs.length) {
        $("job-name").textContent = "no job on this driver";
        setStatus(null);
        return;
      }
      state.jobId = pickJob(jobs);
      renderJobs(jobs);
      const id = encodeURIComponent(state.jobId);
      const names = ["", "/metrics", "/checkpoints", "/watermarks", "/exceptions", "/progress", "/rescales"];
      const results = await Promise.allSettled(names.map((n) => api("GET", "jobs/" + id + n)));
      const ok = (i) => (results[i].status === "fulfilled" ? results[i].value : null);
      for (const r of results) if (r.status === "rejected") errors.push(r.reason.message);
      if (results.some((r) => r.status === "rejected" && r.reason.status === 401)) {
        showLogin(true);
        return;
      }
      const job = ok(0);
      const metrics = ok(1);
      if (job) {
        $("job-name").textContent = job.name;
        document.title = job.name + " · lockgate";
        setStatus(job.status);
        $("uptime").textContent = "up " + duration(job.uptime_s) + " · started " + clock(job.started_at);
        if (job.graph) renderGraph(job.graph, metrics);
      }
      if (ok(2)) renderCheckpoints(ok(2).checkpoints || []);
      if (metrics) renderLatency(metrics);
      if (ok(3)) renderWatermarks(ok(3).watermarks || [], metrics);
      if (ok(4)) renderExceptions(ok(4).exceptions || [], job);
      renderProgress(ok(5));
      if (ok(6)) renderRescales(ok(6));
      $("updated").textContent = "updated " + new Date().toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
    } catch (e) {
      if (e.status === 401) {
        showLogin(true);
      } else {
        errors.push(e.message);
        if (e.status === 0) {
          // the driver is gone (a job's API ends with the job): no more commands to offer
          setStatus(null);
          $("status").textContent = "UNREACHABLE";
          $("status").dataset.status = "UNREACHABLE";
        }
      }
    } finally {
      showErrors(errors);
      state.busy = false;
      state.timer = setTimeout(poll, POLL_MS);
    }
  }

  // ------------------------------------------------------------------ actions

  function openDialog(action) {
    state.action = action;
    const dlg = $("savepoint-dialog");
    $("savepoint-dialog-title").textContent = action === "stop" ? "Stop with savepoint" : "Savepoint";
    $("savepoint-submit").textContent = action === "stop" ? "Write savepoint and stop" : "Write savepoint";
    $("drain-row").hidden = action !== "stop";
    $("savepoint-drain").checked = false;
    if (typeof dlg.showModal === "function") dlg.showModal();
    else dlg.setAttribute("open", "");
    $("savepoint-path").focus();
  }

  function closeDialog() {
    const dlg = $("savepoint-dialog");
    if (typeof dlg.close === "function") dlg.close();
    else dlg.removeAttribute("open");
  }

  async function submitDialog(event) {
    event.preventDefault();
    const path = $("savepoint-path").value.trim();
    const action = state.action;
    if (!path) {
      $("action-result").textContent = "Enter the folder to write the savepoint into, e.g. /data/savepoints/sp-1.";
      return;
    }
    closeDialog();
    const result = $("action-result");
    result.dataset.state = "pending";
    result.dataset.location = "";
    result.textContent = (action === "stop" ? "Stopping with a savepoint into " : "Writing a savepoint into ") + path + " …";
    state.pending = true;
    setStatus(state.status);
    const id = encodeURIComponent(state.jobId);
    try {
      const body = action === "stop" ? { path, drain: $("savepoint-drain").checked, timeout: null } : { path, timeout: null };
      const data = await api("POST", "jobs/" + id + (action === "stop" ? "/stop" : "/savepoints"), body, POST_TIMEOUT_MS);
      result.dataset.state = "done";
      result.dataset.location = data.location;
      result.textContent = (action === "stop" ? "Stopped with savepoint " : "Savepoint written: ") + data.location;
    } catch (e) {
      result.dataset.state = "failed";
      result.textContent = e.message;
    } finally {
      state.pending = false;
      setStatus(state.status);
    }
  }

  function logIn(event) {
    event.preventDefault();
    const field = $("login-token");
    const token = field.value.trim();
    field.value = "";
    if (!token) return;
    storeToken(token);
    $("login-message").textContent = "";
    clearTimeout(state.timer);
    poll();
  }

  function start() {
    $("login-form").addEventListener("submit", logIn);
    $("savepoint-button").addEventListener("click", () => openDialog("savepoint"));
    $("stop-button").addEventListener("click", () => openDialog("stop"));
    $("savepoint-form").addEventListener("submit", submitDialog);
    $("savepoint-cancel").addEventListener("click", closeDialog);
    $("job-select").addEventListener("change", (e) => {
      state.jobId = e.target.value;
      location.hash = "job=" + encodeURIComponent(e.target.value);
      state.graphKey = null;
    });
    window.addEventListener("resize", () => state.graph && drawEdges(state.graph));
    poll();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
