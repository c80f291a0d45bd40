// The decision page's view over window.DECIDE (decide-data.js, written by `make publish`; its encoding:
// bench/report/decide_data.py). Nothing is estimated here: verdicts, sizes, speeds and picks are the Python
// estimator's and advise's. The selection lives in the URL fragment (#model=...&gpu=...&count=...&length=...&batch=...);
// a query string (?gpu=...) is read too, and the fragment again whenever it changes; a GPU alias --gpu takes
// (gpu=4090) is taken. A value the grid lacks is named on the page with the nearest valid choices.
(function(){
  var AXES = [['model', 'models'], ['gpu', 'gpus'], ['count', 'counts'], ['length', 'max_lengths'], ['batch', 'batch_sizes']];
  var KINDS = {'fastest': 'Fastest', 'fewest-gpus': 'Fewest GPUs', 'faithful': 'Most faithful'};
  var D, CFG, UNIT;

  function label(axis, value){ return axis === 'model' ? value.name + (value.flag === '--workload' ? ' (workload)' : '') : String(value); }
  function key(axis, value){ return axis === 'model' ? value.name : String(value); }
  function gb(units){ return units === null || units === undefined ? '—' : (units * UNIT).toFixed(1) + ' GB'; }
  function tokens(n){ return n === null || n === undefined ? '—' : n.toLocaleString('en-US'); }
  function el(tag, attrs, text){
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function asked(){
    // The URL's choices: the query string, then the fragment (which wins).
    var chosen = {};
    [location.search.slice(1), location.hash.slice(1)].forEach(function(text){
      text.split('&').forEach(function(part){
        var kv = part.split('=');
        if (kv.length === 2) chosen[decodeURIComponent(kv[0])] = decodeURIComponent(kv[1].replace(/\+/g, ' '));
      });
    });
    return chosen;
  }

  function distance(a, b){
    // Levenshtein, case-insensitive.
    a = a.toLowerCase(); b = b.toLowerCase();
    var row = [];
    for (var j = 0; j <= b.length; j++) row.push(j);
    for (var i = 1; i <= a.length; i++) {
      var last = row[0];
      row[0] = i;
      for (var k = 1; k <= b.length; k++) {
        var here = row[k];
        row[k] = Math.min(row[k] + 1, row[k - 1] + 1, last + (a.charAt(i - 1) === b.charAt(k - 1) ? 0 : 1));
        last = here;
      }
    }
    return row[b.length];
  }

  function nearest(axis, list, value){
    // The valid choices closest to `value`: by number for numeric axes, by spelling for names.
    var keys = list.map(function(v){ return key(axis, v); });
    var numeric = typeof list[0] === 'number', n = Number(value);
    var score = function(k){
      if (numeric) return isNaN(n) ? 0 : Math.abs(Number(k) - n);
      var low = k.toLowerCase(), v = value.toLowerCase();
      return (low.indexOf(v) >= 0 || v.indexOf(low) >= 0 ? 0 : 100) + distance(k, value);
    };
    var order = keys.map(function(k, i){ return [score(k), i, k]; });
    order.sort(function(x, y){ return x[0] - y[0] || x[1] - y[1]; });
    return order.slice(0, numeric ? 2 : 3).map(function(x){ return x[2]; });
  }

  function index(){
    // The point's position in the grid's order (batch size fastest), and each axis's chosen value.
    var at = 0, picked = {};
    AXES.forEach(function(a){
      var list = D[a[1]], i = document.getElementById(a[0]).selectedIndex;
      picked[a[0]] = list[i];
      at = at * list.length + i;
    });
    return {at: at, picked: picked};
  }

  function pointView(at){
    // Every cell at point `at`: null (absent), {verdict: not_applicable, reason}, or its PREDICTED figures.
    var p = D.points[at], marks = D.marks[p[2]], values = D.sizes[p[4]], speeds = p[5], node = p[7];
    var cells = [], k = 0, f = 0;
    for (var i = 0; i < D.cells.length; i++) {
      var mark = marks.charAt(i);
      if (mark === '-') { cells.push(null); continue; }
      if (mark === 'x') {
        cells.push({verdict: 'not_applicable', css: 'v-not_applicable', label: CFG.labels.not_applicable,
                    reason: D.reasons[D.not_applicable[p[3]][i]]});
        continue;
      }
      var verdict = D.verdicts[CFG.codes.indexOf(mark)], total = values[k];
      var low = values[k + 1], high = values[k + 2];
      cells.push({verdict: verdict, css: 'v-' + verdict, label: CFG.labels[verdict] || verdict, total: total,
                  low: low === null ? null : total - low, high: high === null ? null : total + high,
                  margin: p[1] === null ? null : p[1] - total, host: values[k + 3], breakdown: D.breakdowns[values[k + 4]],
                  chance: values[k + 5], tokens: verdict === 'fits' ? speeds[f++] : null, node: node,
                  unchecked: !!values[k + 3] && (node === null || node === undefined)});
      k += 6;
    }
    var picks = [];
    for (var j = 0; j < p[6].length; j += 2) {
      var cell = p[6][j], v = cells[cell];
      picks.push({kind: D.picks[j / 2], cell: cell, reason: D.pick_reasons[p[6][j + 1]].replace(CFG.tokens, tokens(v.tokens))});
    }
    return {flags: p[0], usable: p[1], cells: cells, picks: picks};
  }

  function range(v){ return v.low === null ? '—' : gb(v.low) + ' – ' + gb(v.high); }
  function chance(v){ return v.chance === null || v.chance === undefined ? '—' : v.chance + ' %'; }

  function title(cell, v){
    if (v.verdict === 'not_applicable') return cell.id + ': N/A: ' + v.reason;
    return cell.id + ': PREDICTED ' + v.verdict + ' (P(fit) ' + chance(v) + '), total ' + gb(v.total) +
      ' per device (80 % range ' + range(v) + '), margin ' + gb(v.margin) +
      (v.unchecked ? '; host need ' + gb(v.host) + ' per node, host unchecked' : '');
  }

  function command(cell, flags){ return cell.command.replace(CFG.flags, flags); }

  function figures(v, usable){
    // The PREDICTED figures of a cell as (label, value, attribute) rows.
    return [
      ['memory per device', gb(v.total) + ' of ' + gb(usable) + ' usable', 'total'],
      ['80 % range', range(v), 'range'],
      ['probability of fitting', chance(v), 'chance'],
      ['host memory per node', (!v.host ? '0 GB (nothing offloaded)' :
        v.unchecked ? gb(v.host) + ', host unchecked (--host-ram GB checks it)' : gb(v.host) + ' of ' + gb(v.node)), 'host'],
      ['tokens/s', tokens(v.tokens), 'tokens']
    ];
  }

  function renderPicks(view){
    var box = document.getElementById('picks');
    box.textContent = '';
    document.getElementById('answer-for').textContent = 'dpo-bench advise ' + view.flags;
    if (!view.picks.length) {
      var none = box.appendChild(el('p', {'class': 'no-fit', 'id': 'no-fit'}));
      none.textContent = 'Nothing fits as it is (PREDICTED). Run dpo-bench advise ' + view.flags +
        ' for the smallest fix of each setup; the grid below shows how far each is.';
      return;
    }
    view.picks.forEach(function(pick){
      var cell = D.cells[pick.cell], v = view.cells[pick.cell];
      var card = box.appendChild(el('article', {'class': 'pick ' + v.css, 'data-kind': pick.kind, 'data-cell': cell.id,
                                                'data-total': gb(v.total), 'data-tokens': String(v.tokens)}));
      var head = card.appendChild(el('h3'));
      head.appendChild(el('span', {'class': 'pick-kind'}, KINDS[pick.kind] || pick.kind));
      head.appendChild(el('code', {}, cell.id));
      card.appendChild(el('p', {'class': 'reason'}, pick.reason));
      var dl = card.appendChild(el('dl'));
      figures(v, view.usable).forEach(function(row){
        dl.appendChild(el('dt', {}, row[0]));
        dl.appendChild(el('dd', {'data-figure': row[2]}, row[1] + ' PREDICTED'));
      });
      card.appendChild(el('pre', {'class': 'command'}, command(cell, view.flags)));
    });
  }

  function cellElement(i, view){
    var cell = D.cells[i], v = view.cells[i];
    if (v === null) return el('span', {'class': 'not-run'}, 'not in matrix');
    var e = el('span', {'class': 'dcell ' + v.css, 'data-cell': cell.id, 'data-verdict': v.verdict, 'title': title(cell, v),
                        'tabindex': '0', 'role': 'button'});
    e.appendChild(el('span', {'class': 'badge ' + v.css}, v.label));
    if (v.unchecked) {
      e.setAttribute('data-host', 'unchecked');
      e.appendChild(el('span', {'class': 'host-unchecked'}, 'host unchecked'));
    }
    if (v.verdict !== 'not_applicable') {
      e.setAttribute('data-total', gb(v.total));
      e.appendChild(el('span', {'class': 'total'}, gb(v.total)));
    }
    var open = function(){ toggleDetail(i, view, e); };
    e.addEventListener('click', open);
    e.addEventListener('keydown', function(ev){ if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); open(); } });
    return e;
  }

  function closeDetail(){
    document.querySelectorAll('.dcell.selected').forEach(function(s){ s.classList.remove('selected'); });
    document.querySelectorAll('.detail-row').forEach(function(r){ r.parentNode.removeChild(r); });
  }

  function toggleDetail(i, view, e){
    // The details open right under the clicked cell: a row inserted below its row (or below its variant line).
    var was = e.classList.contains('selected');
    closeDetail();
    if (was) return;
    var cell = D.cells[i], v = view.cells[i];
    e.classList.add('selected');
    var box = document.getElementById('detail-template').content.firstElementChild.cloneNode(true);
    box.setAttribute('data-cell', cell.id);
    box.querySelector('#detail-title').textContent = cell.id + ' · PREDICTED ' + v.verdict;
    var terms = box.querySelector('#detail-terms');
    if (v.verdict === 'not_applicable') {
      box.querySelector('#detail-meta').textContent = 'Not applicable here: ' + v.reason;
    } else {
      box.querySelector('#detail-meta').textContent = 'setup ' + (cell.setup || '—') + ' · ' +
        figures(v, view.usable).map(function(r){ return r[0] + ' ' + r[1]; }).join(' · ') + ' · margin ' + gb(v.margin) +
        ' (total: train peak + context + allocator slack)';
      terms.appendChild(el('tr')).appendChild(el('th', {colspan: '2'}, 'training peak, by term (PREDICTED)'));
      for (var k = 0; k < v.breakdown.length; k += 2) {
        var row = el('tr', {'data-term': D.terms[v.breakdown[k]]});
        row.appendChild(el('td', {}, D.terms[v.breakdown[k]]));
        row.appendChild(el('td', {'class': 'num'}, gb(v.breakdown[k + 1])));
        terms.appendChild(row);
      }
    }
    box.querySelector('#detail-command').textContent = command(cell, view.flags);
    var tr = e.closest('tr'), li = e.closest('li');
    if (tr) {
      var holder = el('tr', {'class': 'detail-row'});
      holder.appendChild(el('td', {colspan: String(tr.children.length)})).appendChild(box);
      tr.parentNode.insertBefore(holder, tr.nextSibling);
    } else {
      var item = el('li', {'class': 'detail-row'});
      item.appendChild(box);
      li.parentNode.insertBefore(item, li.nextSibling);
    }
  }

  function render(){
    var where = index(), view = pointView(where.at);
    var hash = AXES.map(function(a){ return a[0] + '=' + encodeURIComponent(key(a[0], where.picked[a[0]])); }).join('&');
    if (location.search || location.hash.slice(1) !== hash) history.replaceState(null, '', location.pathname + '#' + hash);
    renderPicks(view);
    var table = el('table', {'class': 'matrix decide', 'data-point': view.flags});
    var head = table.appendChild(el('thead')).appendChild(el('tr'));
    head.appendChild(el('th', {}, 'init · quant'));
    D.backends.forEach(function(b){ head.appendChild(el('th', {'data-backend': b}, b.replace(/_/g, '_\u200b'))); });
    var body = table.appendChild(el('tbody'));
    D.rows.forEach(function(row){
      var tr = body.appendChild(el('tr'));
      tr.appendChild(el('th', {}, row[0]));
      row[1].forEach(function(i){ tr.appendChild(el('td')).appendChild(i === null ? el('span', {'class': 'not-run'}, 'not run') : cellElement(i, view)); });
    });
    var holder = document.getElementById('matrix');
    holder.textContent = '';
    holder.appendChild(table);
    var variants = document.getElementById('variants');
    variants.textContent = '';
    D.variants.forEach(function(i){
      var li = variants.appendChild(el('li'));
      li.appendChild(el('code', {}, D.cells[i].id));
      li.appendChild(cellElement(i, view));
    });
    var counts = {};
    view.cells.forEach(function(v){ if (v) counts[v.verdict] = (counts[v.verdict] || 0) + 1; });
    document.getElementById('summary').textContent = 'PREDICTED for dpo-bench advise ' + view.flags + ': ' +
      Object.keys(counts).sort().map(function(k){ return counts[k] + ' ' + k; }).join(', ') + '.';
  }

  function warn(problems){
    var box = document.getElementById('out-of-grid');
    box.textContent = '';
    box.hidden = !problems.length;
    problems.forEach(function(p){
      var line = box.appendChild(el('p', {'data-axis': p.axis, 'data-value': p.value}));
      line.appendChild(el('strong', {}, p.axis + '=' + p.value));
      line.appendChild(document.createTextNode(' (from the URL) is not on this page\'s grid. Nearest valid choices: '));
      p.nearest.forEach(function(n, i){
        if (i) line.appendChild(document.createTextNode(', '));
        line.appendChild(el('code', {'class': 'nearest'}, n));
      });
      line.appendChild(document.createTextNode('. Showing ' + p.nearest[0] + ' instead; any other value: dpo-bench advise.'));
    });
  }

  function unpack(data){
    // The per-point arrays come gzipped in base64 (bench/report/decide_data.py `pack`): the browser inflates them.
    if (!data.packed) return Promise.resolve(data);
    var text = atob(data.packed), bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    return new Response(stream).json().then(function(big){
      // Sizes come a field at a time (all totals, all lows, ...): back to a row per point, a cell's fields together.
      var fields = big.sizes, rows = [];
      for (var r = 0; r < fields[0].length; r++) {
        var row = [];
        for (var c = 0; c < fields[0][r].length; c++) for (var f = 0; f < fields.length; f++) row.push(fields[f][r][c]);
        rows.push(row);
      }
      big.sizes = rows;
      for (var k in big) data[k] = big[k];
      delete data.packed;
      return data;
    });
  }

  document.addEventListener('DOMContentLoaded', function(){
    unpack(window.DECIDE).then(start);
  });

  function spelling(name){
    // bench/matrix/gpus.py `spelling`: case, spaces, '-' and '_' do not matter; a leading NVIDIA is dropped.
    var folded = name.toLowerCase().replace(/[\s_-]+/g, '');
    return folded.indexOf('nvidia') === 0 ? folded.slice(6) : folded;
  }

  function choose(){
    // Select what the URL asks (an alias the CLI takes included); a value the grid lacks is named with the nearest.
    var chosen = asked(), problems = [];
    AXES.forEach(function(a){
      var select = document.getElementById(a[0]), list = D[a[1]], want = chosen[a[0]];
      var keys = list.map(function(v){ return key(a[0], v); });
      if (a[0] === 'gpu' && want !== undefined && CFG.gpu_names[spelling(want)]) want = CFG.gpu_names[spelling(want)];
      var folded = want === undefined ? -1 : keys.map(function(k){ return k.toLowerCase(); }).indexOf(want.toLowerCase());
      if (folded >= 0) want = keys[folded];
      if (want !== undefined && keys.indexOf(want) < 0) {
        var near = nearest(a[0], list, want);
        problems.push({axis: a[0], value: want, nearest: near});
        want = near[0];
      }
      if (want === undefined) want = keys.indexOf(CFG.defaults[a[0]]) >= 0 ? CFG.defaults[a[0]] : keys[0];
      var at = keys.indexOf(want);
      for (var i = 0; i < select.options.length; i++) select.options[i].defaultSelected = i === at;
      select.selectedIndex = at;
    });
    warn(problems);
    render();
  }

  function start(data){
    D = data;
    CFG = JSON.parse(document.getElementById('decide-config').textContent);
    UNIT = D.unit / 1e9;
    AXES.forEach(function(a){
      var select = document.getElementById(a[0]), list = D[a[1]];
      list.forEach(function(value){ select.appendChild(el('option', {value: key(a[0], value)}, label(a[0], value))); });
      select.addEventListener('change', function(){ warn([]); render(); });
    });
    choose();
    window.addEventListener('hashchange', choose);
    document.documentElement.setAttribute('data-ready', '1');
  }
})();
