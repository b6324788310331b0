'use strict';
// watertight's dashboard: one EventSource, one frame per sample. Every name
// shown comes from the program (breaker names, registry keys), so text goes
// in through textContent only.
(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  const KINDS = [
    ['circuit', 'Breakers'], ['bulkhead', 'Bulkheads'], ['pool', 'Worker pools'],
    ['budget', 'Retry budgets'], ['throttler', 'Throttlers'], ['concurrency', 'Retry concurrency'],
    ['hedge', 'Hedges'], ['limiter', 'Adaptive limiters'], ['balancer', 'Balancers'],
  ];
  const KIND_TITLE = Object.fromEntries(KINDS);
  const LABELS = {
    calls: 'calls', failure: 'failures', slow: 'slow calls', saturated: 'saturated', rejected_s: 'rejected/s',
    opens: 'opens', trials: 'trials', in_use: 'in use', max: 'max', waiting: 'waiting', admitted_s: 'admitted/s',
    guaranteed: 'guaranteed', borrowed: 'borrowed',
    busy: 'busy', workers: 'workers', queued: 'queued', queue: 'queue size', dropped_s: 'dropped/s', done_s: 'done/s',
    balance: 'balance', refused: 'refused', refused_s: 'refused/s', granted_s: 'granted/s', reject_p: 'reject p.',
    requests: 'requests', accepts: 'accepts', in_flight: 'in flight', limit: 'limit', active: 'active',
    sent: 'sent', won: 'won', sent_s: 'sent/s', won_s: 'won/s', extra: 'extra', delay: 'delay',
    suppressed: 'suppressed', algorithm: 'algorithm', hosts: 'hosts', ejected: 'ejected',
    max_ejected: 'max ejected', strategy: 'strategy', ejected_hosts: 'ejected hosts',
  };
  const WIDE = new Set(['trials', 'ejected_hosts', 'algorithm', 'strategy']);
  // What the two charted values of each kind are.
  const SERIES = {
    circuit: ['failure %', 'slow %'], bulkhead: ['in use', 'waiting'], pool: ['busy', 'queued'],
    budget: ['balance', 'refused/s'], throttler: ['reject %', ''], concurrency: ['in flight', 'limit'],
    hedge: ['sent/s', 'won/s'], limiter: ['in flight', 'limit'], balancer: ['ejected', ''],
  };
  // Icons: a shape for each level, so that state reads without colour.
  const ICONS = {
    ok: 'M2 6.5 5 9.5 10 3', // check
    warn: 'M6 1.5 11 10.5H1Z', // triangle
    bad: 'M2.5 2.5 9.5 9.5M9.5 2.5 2.5 9.5', // cross
    off: 'M2.5 6H9.5', // dash
  };
  const LEVEL_WORD = { ok: 'ok', warn: 'warning', bad: 'problem', off: 'off' };

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const svgEl = (tag, attrs) => {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  };

  const state = {
    intervalMs: 1000, historyMs: 300000, offset: 0, lastT: 0,
    rows: new Map(), // id -> {row, hist: [[t, a, b]], card, parts}
    changes: [], reasons: [], reasonsHist: [], sections: new Map(),
  };

  function base() {
    const p = location.pathname;
    return location.origin + (p.endsWith('/') ? p : p + '/');
  }

  // ---- connection ----
  let source = null;
  let retry = null;
  function connect() {
    clearTimeout(retry);
    setConn('connecting', 'connecting…');
    source = new EventSource(new URL('events', base()).href);
    source.onopen = () => setConn('live', 'live');
    source.onmessage = (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      if (msg.type === 'init') init(msg); else if (msg.type === 'tick') tick(msg, true);
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        setConn('reconnecting', 'disconnected: retrying in 5 s');
        source.close();
        retry = setTimeout(connect, 5000);
      } else {
        setConn('reconnecting', 'reconnecting…');
      }
    };
  }
  function setConn(s, text) {
    const c = $('conn');
    c.dataset.conn = s;
    c.textContent = text;
  }

  // ---- frames ----
  function init(m) {
    state.intervalMs = m.interval_ms || 1000;
    state.historyMs = m.history_ms || 0;
    $('interval').textContent = m.interval_ms >= 1000 && m.interval_ms % 1000 === 0
      ? (m.interval_ms === 1000 ? 'second' : m.interval_ms / 1000 + ' seconds') : m.interval_ms + ' ms';
    $('history').textContent = state.historyMs > 0 ? fmtDur(state.historyMs) : 'minutes since this page opened';
    for (const ent of state.rows.values()) ent.card.remove();
    state.rows.clear();
    const times = m.times || [];
    const series = m.series || {};
    state.pendingHist = new Map();
    for (const id in series) {
      const h = [];
      series[id].forEach((v, i) => { if (v) h.push([times[i], v[0], v[1]]); });
      state.pendingHist.set(id, h);
    }
    state.reasonsHist = times.map((t, i) => [t, (m.reasons_series || [])[i] || 0]);
    state.changes = (m.changes || []).slice();
    if (m.now) tick(m.now, false); else render();
  }

  function tick(f, fresh) {
    state.offset = f.t - Date.now();
    state.lastT = f.t;
    const seen = new Set();
    let added = false;
    for (const r of f.rows || []) {
      seen.add(r.id);
      let ent = state.rows.get(r.id);
      if (!ent) {
        ent = { hist: (state.pendingHist && state.pendingHist.get(r.id)) || [] };
        ent.card = makeCard(r, ent);
        state.rows.set(r.id, ent);
        added = true;
      }
      ent.row = r;
      const h = ent.hist;
      if (!h.length || h[h.length - 1][0] < f.t) h.push([f.t, r.values[0], r.values[1]]);
      prune(h, f.t);
    }
    for (const [id, ent] of state.rows) {
      if (!seen.has(id)) { ent.card.remove(); state.rows.delete(id); }
    }
    if (added) placeCards(f.rows || []);
    if (fresh) state.reasonsHist.push([f.t, f.reasons_rate || 0]);
    prune(state.reasonsHist, f.t);
    state.reasons = f.reasons || [];
    if (f.changes && f.changes.length) {
      state.changes.push(...f.changes);
      if (state.changes.length > 1000) state.changes.splice(0, state.changes.length - 1000);
    }
    render();
  }

  function prune(h, now) {
    if (state.historyMs <= 0) {
      if (h.length > 3600) h.splice(0, h.length - 3600);
      return;
    }
    let i = 0;
    while (i < h.length && h[i][0] < now - state.historyMs) i++;
    if (i) h.splice(0, i);
  }

  // ---- cards ----
  function section(kind) {
    let s = state.sections.get(kind);
    if (s) return s;
    const d = el('details', 'kind');
    d.open = true;
    d.dataset.kind = kind;
    const sum = el('summary');
    sum.append(el('h2', '', KIND_TITLE[kind] || kind), el('span', 'count muted'));
    d.append(sum);
    const body = el('div', 'groups');
    d.append(body);
    s = { details: d, count: sum.lastChild, body, groups: new Map() };
    state.sections.set(kind, s);
    // sections keep the order of KINDS
    const order = KINDS.map((k) => k[0]);
    const after = [...state.sections.keys()].filter((k) => order.indexOf(k) > order.indexOf(kind))
      .map((k) => state.sections.get(k).details).filter((e) => e.isConnected)
      .sort((a, b) => order.indexOf(a.dataset.kind) - order.indexOf(b.dataset.kind))[0];
    $('kinds').insertBefore(d, after || null);
    return s;
  }

  function group(kind, name, isRegistry) {
    const s = section(kind);
    const key = isRegistry ? 'r:' + name : '';
    let g = s.groups.get(key);
    if (g) return g;
    const box = el('div', 'group');
    box.dataset.group = name;
    let head = null;
    if (isRegistry) {
      head = el('h3', 'group-name');
      box.append(head);
    }
    const cards = el('div', 'cards');
    box.append(cards);
    if (isRegistry) s.body.append(box); else s.body.prepend(box);
    g = { box, head, cards, name };
    s.groups.set(key, g);
    return g;
  }

  function makeCard(r) {
    const c = el('article', 'card');
    c.dataset.id = r.id;
    c.dataset.kind = r.kind;
    const head = el('header');
    const badge = el('span', 'badge');
    const icon = svgEl('svg', { viewBox: '0 0 12 12', 'aria-hidden': 'true' });
    const iconPath = svgEl('path', { fill: 'none', stroke: 'currentColor', 'stroke-width': '2', 'stroke-linecap': 'round', 'stroke-linejoin': 'round' });
    icon.append(iconPath);
    const word = el('span', 'state');
    badge.append(icon, word);
    const title = el('h3', 'name', r.name || r.group);
    title.title = r.name ? r.group + ' / ' + r.name : r.group;
    head.append(title, badge);
    const why = el('p', 'why');
    const fields = el('dl', 'fields');
    const spark = svgEl('svg', { class: 'spark', viewBox: '0 0 160 32', preserveAspectRatio: 'none', role: 'img' });
    const axis = svgEl('path', { class: 'axis', d: 'M0 31.5H160' });
    const pa = svgEl('path', { class: 'a' });
    const pb = svgEl('path', { class: 'b' });
    spark.append(axis, pa, pb);
    const legend = el('div', 'legend');
    const names = SERIES[r.kind] || ['', ''];
    if (names[0]) legend.append(el('span', 'la', names[0]));
    if (names[1]) legend.append(el('span', 'lb', names[1]));
    c.append(head, why, fields, spark, legend);
    c._parts = { badge, iconPath, word, why, fields, pa, pb, spark, fieldEls: new Map() };
    return c;
  }

  // placeCards puts every card in its group in the server's order.
  function placeCards(rows) {
    for (const r of rows) {
      const ent = state.rows.get(r.id);
      if (!ent) continue;
      const g = group(r.kind, r.group, r.name !== undefined && r.name !== '');
      g.cards.append(ent.card);
    }
  }

  function updateCard(ent) {
    const r = ent.row;
    const c = ent.card;
    const p = c._parts;
    if (c.dataset.level !== r.level) {
      c.dataset.level = r.level;
      p.badge.dataset.level = r.level;
      p.iconPath.setAttribute('d', ICONS[r.level] || ICONS.ok);
    }
    if (p.word.textContent !== r.state) p.word.textContent = r.state;
    c.dataset.state = r.state;
    // why: the rule that tripped, its words, the time until half-open
    let why = '';
    if (r.code) why += 'tripped by ' + r.code;
    if (r.why) why += (why ? ': ' : '') + r.why;
    if (r.until) {
      const left = Math.max(0, r.until - (Date.now() + state.offset));
      why += (why ? ' · ' : '') + 'half-open in ' + (left / 1000).toFixed(left < 10000 ? 1 : 0) + ' s';
    }
    if (p.why.textContent !== why) p.why.textContent = why;
    p.why.dataset.code = r.code || '';
    const f = r.fields || [];
    const keep = new Set();
    for (let i = 0; i + 1 < f.length; i += 2) {
      const k = f[i];
      const v = f[i + 1];
      keep.add(k);
      let dd = p.fieldEls.get(k);
      if (!dd) {
        const wrap = el('div', WIDE.has(k) ? 'wide' : '');
        wrap.append(el('dt', '', LABELS[k] || k.replace(/_/g, ' ')));
        dd = el('dd');
        dd.dataset.f = k;
        wrap.append(dd);
        p.fields.append(wrap);
        p.fieldEls.set(k, dd);
      }
      if (dd.textContent !== v) dd.textContent = v;
    }
    for (const [k, dd] of p.fieldEls) {
      if (!keep.has(k)) { dd.parentNode.remove(); p.fieldEls.delete(k); }
    }
    drawSpark(ent);
  }

  function drawSpark(ent) {
    const r = ent.row;
    const p = ent.card._parts;
    const h = ent.hist;
    const W = 160, H = 32;
    const span = state.historyMs > 0 ? state.historyMs : Math.max(state.intervalMs * 60, h.length ? state.lastT - h[0][0] : 1);
    const t0 = state.lastT - span;
    let top = r.max || 0;
    for (const q of h) top = Math.max(top, q[1], q[2] || 0);
    if (top <= 0) top = 1;
    const x = (t) => ((t - t0) / span * W).toFixed(1);
    const y = (v) => (H - 1 - (v / top) * (H - 3)).toFixed(1);
    const gap = state.intervalMs * 2.5;
    let a = '', b = '', runStart = null, prev = null;
    const names = SERIES[r.kind] || ['', ''];
    for (const q of h) {
      if (prev === null || q[0] - prev[0] > gap) {
        if (runStart !== null) a += 'L' + x(prev[0]) + ' ' + (H - 1) + 'Z';
        a += 'M' + x(q[0]) + ' ' + (H - 1) + 'L' + x(q[0]) + ' ' + y(q[1]);
        b += 'M' + x(q[0]) + ' ' + y(q[2]);
        runStart = q;
      } else {
        a += 'L' + x(q[0]) + ' ' + y(q[1]);
        b += 'L' + x(q[0]) + ' ' + y(q[2]);
      }
      prev = q;
    }
    if (prev !== null) a += 'L' + x(prev[0]) + ' ' + (H - 1) + 'Z';
    p.pa.setAttribute('d', a);
    p.pb.setAttribute('d', names[1] ? b : '');
    const v = r.values || [0, 0];
    p.spark.setAttribute('aria-label', names[0] + ' ' + v[0] + (names[1] ? ', ' + names[1] + ' ' + v[1] : '') +
      ' now; chart of the last ' + fmtDur(span));
  }

  // ---- filter ----
  function terms() {
    return $('filter').value.toLowerCase().split(/\s+/).filter(Boolean);
  }
  function matches(text, ts) {
    const t = text.toLowerCase();
    return ts.every((w) => t.includes(w));
  }
  function rowText(r) {
    return [r.kind, KIND_TITLE[r.kind] || '', r.group, r.name || '', r.state, LEVEL_WORD[r.level] || '', r.code || ''].join(' ');
  }

  // ---- render ----
  function render() {
    const ts = terms();
    const problems = $('problems').checked;
    let shown = 0;
    const counts = new Map(); // kind -> {total, byState}
    for (const ent of state.rows.values()) {
      const r = ent.row;
      let k = counts.get(r.kind);
      if (!k) { k = { total: 0, states: new Map() }; counts.set(r.kind, k); }
      k.total++;
      k.states.set(r.state, (k.states.get(r.state) || 0) + 1);
      const visible = (!problems || r.level === 'warn' || r.level === 'bad') && matches(rowText(r), ts);
      ent.card.hidden = !visible;
      if (visible) {
        shown++;
        updateCard(ent);
      }
    }
    for (const [kind, s] of state.sections) {
      let seen = 0;
      let registries = false;
      for (const g of s.groups.values()) {
        const n = [...g.cards.children].filter((c) => !c.hidden).length;
        g.box.hidden = n === 0;
        if (g.head) g.head.textContent = g.name + ' (' + g.cards.children.length + ')';
        seen += n;
        registries = registries || (g.head !== null && n > 0);
      }
      s.details.hidden = seen === 0;
      // a section of a few cards takes only their width, so that small
      // sections share a row
      const size = registries || seen > 3 ? 'many' : String(seen);
      if (s.details.dataset.size !== size) s.details.dataset.size = size;
      const k = counts.get(kind);
      s.count.textContent = k ? describe(k) : '';
    }
    const total = state.rows.size;
    $('shown').textContent = ts.length || problems ? shown + ' of ' + total + ' shown' : '';
    $('empty').hidden = total > 0 || !state.lastT;
    renderSummary(counts);
    renderTimeline(ts);
    renderReasons(ts);
  }

  function describe(k) {
    const parts = [...k.states].sort((a, b) => b[1] - a[1]).map(([s, n]) => n + ' ' + s);
    return k.total + ': ' + parts.join(', ');
  }

  function renderSummary(counts) {
    const box = $('summary');
    box.textContent = '';
    for (const [kind] of KINDS) {
      const k = counts.get(kind);
      if (!k) continue;
      const item = el('span', 'item');
      item.append(el('b', '', (KIND_TITLE[kind] || kind) + ' '), document.createTextNode(describe(k)));
      box.append(item);
    }
  }

  function levelOf(to) {
    if (to === 'open' || to === 'forced-open' || to === 'ejected') return 'bad';
    if (to === 'half-open') return 'warn';
    if (to === 'closed' || to === 'active') return 'ok';
    return 'off';
  }

  function renderTimeline(ts) {
    const list = $('timeline');
    const visible = state.changes.filter((c) => matches([c.source, c.name, c.key || '', c.from, c.to, c.code || ''].join(' '), ts));
    const newest = visible.slice(-60).reverse();
    list.textContent = '';
    for (const c of newest) {
      const li = el('li');
      li.dataset.to = c.to;
      const lvl = levelOf(c.to);
      const icon = svgEl('svg', { viewBox: '0 0 12 12', width: '12', height: '12', 'aria-hidden': 'true' });
      icon.append(svgEl('path', { d: ICONS[lvl], fill: 'none', stroke: 'currentColor', 'stroke-width': '2', 'stroke-linecap': 'round' }));
      const badge = el('span', 'badge');
      badge.dataset.level = lvl;
      badge.append(icon);
      li.append(el('time', '', new Date(c.t).toLocaleTimeString()), badge,
        el('span', 'src', c.source + ' ' + (c.name || '') + (c.key ? ' / ' + c.key : '')),
        el('span', '', c.from + ' →'), el('span', 'to', c.to));
      if (c.code) li.append(el('code', '', c.code));
      if (c.reason && c.reason !== c.code) li.append(el('span', 'reason', c.reason));
      list.append(li);
    }
    $('timeline-empty').hidden = newest.length > 0;
    // the strip: one mark per change over the charted span, a shape per level
    const strip = $('timeline-strip');
    strip.textContent = '';
    strip.append(svgEl('path', { class: 'axis', d: 'M0 22H600' }));
    const span = state.historyMs > 0 ? state.historyMs : state.intervalMs * 300;
    const t0 = state.lastT - span;
    for (const c of visible) {
      if (c.t < t0) continue;
      const x = ((c.t - t0) / span) * 600;
      const lvl = levelOf(c.to);
      let d;
      if (lvl === 'bad') d = `M${x - 4} 6L${x + 4} 14M${x + 4} 6L${x - 4} 14`;
      else if (lvl === 'warn') d = `M${x} 26L${x + 4} 34H${x - 4}Z`;
      else if (lvl === 'ok') d = `M${x} 16V28`;
      else d = `M${x - 3} 38H${x + 3}`;
      const m = svgEl('path', { class: 'm ' + lvl, d });
      const tip = svgEl('title');
      tip.textContent = c.source + ' ' + c.name + (c.key ? ' / ' + c.key : '') + ': ' + c.from + ' → ' + c.to;
      m.append(tip);
      strip.append(m);
    }
  }

  function renderReasons(ts) {
    const body = $('reasons').tBodies[0];
    body.textContent = '';
    const rows = state.reasons.filter((r) => matches([r.kind, r.source, r.name || '', r.code].join(' '), ts)).slice(0, 50);
    for (const r of rows) {
      const tr = el('tr');
      tr.append(el('td', '', r.kind), el('td', '', r.source), el('td', '', r.name || ''));
      const code = el('td');
      code.append(el('code', '', r.code));
      tr.append(code, el('td', 'num', fmtRate(r.rate)), el('td', 'num', String(r.total)));
      tr.dataset.code = r.code;
      body.append(tr);
    }
    $('reasons').hidden = rows.length === 0;
    $('reasons-empty').hidden = rows.length > 0;
    const chart = $('reasons-chart');
    chart.textContent = '';
    chart.append(svgEl('path', { class: 'axis', d: 'M0 59.5H600' }));
    const h = state.reasonsHist;
    if (!h.length) return;
    const span = state.historyMs > 0 ? state.historyMs : state.intervalMs * 300;
    const t0 = state.lastT - span;
    let top = 1;
    for (const q of h) top = Math.max(top, q[1]);
    let d = '';
    let prev = null;
    for (const q of h) {
      const x = (((q[0] - t0) / span) * 600).toFixed(1);
      const y = (59 - (q[1] / top) * 55).toFixed(1);
      if (prev === null || q[0] - prev[0] > state.intervalMs * 2.5) {
        if (prev !== null) d += 'L' + (((prev[0] - t0) / span) * 600).toFixed(1) + ' 59Z';
        d += 'M' + x + ' 59L' + x + ' ' + y;
      } else d += 'L' + x + ' ' + y;
      prev = q;
    }
    d += 'L' + (((prev[0] - t0) / span) * 600).toFixed(1) + ' 59Z';
    chart.append(svgEl('path', { class: 'a', d }));
    chart.setAttribute('aria-label', 'refused and shed calls per second; now ' + fmtRate(h[h.length - 1][1]) + ', peak ' + fmtRate(top));
  }

  function fmtRate(v) { return v >= 10 ? v.toFixed(0) : v.toFixed(1); }
  function fmtDur(ms) {
    if (ms >= 60000) return Math.round(ms / 60000) + ' min';
    return Math.round(ms / 1000) + ' s';
  }

  // Typing re-filters once the keys pause: at hundreds of cards a render
  // per key would lag behind the typing.
  let typing = null;
  $('filter').addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(render, 80);
  });
  $('problems').addEventListener('change', render);
  connect();
})();
