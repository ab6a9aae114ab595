// redis-presence dashboard: live updates over server-sent events, ages that keep ticking
// from the server's last read of each row (the stream's `rows`), never past what its state allows.
// Every name is data: it reaches the page through textContent only, never as markup.
"use strict";

(() => {
  const dataNode = document.getElementById("page-data");
  const page = dataNode ? JSON.parse(dataNode.textContent || "{}") : {};
  const live = document.getElementById("live");
  const banner = document.getElementById("banner");
  if (!page.view) {
    // An error page (it reloads itself): say since when Redis cannot be reached.
    if (page.since_ns !== undefined && page.since_ns !== null) {
      live.dataset.state = "down";
      live.textContent = "Redis unreachable";
      banner.textContent = `Redis unreachable since ${isoUtc(page.since_ns)} (${page.message}); retrying`;
      banner.hidden = false;
    }
    return;
  }

  const root = page.root || "";
  let offsetMs = Number(page.now_ns) / 1e6 - Date.now(); // the server's clock minus ours

  // -- formatting (as the CLI prints them) -------------------------------------------------
  const thousands = (n) => Number(n).toLocaleString("en-US");
  function humanAge(ms) {
    const s = Math.floor(Math.max(0, ms) / 1000);
    if (s < 60) return `${s}s ago`;
    if (s < 3600) return `${Math.floor(s / 60)}m ago`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
    return `${Math.floor(s / 86400)}d ago`;
  }
  function isoUtc(ns) {
    const seconds = Math.floor(Number(ns) / 1e9);
    return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
  }
  const groupHref = (queue, group) =>
    `${root}/group?queue=${encodeURIComponent(queue)}&group=${encodeURIComponent(group)}`;
  const keyOf = (queue, group, consumer) => JSON.stringify([queue, group, consumer]);

  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }
  function linkCell(text, href, className) {
    const td = cell("", className);
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    td.append(a);
    return td;
  }
  function pill(state) {
    const span = document.createElement("span");
    span.className = `pill ${state}`;
    span.textContent = state;
    return span;
  }
  // Protocol version 2's marks beside a consumer's state, each written as text.
  const MARKS = [
    ["draining", "draining", "it said it is draining: a planned departure"],
    ["drain_requested", "drain-requested", "a drain was requested; its next beat's reply tells it"],
    ["conflict", "conflict", "two live processes beat as this consumer within one TTL (a duplicate name)"],
  ];
  const MARK_TEXT = { draining: "draining", "drain-requested": "drain requested", conflict: "duplicate" };
  function marks(c) {
    const out = [];
    for (const [field, name, title] of MARKS) {
      if (!c[field]) continue;
      const span = document.createElement("span");
      span.className = `pill mark ${name}`;
      span.title = title;
      span.textContent = MARK_TEXT[name];
      out.push(" ", span);
    }
    return out;
  }
  function stuckPill() {
    const span = pill("stuck");
    span.title = "holds leases without progress for longer than the progress budget";
    return span;
  }
  // "no progress for …" (the service's `lasting`): whole units, rounded down.
  function lasting(ms) {
    const s = Math.floor(Math.max(0, ms) / 1000);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }
  function noProgress() {
    const span = document.createElement("span");
    span.className = "no-progress";
    return span;
  }
  // A consumer's metadata as `key=value` pairs, sorted by key, written as text; metadata
  // another program wrote, which the service could not read, is marked as such.
  function metaCell(meta, error) {
    const td = cell("", "meta");
    if (error) {
      const mark = document.createElement("span");
      mark.className = "meta-error";
      mark.title = error;
      mark.textContent = "metadata unreadable";
      td.append(mark);
    }
    for (const key of Object.keys(meta || {}).sort()) {
      const kv = document.createElement("span");
      kv.className = "kv";
      const k = document.createElement("span");
      k.className = "k";
      k.textContent = key;
      const v = document.createElement("span");
      v.className = "v";
      v.textContent = meta[key];
      kv.append(k, "=", v);
      td.append(kv);
    }
    return td;
  }

  // One consumer's page is live on its own terms (below): it leaves the rest of this script.
  if (page.view === "consumer") {
    document.addEventListener("submit", askToDrain);
    watchConsumer();
    return;
  }

  // -- ages ---------------------------------------------------------------------------------
  // An age is the server's clock at the row's last read plus the time since, from the beat
  // that read found. A row is never shown older than its state allows (active: the TTL,
  // stale: twice the TTL): past it the page does not know the row's age until its next read
  // (the stream's `rows`, or an event), and says so; a row left so for a while is read again.
  const OVERDUE_MS = 2000;
  const MOST = { active: 1, stale: 2 }; // in TTLs
  function tick() {
    const nowMs = Date.now() + offsetMs;
    let overdue = false;
    for (const td of document.querySelectorAll("td.age[data-hb]")) {
      const ageMs = nowMs - Number(td.dataset.hb) / 1e6;
      const most = MOST[td.parentElement.dataset.state];
      if (most !== undefined && ageMs > most * ttlMs) {
        // Past what its state allows: a newer beat, or its change of state, is on its way
        // (no event carries a beat). The age since the last beat read is still true as a
        // bound: an age, never a bare "…".
        td.textContent = `≤ ${humanAge(ageMs)}`;
        td.title = "at most this long ago: older than its state allows on this page's clock, "
          + "so a newer heartbeat or its change of state is on its way";
        td.classList.add("refreshing");
        if (ageMs > most * ttlMs + OVERDUE_MS) overdue = true;
      } else {
        td.textContent = humanAge(ageMs);
        td.title = "";
        td.classList.remove("refreshing");
      }
    }
    // A stuck row's "no progress for …", from the instant its budget counts from.
    for (const span of document.querySelectorAll("tr[data-since] .no-progress")) {
      const since = Number(span.closest("tr").dataset.since) / 1e6;
      span.textContent = `no progress for ${lasting(nowMs - since)}`;
    }
    if (overdue) scheduleRefresh(0);
  }
  setInterval(tick, 1000);

  // The stream's `rows`: rows read again at `now_ns` (the server's clock), with their real
  // last beat and leases; each replaces what a row of the same registration shows, unless
  // the page already holds a later beat of it. States come from the events.
  function applyRows(read) {
    offsetMs = Number(read.now_ns) / 1e6 - Date.now();
    const tbody = document.querySelector("#consumers tbody");
    if (!tbody) return;
    const shown = rowsByKey(tbody);
    for (const r of read.rows) {
      const tr = shown.get(keyOf(r.queue, r.group, r.consumer));
      // Numbers on both sides (JSON's nanoseconds are doubles here): one rounding.
      if (!tr || Number(tr.dataset.registered) !== Number(r.registered_at_ns)) continue;
      const age = tr.querySelector("td.age");
      if (Number(r.last_heartbeat_ns) < Number(age.dataset.hb)) continue;
      age.dataset.hb = String(r.last_heartbeat_ns);
      tr.querySelector("td.num").textContent = thousands(r.lease_count);
      tr.dataset.leases = String(r.lease_count);
    }
    planStuckRead();
    tick();
  }

  // -- status -------------------------------------------------------------------------------
  function setLive(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }
  function showBanner(text) {
    banner.textContent = text;
    banner.hidden = !text;
  }

  // -- when the page cannot read: nothing it shows is claimed to be live ---------------------
  // Redis unreachable (the stream's `status`, or a 503 of the page's own read) or the service
  // gone: every row, count and card is marked unknown (greyed, its state pill "unknown") and
  // the badge is not live, until the stream says Redis answers again and a fresh read of
  // the page (which drops whatever vanished meanwhile) has landed.
  let downSince = null; // ns (the server's clock): since when the page cannot read
  let streamDown = false; // the stream's last status said Redis is unreachable
  const nowNs = () => Math.round((Date.now() + offsetMs) * 1e6);
  function cannotRead(sinceNs, text) {
    if (downSince === null) downSince = Number(sinceNs ?? nowNs());
    showBanner(
      `${text[0]} since ${isoUtc(downSince)} (${text[1]}); retrying. ` +
        `What this page shows was read at ${isoUtc(lastReadNs)} and may be out of date.`,
    );
    setLive("down", text[0]);
    markUnknown();
  }
  function markUnknown() {
    for (const tr of document.querySelectorAll("#consumers tbody tr, #groups tbody tr")) {
      tr.classList.add("unknown");
      const state = tr.querySelector(".pill:not(.stuck):not(.mark)");
      if (state && !state.classList.contains("unknown")) {
        state.title = `last read: ${state.textContent}`;
        state.className = "pill unknown";
        state.textContent = "unknown";
      }
    }
    for (const cards of document.querySelectorAll("#totals, #group-stats")) {
      cards.classList.add("unknown");
    }
  }
  function canRead() {
    downSince = null;
    for (const node of document.querySelectorAll(".unknown:not(.pill)")) {
      node.classList.remove("unknown");
    }
    showBanner("");
    if (source.readyState === EventSource.OPEN) setLive("live", "live");
  }

  // -- rendering from the page's JSON twin ---------------------------------------------------
  function rowsByKey(tbody) {
    const rows = new Map();
    for (const tr of tbody.rows) {
      const [q, g, c] = JSON.parse(tr.dataset.key);
      rows.set(keyOf(q, g, c), tr);
    }
    return rows;
  }

  function consumerRow(c) {
    const tr = document.createElement("tr");
    tr.className = `state-${c.state}${c.stuck ? " stuck" : ""}`;
    tr.dataset.state = c.state;
    tr.dataset.key = keyOf(c.queue, c.group, c.consumer);
    tr.dataset.since = String(sinceOf(c));
    tr.dataset.registered = String(c.registered_at_ns);
    tr.dataset.leases = String(c.lease_count);
    if (!page.group_page) {
      tr.append(cell(c.queue, "name"), linkCell(c.group, groupHref(c.queue, c.group), "name"));
    }
    const state = cell("");
    state.append(pill(c.state), ...marks(c));
    if (c.stuck) state.append(" ", stuckPill(), " ", noProgress());
    const age = cell("", "age");
    age.dataset.hb = String(c.last_heartbeat_ns);
    tr.append(
      cell(c.consumer, "name consumer"),
      state,
      age,
      cell(thousands(c.lease_count), "num"),
      cell(c.capacity === null || c.capacity === undefined ? "" : thousands(c.capacity), "capacity"),
      cell(isoUtc(c.registered_at_ns), "when"),
    );
    if (page.with_meta) tr.append(metaCell(c.meta, c.meta_error));
    return tr;
  }
  // The instant a consumer's progress budget counts from: its last progress, else its
  // registration (the library's `is_stuck`).
  function sinceOf(c) {
    const registered = BigInt(c.registered_at_ns);
    const progress = c.last_progress_ns === null || c.last_progress_ns === undefined
      ? 0n : BigInt(c.last_progress_ns);
    return progress > registered ? progress : registered;
  }

  function groupRow(g) {
    const tr = document.createElement("tr");
    // A planned departure (DRAINING) is not an alarm, even with nobody reading.
    const planned = g.verdict === "DRAINING";
    tr.className = (g.nobody_reading || g.below) && !planned ? "idle" : "";
    tr.dataset.queue = g.queue;
    tr.dataset.group = g.group;
    const badge = cell("");
    if (g.verdict && g.verdict !== "OK") {
      const verdict = document.createElement("span");
      verdict.className = `pill verdict ${g.verdict.toLowerCase()}`;
      verdict.title = g.reason || "";
      verdict.textContent = g.verdict;
      badge.append(verdict, " ");
    }
    if (g.nobody_reading || g.below) {
      const span = document.createElement("span");
      span.className = planned ? "pill drained" : "badge";
      span.textContent = g.nobody_reading
        ? "nobody is reading"
        : `below its minimum of ${thousands(g.min_active)}`;
      badge.append(span);
    }
    const declared = g.min_active !== null && g.min_active !== undefined;
    const stuck = cell(g.stuck === null || g.stuck === undefined ? "?" : "0", "num stuck");
    if (g.stuck) {
      const params = new URLSearchParams({ queue: g.queue, group: g.group, stuck: "1" });
      const link = document.createElement("a");
      link.className = "stuck-count";
      link.href = `${root}/group?${params}`;
      link.textContent = thousands(g.stuck);
      stuck.replaceChildren(link);
    }
    const count = (n) => (n === null || n === undefined ? "?" : thousands(n));
    const dead = cell(count(g.leases_expired), "num dead-leases");
    if (g.leases_expired) dead.classList.add("alarm");
    tr.append(
      cell(g.queue, "name"),
      linkCell(g.group, groupHref(g.queue, g.group), "name"),
      cell(thousands(g.active), "num active"),
      cell(thousands(g.stale), "num stale"),
      cell(thousands(g.expired), "num expired"),
      cell(declared ? thousands(g.min_active) : "", "num min"),
      stuck,
      cell(count(g.leases), "num leases"),
      dead,
      badge,
    );
    return tr;
  }

  function setCards(container, counts) {
    if (!container || !counts) return;
    for (const card of container.querySelectorAll("[data-total]")) {
      const name = card.dataset.total;
      if (name === "nobody_reading" && page.view === "consumers") {
        card.hidden = !counts.nobody_reading;
        card.classList.toggle("alarm", Boolean(counts.nobody_reading));
        continue;
      }
      if (name === "below" && page.view === "consumers") {
        // Shown when the group has readers, but fewer than its declared minimum.
        card.hidden = !counts.below || Boolean(counts.nobody_reading);
        card.classList.toggle("alarm", Boolean(counts.below));
        continue;
      }
      const fromReads = ["capacity", "free", "draining", "conflicts"].includes(name);
      if (fromReads && !(name in counts)) continue; // counts moved by events: left as read
      if (name === "capacity" || name === "free") { // not reported: no card, never a 0
        const told = counts[name] !== null;
        card.hidden = !told;
        if (told) card.querySelector(".n").textContent = thousands(counts[name]);
        continue;
      }
      if (name === "draining" || name === "conflicts") {
        card.hidden = !counts[name];
        card.querySelector(".n").textContent = thousands(counts[name] || 0);
        if (name === "conflicts") card.classList.toggle("alarm", counts[name] > 0);
        continue;
      }
      card.querySelector(".n").textContent = thousands(counts[name] ?? 0);
      if (["nobody_reading", "below", "stuck", "leases_expired"].includes(name)) {
        card.classList.toggle("alarm", counts[name] > 0);
      }
    }
  }

  function setPagerLink(rel, label, cursor, name) {
    const pager = document.getElementById("pager");
    let link = pager.querySelector(`a[rel="${rel}"]`);
    if (cursor === null || cursor === undefined) {
      if (link) link.remove();
      return;
    }
    const params = new URLSearchParams(location.search);
    params.set(name, String(cursor));
    if (!link) {
      link = document.createElement("a");
      link.rel = rel;
      link.textContent = label;
      if (rel === "prev") pager.querySelector("a[rel=next]")?.before(link);
      if (!link.isConnected) pager.append(link);
    }
    link.href = `?${params}`;
  }

  function renderConsumers(model) {
    const tbody = document.querySelector("#consumers tbody");
    const before = rowsByKey(tbody);
    if (model.stuck_after_ms !== null && model.stuck_after_ms !== undefined) {
      stuckAfterMs = Number(model.stuck_after_ms);
    }
    const rows = model.consumers.map((c) => {
      if (page.with_meta && c.meta) metas.set(keyOf(c.queue, c.group, c.consumer), c.meta);
      const tr = consumerRow(c);
      const old = before.get(tr.dataset.key);
      if (!old || old.className !== tr.className) tr.classList.add("changed");
      return tr;
    });
    tbody.replaceChildren(...rows);
    document.getElementById("consumers-empty").hidden = rows.length > 0;
    if (model.group) setCards(document.getElementById("group-stats"), model.group);
    setPagerLink("prev", "← Previous", model.prev_cursor, "cursor");
    setPagerLink("next", "Next →", model.next_cursor, "cursor");
    planStuckRead();
  }

  // `stuck` comes from reads (no event says a consumer made progress): a group page reads
  // itself again when a row it shows could turn stuck (its budget after its registration
  // or last progress runs out), and shows what that read says.
  let stuckAfterMs = page.stuck_after_ms === null || page.stuck_after_ms === undefined
    ? null : Number(page.stuck_after_ms);
  let stuckTimer = null;
  function planStuckRead() {
    if (stuckTimer !== null) clearTimeout(stuckTimer);
    stuckTimer = null;
    if (!page.group_page || stuckAfterMs === null) return;
    let due = null;
    for (const tr of document.querySelectorAll("#consumers tbody tr")) {
      if (tr.dataset.state !== "active" || tr.classList.contains("stuck")) continue;
      if (!(Number(tr.dataset.leases) > 0) || !tr.dataset.since) continue;
      const at = BigInt(tr.dataset.since) + BigInt(stuckAfterMs + 1) * 1000000n;
      if (due === null || at < due) due = at;
    }
    if (due === null) return;
    const waitMs = Number(due / 1000000n) - (Date.now() + offsetMs);
    stuckTimer = setTimeout(() => {
      stuckTimer = null;
      if (Number(due / 1000000n) <= Date.now() + offsetMs) scheduleRefresh(0);
      else planStuckRead(); // a wait longer than a timer holds: plan again
    }, Math.min(Math.max(0, waitMs), 2 ** 31 - 1));
  }

  // Totals the server is recounting (Redis lost or replaced its data between its reads):
  // no number the page cannot vouch for; the alarms count what this page shows, so a
  // group nobody reads is never under an all-clear.
  const RECOUNT_RETRY_MS = 2000;
  function setRecounting(container, groups) {
    container.classList.add("recounting");
    for (const card of container.querySelectorAll("[data-total]")) {
      const name = card.dataset.total;
      const alarm = name === "nobody_reading" || name === "below";
      let seen = alarm ? groups.filter((g) => g[name]).length : 0;
      if (name === "stuck") seen = groups.reduce((n, g) => n + (g.stuck || 0), 0);
      if (name === "leases_expired") {
        seen = groups.reduce((n, g) => n + (g.leases_expired || 0), 0);
      }
      card.querySelector(".n").textContent = seen ? `≥ ${thousands(seen)}` : "…";
      card.classList.toggle("alarm", seen > 0);
    }
  }

  function renderGroups(model) {
    const tbody = document.querySelector("#groups tbody");
    tbody.replaceChildren(...model.groups.map(groupRow));
    document.getElementById("groups-empty").hidden = model.groups.length > 0;
    const cards = document.getElementById("totals");
    const recounting = !model.totals;
    if (recounting) {
      setRecounting(cards, model.groups);
      scheduleRefresh(RECOUNT_RETRY_MS);
    } else {
      cards.classList.remove("recounting");
      setCards(cards, model.totals);
    }
    document.getElementById("recounting").hidden = !recounting;
    document.getElementById("totals-note").hidden = recounting;
    const readAt = document.getElementById("totals-read-at");
    if (readAt && model.totals) {
      readAt.dataset.ns = String(model.totals.read_at_ns);
      readAt.textContent = isoUtc(model.totals.read_at_ns);
    }
    const stuckAt = document.getElementById("stuck-read-at");
    if (stuckAt && model.totals && model.totals.stuck_read_at_ns) {
      stuckAt.dataset.ns = String(model.totals.stuck_read_at_ns);
      stuckAt.textContent = isoUtc(model.totals.stuck_read_at_ns);
    }
    const count = document.querySelector("#pager .count");
    if (count) {
      const of = model.totals ? thousands(model.totals.groups) : "… (recounting)";
      count.textContent = `${thousands(model.groups.length)} group(s) on this page, of ${of}`;
    }
    const pager = document.getElementById("pager");
    pager.dataset.next = model.next_cursor || "";
    pager.dataset.prev = model.prev_cursor || "";
    setPagerLink("prev", "← Previous", model.prev_cursor, "cursor");
    setPagerLink("next", "Next →", model.next_cursor, "cursor");
  }

  // -- what the page knows: its last read, and every event after it ---------------------------
  // A read (the page itself, or its JSON twin) shows the fleet at its `now_ns`; the stream's
  // events after that instant are applied to it here, so a live page costs what changes.
  let lastReadNs = Number(page.now_ns);
  let ttlMs = Number(page.ttl_ms);
  let hasPrev = page.prev_cursor !== null && page.prev_cursor !== undefined;
  let hasNext = page.next_cursor !== null && page.next_cursor !== undefined;
  const known = new Map(); // consumer key -> its state, from the events since the last read
  const metas = new Map(); // consumer key -> its metadata, from the reads (events carry none)
  let refreshTimer = null;
  let refreshing = false;
  let again = false;
  let pending = []; // events that came while a read was on its way

  async function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    try {
      const response = await fetch(location.pathname + location.search, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      });
      const model = await response.json();
      if (response.status === 404 && page.view === "consumers") {
        // The group is gone (its consumers left, or Redis lost them): nothing to show.
        model.now_ns = nowNs();
        model.consumers = [];
        model.next_cursor = model.prev_cursor = null;
        if (page.group_page) {
          model.group = {
            active: 0, stale: 0, expired: 0, min_active: null, nobody_reading: true, below: false,
          };
        }
      } else if (!response.ok) {
        const unreachable = model.since_ns !== undefined;
        const other = model.error === "other_protocol_version"; // Redis answered
        if (response.status === 503 || unreachable || other) {
          cannotRead(model.since_ns, [
            unreachable ? "Redis unreachable" : other ? "Cannot read this prefix" : "Cannot read Redis",
            model.message || response.statusText,
          ]);
        } else {
          showBanner(`${model.message || response.statusText} (retrying)`);
        }
        again = true;
        return;
      }
      lastReadNs = Number(model.now_ns);
      known.clear();
      offsetMs = lastReadNs / 1e6 - Date.now();
      setTtl(model.ttl_ms, model.ttl_source);
      const readAt = document.getElementById("read-at");
      if (readAt) readAt.textContent = isoUtc(model.now_ns);
      if (page.view === "groups") {
        loadGroups(model.groups, model.totals);
        renderGroups(model);
      } else {
        hasPrev = model.prev_cursor !== null;
        hasNext = model.next_cursor !== null;
        renderConsumers(model);
      }
      const queued = pending;
      pending = [];
      for (const event of queued) applyEvent(event);
      tick();
      // A fresh read: true again, unless the stream still says Redis cannot be reached.
      if (streamDown) markUnknown();
      else canRead();
    } catch (error) {
      cannotRead(null, ["The dashboard cannot reach its server", error.message]);
      again = true;
    } finally {
      refreshing = false;
      for (const event of pending) applyEvent(event);
      pending = [];
      if (again) {
        again = false;
        scheduleRefresh(1000);
      }
    }
  }

  function scheduleRefresh(delayMs = 250) {
    if (refreshTimer !== null) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      refresh();
    }, delayMs);
  }

  const TTL_SOURCES = {
    option: "--ttl-ms",
    group: "stored for this group",
    prefix: "stored for the prefix",
    default: "the default: none stored",
  };
  function setTtl(value, source) {
    if (value === undefined || value === null) return;
    ttlMs = Number(value);
    const ttl = document.getElementById("ttl");
    if (!ttl) return;
    ttl.textContent = `${thousands(ttlMs)} ms`;
    ttl.dataset.source = source;
    const named = ttl.nextElementSibling;
    if (named && TTL_SOURCES[source]) named.textContent = `(${TTL_SOURCES[source]})`;
  }

  // -- events ---------------------------------------------------------------------------------
  const AFTER = {
    joined: "active",
    recovered: "active",
    stale: "stale",
    expired: "expired",
    left: null,
    pruned: null,
  };
  // Protocol version 2's events change what a read shows (marks, draining, the verdict),
  // not a state: the page is read again (debounced).
  const READ_AGAIN = new Set(["draining", "drain_requested", "conflict", "restarted"]);
  function classify(ageMs) {
    if (ageMs <= ttlMs) return "active";
    return ageMs <= 2 * ttlMs ? "stale" : "expired";
  }
  // The state a consumer was in just before `event` (null: not tracked; undefined: the
  // page cannot tell, and takes a fresh read).
  function before(event, key, tr) {
    if (known.has(key)) return known.get(key);
    if (tr) return tr.dataset.state;
    switch (event.kind) {
      case "joined":
        return null;
      case "stale":
        return "active";
      case "expired":
        return "stale";
      case "pruned":
        return "expired";
      case "left":
        return classify((Number(event.at_ns) - Number(event.last_heartbeat_ns)) / 1e6);
      default:
        return undefined; // recovered: from stale or from expired
    }
  }
  function move(counts, from, to) {
    if (from) counts[from] = Math.max(0, (counts[from] || 0) - 1);
    if (to) counts[to] = (counts[to] || 0) + 1;
  }

  function applyEvent(event) {
    if (refreshing) {
      pending.push(event);
      return;
    }
    if (Number(event.at_ns) <= lastReadNs) return; // the last read shows it already
    const key = keyOf(event.queue, event.group, event.consumer);
    if (READ_AGAIN.has(event.kind)) { // a mark or a verdict changed: the next read says which
      scheduleRefresh(1000);
      return;
    }
    const to = AFTER[event.kind];
    if (to === undefined) return;
    if (page.view === "groups") applyToGroups(event, key, to);
    else applyToConsumers(event, key, to);
    if (to === null) known.set(key, null);
    else known.set(key, to);
  }

  // The overview shows one page of groups (read from the server a page at a time) and the
  // fleet's totals (one shared read of every group, labelled with its time). An event of a
  // group on the page moves its row and the totals; one of another group moves the
  // totals' counts of consumers, and, when it may change what the page cannot count (a
  // group that comes or goes, or that somebody starts or stops reading), reads the page
  // again, at most once every GROUPS_REFRESH_MS: what the page shows costs the groups on it.
  const GROUPS_REFRESH_MS = 1000;
  const groupKey = (queue, group) => JSON.stringify([queue, group]);
  let shownGroups = new Map(); // group key -> its counts, for the groups on the page
  let totals = null; // the fleet's totals (null: the server is recounting them)
  function loadGroups(groups, fresh) {
    shownGroups = new Map(groups.map((g) => [groupKey(g.queue, g.group), { ...g }]));
    totals = fresh ? { ...fresh } : null;
  }
  if (page.view === "groups") {
    loadGroups(page.groups || [], page.totals);
    if (!page.totals) scheduleRefresh(RECOUNT_RETRY_MS);
  }

  let renderTimer = null;
  function applyToGroups(event, key, to) {
    const from = before(event, key, null);
    if (from === undefined) {
      scheduleRefresh();
      return;
    }
    if (totals) move(totals, from, to);
    const g = shownGroups.get(groupKey(event.queue, event.group));
    if (g) {
      const was = { nobody: g.active === 0, below: isBelow(g), gone: isGone(g) };
      move(g, from, to);
      // Who is draining is known to reads only: such a group's verdict is read again.
      if (g.draining) scheduleRefresh(GROUPS_REFRESH_MS);
      else Object.assign(g, countsVerdict(g));
      if (totals) {
        totals.nobody_reading += (g.active === 0) - was.nobody;
        totals.below += isBelow(g) - was.below;
        totals.groups -= isGone(g) - was.gone;
      }
    } else if (from === null || to === null || from === "active" || to === "active") {
      scheduleRefresh(GROUPS_REFRESH_MS);
    }
    // Stuck counts come from reads: a stuck one may have left the active state.
    if (from === "active" && ((g && g.stuck) || (totals && totals.stuck))) {
      scheduleRefresh(GROUPS_REFRESH_MS);
    }
    if (renderTimer === null) {
      renderTimer = setTimeout(() => {
        renderTimer = null;
        renderGroups(groupsModel());
      }, 50);
    }
  }
  const isBelow = (g) => g.min_active !== null && g.min_active !== undefined
    && g.active < g.min_active;
  // A declared group stays listed without consumers: that is when it matters most.
  const isGone = (g) => g.active + g.stale + g.expired === 0
    && (g.min_active === null || g.min_active === undefined);

  // The verdict of a group's counts and minimum, as the library judges a row of the list
  // from them (redis_presence/verdict.py: no progress nor draining in the list), for a
  // group whose counts the events moved since the page was read.
  function countsVerdict(g) {
    const declared = g.min_active !== null && g.min_active !== undefined;
    const wanted = declared ? g.min_active : 1;
    const short = Math.max(0, wanted - g.active);
    const consumers = (n) => (n === 1 ? "1 consumer" : `${n} consumers`);
    if (g.active === 0 && (short || g.stale)) {
      const others = [[g.stale, "stale"], [g.expired, "expired"]]
        .filter(([n]) => n).map(([n, state]) => `${n} ${state}`).join(", ");
      let reason = "nobody reading: no consumer";
      if (others) reason = `nobody reading: 0 active (${others})`;
      else if (declared) reason += `, at least ${g.min_active} wanted`;
      return { verdict: "STOPPED", reason };
    }
    const faults = [];
    if (short) faults.push(`below its minimum: ${g.active} active, at least ${wanted} wanted`);
    if (g.stale) faults.push(`${consumers(g.stale)} stale (missed beats without draining)`);
    if (faults.length) return { verdict: "DEGRADED", reason: faults.join("; ") };
    const least = g.min_active ? `, at least ${g.min_active} wanted` : "";
    return { verdict: "OK", reason: `${g.active} active${least}` };
  }

  // The groups page's model (what its JSON twin says), from what the events moved.
  function groupsModel() {
    const groups = [...shownGroups.values()].filter((g) => !isGone(g)).map((g) => ({
      ...g,
      nobody_reading: g.active === 0,
      below: isBelow(g),
    }));
    const pager = document.getElementById("pager");
    return {
      groups,
      totals,
      next_cursor: pager.dataset.next || null,
      prev_cursor: pager.dataset.prev || null,
    };
  }

  // A consumer list: its rows, and the group's cards on a group page.
  function compareKeys(a, b) {
    for (let i = 0; i < 3; i += 1) {
      if (a[i] < b[i]) return -1;
      if (a[i] > b[i]) return 1;
    }
    return 0;
  }
  function encodeCursor(direction, key) {
    const bytes = new TextEncoder().encode(JSON.stringify([direction, ...key]));
    let binary = "";
    for (const byte of bytes) binary += String.fromCharCode(byte);
    return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function wanted(event, state) {
    if (page.queue && event.queue !== page.queue) return false;
    if (page.group && event.group !== page.group) return false;
    if (page.search && !event.consumer.toLowerCase().includes(page.search.toLowerCase())) {
      return false;
    }
    if (page.stuck && state !== "active") return false; // only an active row is stuck
    return !(page.states && page.states.length) || page.states.includes(state);
  }

  const groupStats = document.getElementById("group-stats");
  const cardCounts = () => {
    const counts = {};
    for (const name of ["active", "stale", "expired"]) {
      const card = groupStats.querySelector(`[data-total="${name}"] .n`);
      counts[name] = Number(card.textContent.replace(/,/g, ""));
    }
    const min = groupStats.querySelector('[data-total="below"]')?.dataset.min;
    counts.min_active = min ? Number(min) : null;
    return counts;
  };

  function applyToConsumers(event, key, to) {
    const tbody = document.querySelector("#consumers tbody");
    const tr = rowsByKey(tbody).get(key);
    const from = before(event, key, tr);
    if (groupStats && page.group_page) {
      if (from === undefined) {
        scheduleRefresh();
      } else {
        const counts = cardCounts();
        move(counts, from, to);
        counts.nobody_reading = counts.active === 0;
        counts.below = counts.min_active !== null && counts.active < counts.min_active;
        setCards(groupStats, counts);
      }
    }
    if (to === null || (tr && !wanted(event, to))) {
      if (tr) tr.remove();
    } else if (tr) {
      // Its metadata cell stays; `stuck` is a flag on an active row: cleared when it leaves
      // active, and left for the next read to tell when it comes back.
      tr.className = `state-${to} changed`;
      tr.dataset.state = to;
      const stateCell = tr.querySelector(".pill").parentElement;
      stateCell.replaceChildren(pill(to), ...[...stateCell.querySelectorAll(".mark")].flatMap((m) => [" ", m]));
      if (event.kind === "recovered" || event.kind === "joined") {
        tr.querySelector("td.age").dataset.hb = String(event.last_heartbeat_ns);
        tr.dataset.registered = String(event.registered_at_ns);
        tr.querySelector("td.num").textContent = thousands(event.lease_count);
        tr.dataset.leases = String(event.lease_count);
      }
    } else if (page.meta && wanted(event, to)) {
      scheduleRefresh(); // a search by metadata: whether it matches is the page's read to say
    } else if (wanted(event, to) && !page.stuck) { // no event says a consumer is stuck
      const meta = metas.get(key);
      insertRow(tbody, { ...event, state: to, meta: meta || {} });
      // Events carry no metadata: a consumer the page has not read yet is read once (a
      // debounced read of the page, so a burst of joins costs one).
      if (page.with_meta && meta === undefined) scheduleRefresh(1000);
    }
    document.getElementById("consumers-empty").hidden = tbody.rows.length > 0;
    planStuckRead();
    tick(); // the ages the row shows, as of now
  }

  function insertRow(tbody, c) {
    const key = [c.queue, c.group, c.consumer];
    const rows = [...tbody.rows];
    const keys = rows.map((tr) => JSON.parse(tr.dataset.key));
    if ((hasPrev || hasNext) && !rows.length) return; // another page's: left to them
    // The page's bounds are its least and greatest keys (the rows may be sorted otherwise:
    // tables.js keeps a sort the reader chose).
    const ends = (sign) => keys.reduce((a, k) => (compareKeys(k, a) * sign > 0 ? k : a), keys[0]);
    if (hasPrev && compareKeys(key, ends(-1)) < 0) return;
    if (hasNext && compareKeys(key, ends(1)) > 0) return;
    const tr = consumerRow(c);
    tr.classList.add("changed");
    const at = keys.findIndex((k) => compareKeys(k, key) > 0);
    if (at < 0) tbody.append(tr);
    else rows[at].before(tr);
    if (tbody.rows.length > (page.limit || 50)) {
      const byKey = [...tbody.rows].sort((a, b) =>
        compareKeys(JSON.parse(a.dataset.key), JSON.parse(b.dataset.key)));
      byKey.pop().remove(); // past the page's end: the next page's
      hasNext = true;
      const last = JSON.parse(byKey[byKey.length - 1].dataset.key);
      setPagerLink("next", "Next →", encodeCursor("a", last), "cursor");
    }
  }

  const params = new URLSearchParams();
  if (page.queue) params.set("queue", page.queue);
  if (page.group) params.set("group", page.group);
  const source = new EventSource(`${root}/api/v1/events?${params}`);
  source.addEventListener("hello", () => {
    // A new stream: a `status` follows at once if Redis cannot be reached.
    streamDown = false;
    if (downSince === null) setLive("live", "live");
    scheduleRefresh(0); // the page was read before the stream began: read once more
  });
  source.addEventListener("presence", (message) => applyEvent(JSON.parse(message.data)));
  source.addEventListener("rows", (message) => applyRows(JSON.parse(message.data)));
  // Events were lost (a trimmed log, Redis lost its data, an outage): a fresh read.
  source.addEventListener("snapshot", () => scheduleRefresh(0));
  source.addEventListener("status", (message) => {
    const status = JSON.parse(message.data);
    if (status.redis_up && !status.message) {
      streamDown = false;
      scheduleRefresh(0); // live again once this read lands (a `snapshot` follows too)
    } else {
      // Unreachable, or Redis answers but the prefix was written by another protocol version.
      streamDown = true;
      cannotRead(status.since_ns, [status.redis_up ? "Cannot read this prefix" : "Redis unreachable", status.message]);
    }
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.OPEN) return;
    if (downSince === null) setLive("static", "reconnecting…");
    scheduleRefresh(0); // can the page still read? (if not, its rows turn unknown)
  });
  planStuckRead();
  tick();

  // -- one consumer's page --------------------------------------------------------------------
  // Live like the others, on its group's event stream: its `rows` (its beats and leases, read
  // again at each interval) move its age and leases; an event of its own (it joined, left,
  // went stale...) reads the page again and puts its new content in place (parsed, never
  // run; every name in it escaped by the server). The badge says live while the stream is.
  // The consumer page's drain form (only with serve --drain-token): the token the person
  // types goes in a header of a same-origin JSON request, never in the page or a URL.
  async function askToDrain(submitted) {
    const form = submitted.target;
    if (!(form instanceof HTMLFormElement) || form.id !== "drain-form") return;
    submitted.preventDefault();
    // The page may be read again meanwhile: what to say is written where the form is then.
    const say = (text) => {
      const said = document.getElementById("drain-result");
      if (said) said.textContent = text;
    };
    const button = form.querySelector("button");
    button.disabled = true;
    try {
      const response = await fetch(`${root}/api/v1/drain`, {
        method: "POST",
        credentials: "same-origin",
        cache: "no-store",
        headers: {
          "Content-Type": "application/json",
          "X-Presence-Drain-Token": form.elements.token.value,
        },
        body: JSON.stringify({ queue: page.queue, group: page.group, consumer: page.consumer }),
      });
      const body = await response.json().catch(() => ({}));
      if (response.ok) {
        form.elements.token.value = "";
        say("Drain requested: its next beat's reply tells it.");
      } else {
        say(`Not requested: ${body.message || response.statusText}`);
      }
    } catch (error) {
      say(`Not requested: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  }

  function watchConsumer() {
    const params = new URLSearchParams({ queue: page.queue, group: page.group });
    const ttl = Number(page.ttl_ms);
    let stream = null;
    let down = false;
    let reading = false;
    let readAgain = false;
    const mine = (m) => m.queue === page.queue && m.group === page.group
      && m.consumer === page.consumer;
    function ageTick() {
      const nowMs = Date.now() + offsetMs;
      const age = document.querySelector("#consumer-stats [data-hb]");
      if (age) {
        const ms = nowMs - Number(age.dataset.hb) / 1e6;
        const most = { active: 1, stale: 2 }[age.dataset.state];
        age.textContent = most !== undefined && ms > most * ttl ? `≤ ${humanAge(ms)}` : humanAge(ms);
      }
      const since = document.querySelector("#consumer-facts [data-since]");
      const span = document.querySelector("#consumer-facts .no-progress");
      if (since && span) {
        span.textContent = `no progress for ${lasting(nowMs - Number(since.dataset.since) / 1e6)}`;
      }
    }
    async function readPage() {
      if (reading) {
        readAgain = true;
        return;
      }
      reading = true;
      try {
        const response = await fetch(location.pathname + location.search, {
          headers: { Accept: "text/html" },
          credentials: "same-origin",
          cache: "no-store",
        });
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        const main = fresh.querySelector("main");
        const data = fresh.getElementById("page-data");
        if (main && data) {
          const model = JSON.parse(data.textContent || "{}");
          if (model.now_ns) offsetMs = Number(model.now_ns) / 1e6 - Date.now();
          const nodes = [...main.childNodes].map((node) => document.adoptNode(node));
          // A drain form being typed in stays itself (its focus and token), told what the
          // read says.
          const form = document.getElementById("drain-form");
          const typing = form && (form.contains(document.activeElement) || form.elements.token.value);
          document.querySelector("main").replaceChildren(...nodes);
          const fresh = document.getElementById("drain-form");
          if (fresh && typing) {
            form.querySelector(".drain-result").textContent = fresh.querySelector(".drain-result").textContent;
            fresh.replaceWith(form);
          }
          const readAt = document.getElementById("read-at");
          if (readAt && model.now_ns) readAt.textContent = isoUtc(model.now_ns);
          if (!down) setLive("live", "live");
        }
        ageTick();
      } catch (error) {
        setLive("static", "reconnecting…");
      } finally {
        reading = false;
        if (readAgain) {
          readAgain = false;
          setTimeout(readPage, 1000);
        }
      }
    }
    stream = new EventSource(`${root}/api/v1/events?${params}`);
    stream.addEventListener("hello", () => {
      down = false;
      setLive("live", "live");
      readPage(); // the page was read before the stream began: read it once more
    });
    stream.addEventListener("presence", (message) => {
      if (mine(JSON.parse(message.data))) readPage();
    });
    stream.addEventListener("rows", (message) => {
      const read = JSON.parse(message.data);
      const row = read.rows.find(mine);
      const age = document.querySelector("#consumer-stats [data-hb]");
      if (!row || !age || Number(row.last_heartbeat_ns) < Number(age.dataset.hb)) return;
      offsetMs = Number(read.now_ns) / 1e6 - Date.now();
      age.dataset.hb = String(row.last_heartbeat_ns);
      const leases = document.querySelector('#consumer-stats [data-total="leases"] .n');
      if (leases) leases.textContent = thousands(row.lease_count);
      ageTick();
    });
    stream.addEventListener("snapshot", () => readPage());
    stream.addEventListener("status", (message) => {
      const status = JSON.parse(message.data);
      down = !(status.redis_up && !status.message);
      if (down) setLive("down", status.redis_up ? "cannot read" : "Redis unreachable");
      else readPage();
    });
    stream.addEventListener("error", () => {
      if (stream.readyState !== EventSource.OPEN) setLive("static", "reconnecting…");
    });
    setInterval(ageTick, 1000);
    ageTick();
  }
})();
