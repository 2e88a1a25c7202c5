// The admin panel's pages. Each page opens a server-sent event stream of
// one API view (/admin/api/stream?view=…) and redraws on every update: no
// reload, no polling. Everything is built with DOM calls and textContent
// (no HTML from data), and the charts are SVG drawn here.
(function () {
  'use strict';

  var main = document.getElementById('main');
  var live = document.getElementById('live');
  var session = null; // {node, csrf, refreshMs, cluster}
  var source = null; // the open EventSource
  var pending = null; // a page's delayed action (search as you type), cancelled on leaving

  // --- small DOM helpers ---------------------------------------------------
  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === 'text') e.textContent = attrs[k];
        else if (k === 'class') e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c == null) continue;
      e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function table(headers, rows, opts) {
    opts = opts || {};
    var thead = el('thead', null, el('tr', null));
    headers.forEach(function (h) {
      thead.firstChild.appendChild(el('th', { class: (h.num ? 'num ' : '') + (h.narrow ? 'hide-narrow' : '') }, h.label));
    });
    var tbody = el('tbody');
    rows.forEach(function (r) { tbody.appendChild(r); });
    if (!rows.length) tbody.appendChild(el('tr', null, el('td', { colspan: headers.length, class: 'muted' }, opts.empty || 'none')));
    return el('div', { class: 'scroll' }, el('table', opts.id ? { id: opts.id } : null, thead, tbody));
  }
  function td(v, cls) { return el('td', cls ? { class: cls } : null, v == null ? '—' : v); }
  function bytes(n) {
    if (!n) return '—';
    var u = ['B', 'KiB', 'MiB', 'GiB'], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + ' ' + u[i];
  }
  function age(msv) {
    if (msv == null) return '—';
    if (msv < 1000) return msv + ' ms';
    if (msv < 120000) return (msv / 1000).toFixed(1) + ' s';
    return Math.round(msv / 60000) + ' min';
  }
  function num(n, d) { return n == null ? '—' : Number(n).toFixed(d || 0); }
  function pills(list, cls) {
    var s = el('span');
    (list || []).forEach(function (x) { s.appendChild(el('span', { class: 'pill ' + (cls || '') }, x)); });
    if (!list || !list.length) s.appendChild(el('span', { class: 'muted' }, '—'));
    return s;
  }
  function tile(label, value, id) {
    return el('div', { class: 'tile' }, el('b', id ? { id: id } : null, value), el('span', null, label));
  }

  // An SVG chart of sockets (blue) and events/s (orange), each scaled to
  // its own maximum, over the node's published history.
  var SVGNS = 'http://www.w3.org/2000/svg';
  function chart(history) {
    var w = 180, h = 44;
    var svg = document.createElementNS(SVGNS, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    svg.setAttribute('class', 'chart');
    svg.setAttribute('role', 'img');
    history = history || [];
    var last = history.length ? history[history.length - 1] : null;
    var title = document.createElementNS(SVGNS, 'title');
    title.textContent = last ? ('sockets ' + last.s + ', events/s ' + last.e.toFixed(1) + ' (last ' + Math.round((last.t - history[0].t) / 60000) + ' min)') : 'no history';
    svg.appendChild(title);
    if (history.length < 2) return svg;
    var t0 = history[0].t, t1 = last.t, span = Math.max(1, t1 - t0);
    [['s', 'sockets'], ['e', 'eps']].forEach(function (k) {
      var max = 1;
      history.forEach(function (p) { max = Math.max(max, p[k[0]]); });
      var pts = history.map(function (p) {
        var x = ((p.t - t0) / span) * (w - 2) + 1;
        var y = h - 2 - (p[k[0]] / max) * (h - 4);
        return x.toFixed(1) + ',' + y.toFixed(1);
      }).join(' ');
      var pl = document.createElementNS(SVGNS, 'polyline');
      pl.setAttribute('points', pts);
      pl.setAttribute('class', k[0]);
      svg.appendChild(pl);
    });
    return svg;
  }

  // --- API and streams -----------------------------------------------------
  function api(path, opts) {
    opts = opts || {};
    opts.credentials = 'same-origin';
    opts.headers = opts.headers || {};
    if (opts.method === 'POST') {
      opts.headers['Content-Type'] = 'application/json';
      opts.headers['X-CSRF-Token'] = session ? session.csrf : '';
    }
    return fetch('/admin/api/' + path, opts).then(function (r) {
      if (r.status === 401) { location.href = '/admin/login'; throw new Error('logged out'); }
      return r.json().then(function (body) {
        if (!r.ok) throw new Error((body.error && body.error.message) || ('HTTP ' + r.status));
        return body;
      });
    });
  }

  // The page's live view. The browser retries a stream that failed on the
  // network, but not one answered with an HTTP error status (a balancer's
  // 502/503 while the node restarts, the node's "too many live admin pages"):
  // that one is reopened here, after 1 s, then doubling up to 30 s; until
  // then the figures shown are marked stale. A hidden tab closes its stream
  // and reopens it when shown again: over HTTP/1.1 each open stream holds one
  // of the browser's six connections to the host, and six tabs left a
  // seventh none (an audit, 2026-12-07).
  var view = null, retryTimer = 0, retryWait = 1000;
  function stream(name, params, render) {
    view = { name: name, params: params, render: render };
    retryWait = 1000;
    openStream();
  }
  function closeStream() {
    clearTimeout(retryTimer);
    if (source) { source.close(); source = null; }
  }
  function stale(on) { main.classList.toggle('stale', on); }
  function openStream() {
    closeStream();
    if (!view) return;
    if (document.hidden) { live.textContent = 'live · paused while this tab is hidden'; return; }
    var v = view;
    var q = new URLSearchParams(v.params || {});
    q.set('view', v.name);
    var s = new EventSource('/admin/api/stream?' + q.toString());
    source = s;
    live.textContent = 'live · connecting…';
    s.addEventListener('update', function (ev) {
      retryWait = 1000;
      stale(false);
      live.textContent = 'live · updated ' + new Date().toLocaleTimeString();
      v.render(JSON.parse(ev.data));
    });
    s.addEventListener('problem', function (ev) {
      live.textContent = 'live · ' + JSON.parse(ev.data).message;
    });
    s.onerror = function () {
      stale(true);
      if (s.readyState === EventSource.CLOSED && source === s) {
        source = null;
        live.textContent = 'live · stale: reconnecting in ' + Math.round(retryWait / 1000) + ' s…';
        retryTimer = setTimeout(openStream, retryWait);
        retryWait = Math.min(retryWait * 2, 30000);
      } else {
        live.textContent = 'live · stale: reconnecting…';
      }
      // a 401 ends the stream for good: find out whether we are logged out
      api('session').catch(function () {});
    };
  }
  document.addEventListener('visibilitychange', function () {
    if (document.hidden) {
      if (view) { closeStream(); live.textContent = 'live · paused while this tab is hidden'; }
    } else if (view && !source) {
      retryWait = 1000;
      openStream();
    }
  });

  // --- pages ---------------------------------------------------------------
  var pages = {};

  pages.cluster = function () {
    var body = el('div');
    main.appendChild(el('section', null, el('h2', null, 'Cluster'), body));
    stream('cluster', null, function (d) {
      clear(body);
      body.appendChild(el('div', { class: 'tiles' },
        tile('nodes', d.nodes.length, 'node-count'),
        tile('sockets', d.sockets, 'socket-count'),
        tile('events/s', num(d.eventsPerSec, 1)),
        tile('mode', d.cluster ? 'cluster' : 'single node')));
      (d.warnings || []).forEach(function (w) { body.appendChild(el('p', { class: 'error' }, w)); });
      var rows = d.nodes.map(function (n) {
        return el('tr', { 'data-node': n.node },
          td(n.node + (n.self ? ' (this page)' : '')),
          td(age(n.leaseAgeMs), 'num'),
          td(n.sockets, 'num'),
          td(bytes(n.rssBytes) + ' / ' + bytes(n.heapBytes), 'num'),
          td(n.goroutines, 'num hide-narrow'),
          td(num(n.eventsPerSec, 1), 'num'),
          el('td', null, chart(n.history)));
      });
      body.appendChild(el('div', { class: 'card' },
        table([{ label: 'node' }, { label: 'lease age', num: 1 }, { label: 'sockets', num: 1 }, { label: 'RSS / heap', num: 1 },
          { label: 'goroutines', num: 1, narrow: 1 }, { label: 'events/s', num: 1 }, { label: 'last minutes' }], rows, { id: 'nodes' }),
        el('p', { class: 'legend muted' }, el('span', { class: 's' }, '━ sockets'), ' ', el('span', { class: 'e' }, '━ events/s'), ' (each scaled to its maximum)')));
    });
  };

  pages.conversations = function (arg, params) {
    if (arg) return pages.conversation(arg);
    // the search and the page are kept in the address (#conversations?q=…&page=…),
    // so that Back and a reload come back to them
    var state = { q: params.get('q') || '', page: Math.max(1, parseInt(params.get('page'), 10) || 1), limit: 25 };
    var input = el('input', { type: 'search', id: 'conv-search', placeholder: 'conversation id prefix', 'aria-label': 'search by id prefix' });
    input.value = state.q;
    var body = el('div');
    main.appendChild(el('section', null, el('h2', null, 'Conversations ', el('span', { class: 'muted' }, 'busiest first')),
      el('form', { class: 'inline', role: 'search' }, input), body));
    input.addEventListener('input', function () {
      clearTimeout(pending);
      pending = setTimeout(function () { state.q = input.value; state.page = 1; open(); }, 250);
    });
    input.form.addEventListener('submit', function (e) { e.preventDefault(); });
    function open() {
      var kept = new URLSearchParams();
      if (state.q) kept.set('q', state.q);
      if (state.page > 1) kept.set('page', String(state.page));
      history.replaceState(null, '', '#conversations' + (kept.toString() ? '?' + kept.toString() : ''));
      stream('conversations', { q: state.q, page: state.page, limit: state.limit }, render);
    }
    function render(d) {
      clear(body);
      var rows = d.rows.map(function (r) {
        var tr = el('tr', { class: 'clickable', 'data-conversation': r.id },
          td(r.id), td(r.online, 'num'), el('td', null, pills(r.members)), el('td', null, pills(r.typing, 'typing')));
        tr.addEventListener('click', function () { location.hash = '#conversations/' + encodeURIComponent(r.id); });
        return tr;
      });
      var pagesN = Math.max(1, Math.ceil(d.total / d.limit));
      var prev = el('button', { type: 'button', class: 'secondary' }, '‹ prev');
      var next = el('button', { type: 'button', class: 'secondary' }, 'next ›');
      prev.disabled = d.page <= 1;
      next.disabled = d.page >= pagesN;
      prev.addEventListener('click', function () { state.page--; open(); });
      next.addEventListener('click', function () { state.page++; open(); });
      body.appendChild(el('div', { class: 'card' },
        table([{ label: 'conversation' }, { label: 'online', num: 1 }, { label: 'members (up to 5)' }, { label: 'typing' }], rows,
          { id: 'conversations', empty: 'no conversation with members online' }),
        el('div', { class: 'pager' }, prev, el('span', { class: 'muted' }, 'page ' + d.page + ' of ' + pagesN + ' · ' + d.total + ' conversations'), next)));
    }
    open();
  };

  pages.conversation = function (id) {
    var page = 1;
    var body = el('div');
    main.appendChild(el('section', null,
      el('h2', null, el('a', { href: '#conversations' }, 'Conversations'), ' › ', id), body));
    function open() { stream('conversation', { id: id, page: page, limit: 100 }, render); }
    function render(d) {
      clear(body);
      body.appendChild(el('div', { class: 'tiles' }, tile('online', d.online), tile('typing', (d.typing || []).length)));
      var rows = d.members.map(function (m) {
        var tr = el('tr', { class: 'clickable', 'data-user': m.userId },
          td(m.userId), td(m.status), td(m.since), td(m.typing ? 'typing…' : ''));
        tr.addEventListener('click', function () { location.hash = '#user/' + encodeURIComponent(m.userId); });
        return tr;
      });
      var pagesN = Math.max(1, Math.ceil(d.online / d.limit));
      var prev = el('button', { type: 'button', class: 'secondary' }, '‹ prev');
      var next = el('button', { type: 'button', class: 'secondary' }, 'next ›');
      prev.disabled = d.page <= 1;
      next.disabled = d.page >= pagesN;
      prev.addEventListener('click', function () { page--; open(); });
      next.addEventListener('click', function () { page++; open(); });
      body.appendChild(el('div', { class: 'card' },
        table([{ label: 'user' }, { label: 'status' }, { label: 'since (exact)' }, { label: '' }], rows, { id: 'roster', empty: 'nobody online' }),
        el('div', { class: 'pager' }, prev, el('span', { class: 'muted' }, 'page ' + d.page + ' of ' + pagesN), next)));
    }
    open();
  };

  pages.user = function (id) {
    var input = el('input', { type: 'search', id: 'user-search', placeholder: 'user id', 'aria-label': 'user id', value: id || '' });
    var form = el('form', { class: 'inline', role: 'search' }, input, el('button', { type: 'submit' }, 'Look up'));
    form.addEventListener('submit', function (e) {
      e.preventDefault();
      if (input.value) location.hash = '#user/' + encodeURIComponent(input.value.trim());
    });
    var body = el('div');
    var action = el('div');
    main.appendChild(el('section', null, el('h2', null, 'User'), form, body, action));
    if (!id) return;
    var last = null;
    stream('user', { id: id }, function (d) {
      last = d;
      clear(body);
      var statusCls = d.status === 'offline' ? 'muted' : 'ok';
      body.appendChild(el('div', { class: 'card' }, el('dl', { class: 'facts', id: 'user-facts' },
        el('dt', null, 'user'), el('dd', null, d.userId),
        el('dt', null, 'status'), el('dd', { class: statusCls, id: 'user-status' }, d.status),
        el('dt', null, 'last activity'), el('dd', null, d.since || '—'),
        el('dt', null, 'last seen (exact)'), el('dd', null, d.lastSeen || (d.status === 'offline' ? 'never' : `— (${d.status})`)),
        el('dt', null, 'privacy'), el('dd', null, d.privacy),
        el('dt', null, 'subscriptions'), el('dd', null, String(d.subscriptions)),
        el('dt', null, 'conversations'), el('dd', null, pills(d.conversations)))));
      (d.warnings || []).forEach(function (w) { body.appendChild(el('p', { class: 'error' }, w)); });
      var rows = d.connections.map(function (c) {
        return el('tr', { 'data-socket': c.id }, td(c.id), td(c.node), td(c.transport || '?'), td(c.subscriptions, 'num'), el('td', null, pills(c.conversations)));
      });
      body.appendChild(el('div', { class: 'card' }, el('h2', null, 'Connections'),
        table([{ label: 'socket' }, { label: 'node' }, { label: 'transport' }, { label: 'subs', num: 1 }, { label: 'conversations' }], rows,
          { id: 'connections', empty: 'not connected' })));
      if (!action.firstChild) drawAction();
      var btn = document.getElementById('disconnect');
      if (btn) btn.disabled = !d.connections.length;
    });

    // Disconnect: a reason, then an explicit confirmation step.
    function drawAction() {
      clear(action);
      var reason = el('input', { type: 'text', id: 'disconnect-reason', placeholder: 'reason (logged)', maxlength: '500', 'aria-label': 'reason' });
      var btn = el('button', { type: 'button', class: 'danger', id: 'disconnect' }, 'Disconnect…');
      var out = el('p', { id: 'disconnect-result', role: 'status' });
      var card = el('div', { class: 'card' }, el('h2', null, 'Disconnect every socket of this user'), el('div', { class: 'inline' }, reason, btn), out);
      action.appendChild(card);
      btn.addEventListener('click', function () {
        if (!reason.value.trim()) { out.textContent = 'Give a reason first.'; out.className = 'error'; reason.focus(); return; }
        out.textContent = '';
        out.className = '';
        var n = last ? last.connections.length : 0;
        var yes = el('button', { type: 'button', class: 'danger', id: 'disconnect-confirm' }, 'Yes, disconnect');
        var no = el('button', { type: 'button', class: 'secondary' }, 'Cancel');
        var box = el('div', { class: 'confirm', id: 'disconnect-box' },
          el('p', null, 'Disconnect ' + n + ' socket(s) of ' + id + ' on every node? Reason: "' + reason.value.trim() + '"'), yes, ' ', no);
        card.appendChild(box);
        btn.disabled = true;
        no.addEventListener('click', function () { box.remove(); btn.disabled = false; });
        yes.addEventListener('click', function () {
          yes.disabled = true;
          api('users/disconnect', { method: 'POST', body: JSON.stringify({ userId: id, reason: reason.value.trim() }) })
            .then(function (r) { out.className = 'ok'; out.textContent = 'Disconnected ' + r.sockets + ' socket(s).'; })
            .catch(function (e) { out.className = 'error'; out.textContent = e.message; })
            .then(function () { box.remove(); btn.disabled = false; });
        });
      });
    }
  };

  pages.lastseen = function () {
    var body = el('div');
    main.appendChild(el('section', null, el('h2', null, 'Last-seen pipeline'), body));
    stream('lastseen', null, function (d) {
      clear(body);
      body.appendChild(el('div', { class: 'tiles', id: 'lastseen' },
        tile('dirty backlog (users)', d.dirty == null ? '—' : d.dirty),
        tile('claimed (being written)', d.claimed == null ? '—' : d.claimed),
        tile('users in buffer', d.bufferUsers == null ? '—' : d.bufferUsers),
        tile('last flush', d.lastFlushAgeMs == null ? 'never' : age(d.lastFlushAgeMs) + ' ago'),
        tile('last flush took', d.lastFlushAt ? num(d.lastFlushMs, 1) + ' ms' : '—'),
        tile('rows / statements (last)', d.lastFlushRows + ' / ' + d.lastFlushStmts),
        tile('rows / statements (total)', d.rowsTotal + ' / ' + d.statementsTotal, 'flush-totals'),
        tile('failed flushes', d.flushErrors)));
      if (d.lastFlushError) body.appendChild(el('p', { class: 'error' }, 'last flush failed: ' + d.lastFlushError));
      if (d.bufferError) body.appendChild(el('p', { class: 'error' }, 'buffer: ' + d.bufferError));
      body.appendChild(el('p', { class: 'muted' }, 'The tiles: the buffer (shared by the cluster) and this node\'s (' + d.node + ') flushes. Every node flushes the shared buffer:'));
      var rows = (d.nodes || []).map(function (n) {
        return el('tr', { 'data-node': n.node },
          td(n.node + (n.self ? ' (this page)' : '')),
          td(n.lastFlushAgeMs == null ? 'never' : age(n.lastFlushAgeMs) + ' ago', 'num'),
          td(n.flush.at ? num(n.flush.ms, 1) + ' ms' : '—', 'num'),
          td(n.flush.rows, 'num'), td(n.flush.statements, 'num'),
          td(n.flush.errors, n.flush.errors ? 'num bad' : 'num'),
          td(n.flush.error || '', 'hide-narrow'));
      });
      body.appendChild(el('div', { class: 'card' }, table([{ label: 'node' }, { label: 'last flush', num: 1 }, { label: 'took', num: 1 },
        { label: 'rows', num: 1 }, { label: 'statements', num: 1 }, { label: 'failed', num: 1 }, { label: 'last error', narrow: 1 }], rows, { id: 'flushes' })));
    });
  };

  pages.health = function () {
    var body = el('div');
    main.appendChild(el('section', null, el('h2', null, 'Health'), body));
    stream('health', null, function (d) {
      clear(body);
      body.appendChild(el('div', { class: 'tiles' }, tile('overall', d.status, 'health-status')));
      var rows = d.checks.map(function (c) {
        return el('tr', { 'data-check': c.name }, td(c.name), td(c.ok ? 'ok' : 'failing', c.ok ? 'ok' : 'bad'), td(num(c.ms, 1) + ' ms', 'num'), td(c.error || ''));
      });
      body.appendChild(el('div', { class: 'card' }, table([{ label: 'dependency' }, { label: 'state' }, { label: 'answered in', num: 1 }, { label: 'error' }], rows, { id: 'health' })));
    });
  };

  // --- router --------------------------------------------------------------
  function route() {
    var h = location.hash.replace(/^#/, '') || 'cluster';
    var query = '';
    var qi = h.indexOf('?');
    if (qi >= 0) { query = h.slice(qi + 1); h = h.slice(0, qi); }
    var slash = h.indexOf('/');
    var name = slash < 0 ? h : h.slice(0, slash);
    var arg = '';
    try {
      arg = slash < 0 ? '' : decodeURIComponent(h.slice(slash + 1));
    } catch (e) { // a malformed address: the page, without its argument
      live.textContent = 'that address is malformed';
    }
    if (!Object.prototype.hasOwnProperty.call(pages, name)) name = 'cluster';
    view = null;
    closeStream();
    stale(false);
    clearTimeout(pending);
    clear(main);
    document.querySelectorAll('nav a').forEach(function (a) {
      a.classList.toggle('active', a.getAttribute('data-page') === name || (name === 'conversation' && a.getAttribute('data-page') === 'conversations'));
    });
    pages[name](arg, new URLSearchParams(query));
  }

  api('session').then(function (s) {
    session = s;
    document.getElementById('node').textContent = '· node ' + s.node + (s.cluster ? ' (cluster)' : '');
    window.addEventListener('hashchange', route);
    route();
  }).catch(function (e) { live.textContent = e.message; });
})();
