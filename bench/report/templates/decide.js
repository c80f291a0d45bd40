// The decision page's view over window.DECIDE (decide-data.js, written by `make publish`; its encoding:
// bench/report/decide_data.py). Nothing is estimated here: verdicts, sizes, speeds and picks are the Python
// estimator's and advise's. The selection lives in the URL fragment
// (#method=...&model=...&gpu=...&count=...&length=...&batch=...); a query string (?gpu=...) is read too, and the
// fragment again whenever it changes; a GPU alias --gpu takes (gpu=4090) is taken. A value the grid lacks is named on
// the page with the nearest valid choices. Counts, lengths and batch sizes are the chosen method's (its part of the
// grid may be coarser). The charts are inline SVG drawn here from the same data.
(function(){
  // [URL key, the list's name]: methods, models and GPUs are the data's; the others the chosen method's.
  var AXES = [['method', 'methods'], ['model', 'models'], ['gpu', 'gpus'], ['count', 'counts'], ['length', 'max_lengths'],
              ['batch', 'batch_sizes']];
  var PER_METHOD = {'count': 1, 'length': 1, 'batch': 1};
  var KINDS = {'fastest': 'Fastest', 'fewest-gpus': 'Fewest GPUs', 'faithful': 'Most faithful'};
  var SVG = 'http://www.w3.org/2000/svg';
  var COLOURS = ['#1b6ca8', '#d1495b', '#2e8540', '#8e5ea2', '#e07b00', '#555'];
  var D, CFG, UNIT;

  function label(axis, value){
    if (axis === 'method') return value.title;
    return axis === 'model' ? value.name + (value.flag === '--workload' ? ' (workload)' : '') : String(value);
  }
  function key(axis, value){ return axis === 'model' || axis === 'method' ? value.name : String(value); }
  function method(){ return D.methods[document.getElementById('method').selectedIndex]; }
  function values(a){ return PER_METHOD[a[0]] ? method()[a[1]] : D[a[1]]; }
  function gb(units){ return units === null || units === undefined ? '—' : (units * UNIT).toFixed(1) + ' GB'; }
  function tokens(n){ return n === null || n === undefined ? '—' : n.toLocaleString('en-US'); }
  function mfuText(percent){ return percent === null || percent === undefined ? '' : ' · MFU ' + percent + '%'; }
  function speedText(v){
    // A tokens/s with the MFU it implies beside it: advise's table column (decide_data.py `speed_text`).
    return v.tokens === null || v.tokens === undefined ? '—' : tokens(v.tokens) + mfuText(v.mfu);
  }
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

  function index(change){
    // The point's position in the grid's order (method by method, batch size fastest) and each axis's value;
    // `change`: {axis: index} in place of the selected one (the chart's other lengths).
    var at = 0, picked = {};
    AXES.slice(1).forEach(function(a){
      var list = values(a), i = change && change[a[0]] !== undefined ? change[a[0]] : document.getElementById(a[0]).selectedIndex;
      picked[a[0]] = list[i];
      at = at * list.length + i;
    });
    picked.method = method();
    return {at: method().offset + at, picked: picked};
  }

  function flagsOf(picked){
    // bench/report/decide_data.py `point_flags`: advise's flags for the point.
    return '--gpu ' + picked.gpu + ':' + picked.count + ' ' + picked.model.flag + ' ' + picked.model.name +
      ' --max-length ' + picked.length + ' --batch-size ' + picked.batch;
  }

  function rates(at){
    // The MFU rates of point `at` (its method, model, count and max length) and its GPU's peak: decide_data.py
    // `_mfu_of`. The point's position decomposes batch size fastest.
    var m = D.methods.filter(function(x){ return x.offset <= at; }).pop(), left = at - m.offset;
    var n = [D.models.length, D.gpus.length, m.counts.length, m.max_lengths.length, m.batch_sizes.length], i = [];
    for (var a = n.length - 1; a >= 0; a--) { i[a] = left % n[a]; left = Math.floor(left / n[a]); }
    var row = (i[0] * n[2] + i[2]) * n[3] + i[3];
    return {row: D.mfu_rates[D.methods.indexOf(m)][row], peak: D.peaks[i[1]]};
  }

  function mfuOf(speed, cell, r, fixes, f){
    // The MFU percent beside a fitting cell's tokens/s (the f-th of the point's): bench/report/decide_mfu.py
    // `read_percent`, op for op; a fix is advise's percent less the computed one, or null (no MFU).
    var code = r.row[0].charAt(cell), computed = null;
    if (speed !== null && code !== '' && code !== CFG.no_rate && r.peak)
      computed = Math.floor(100 * (speed * r.row[1][CFG.classes.indexOf(code)] / r.peak) + 0.5);
    if (!(f in fixes)) return computed;
    return fixes[f] === null || computed === null ? null : computed + fixes[f];
  }

  function pointView(at, picked){
    // Every cell at point `at`: null (absent), {verdict: not_applicable, reason}, or its PREDICTED figures.
    var p = D.points[at], marks = D.marks[p[1]], values = D.sizes[p[3]], speeds = p[4], node = p[6];
    var cells = [], k = 0, f = 0, r = rates(at), fixes = {};
    for (var x = 0; x < p[8].length; x += 2) fixes[p[8][x]] = p[8][x + 1];
    for (var i = 0; i < D.cells.length; i++) {
      var mark = marks.charAt(i);
      if (mark === '-') { cells.push(null); continue; }
      if (mark === 'x') {
        cells.push({verdict: 'not_applicable', css: 'v-not_applicable', label: CFG.labels.not_applicable,
                    reason: D.reasons[D.not_applicable[p[2]][i]]});
        continue;
      }
      var verdict = D.verdicts[CFG.codes.indexOf(mark)], total = values[k];
      var low = values[k + 1], high = values[k + 2];
      cells.push({verdict: verdict, css: 'v-' + verdict, label: CFG.labels[verdict] || verdict, total: total,
                  low: low === null ? null : total - low, high: high === null ? null : total + high,
                  margin: p[0] === null ? null : p[0] - total, host: values[k + 3], perRank: values[k + 4],
                  breakdown: D.breakdowns[values[k + 5]], chance: values[k + 6],
                  tokens: verdict === 'fits' ? speeds[f] : null, node: node,
                  mfu: verdict === 'fits' ? mfuOf(speeds[f], i, r, fixes, f++) : null,
                  unchecked: values[k + 4] !== null && values[k + 4] !== undefined &&
                    (node === null || node === undefined)});
      k += 7;
    }
    var picks = [];
    for (var j = 0; j < p[5].length; j += 3) {
      // A pick's kind by its name in the data: a point may lack a kind (no speed, nothing on fewer GPUs).
      // Where the reason names the tokens/s, the MFU it implies follows (the reason itself is advise's).
      var cell = p[5][j], v = cells[cell], reason = D.pick_reasons[p[5][j + 1]];
      var named = v.tokens !== null && reason.indexOf(CFG.tokens) >= 0;
      reason = reason.replace(CFG.tokens, tokens(v.tokens)) + (named ? mfuText(v.mfu) : '');
      picks.push({kind: D.picks[p[5][j + 2]], cell: cell, reason: reason});
    }
    var generation = p[7] === null || p[7] === undefined ? null : D.generations[p[7]];
    return {flags: flagsOf(picked), usable: p[0], cells: cells, picks: picks, generation: generation};
  }

  function range(v){ return v.low === null ? '—' : gb(v.low) + ' – ' + gb(v.high); }
  function chance(v){ return v.chance === null || v.chance === undefined ? '—' : v.chance + ' %'; }

  function title(cell, v){
    if (v.verdict === 'not_applicable') return cell.id + ': N/A: ' + v.reason;
    return cell.id + ': PREDICTED ' + v.verdict + ' (P(fit) ' + chance(v) + '), total ' + gb(v.total) +
      ' per device (80 % range ' + range(v) + '), margin ' + gb(v.margin) +
      (v.perRank === null ? '' : '; host ' + hostColumn(v));
  }

  function command(cell, flags){ return cell.command.replace(CFG.flags, flags); }

  function hostGb(units){
    return (units * UNIT).toLocaleString('en-US', {minimumFractionDigits: 1, maximumFractionDigits: 1}) + ' GB';
  }

  function hostColumn(v){
    // advise's host column (bench/report/decide_data.py `host_column`): per rank, and per node against the node's
    // host memory, or marked host unchecked where the catalog has no figure (--host-ram GB checks it).
    if (v.perRank === null || v.perRank === undefined) return '—';  // nothing offloaded
    var head = hostGb(v.perRank) + '/rank, ' + hostGb(v.host);
    return v.unchecked ? head + ' per node, host unchecked' : head + ' of ' + hostGb(v.node) + ' per node';
  }

  function figures(v, usable){
    // The PREDICTED figures of a cell as (label, value, attribute) rows.
    return [
      ['memory per device', gb(v.total) + ' of ' + gb(usable) + ' usable', 'total'],
      ['80 % range', range(v), 'range'],
      ['probability of fitting', chance(v), 'chance'],
      ['host memory', hostColumn(v), 'host'],
      ['tokens/s', speedText(v), 'tokens']
    ];
  }

  function asCommand(view){
    var m = method().name;
    return 'dpo-bench advise ' + view.flags + (m === 'dpo' ? '' : ' --method ' + m);
  }

  function picksLine(view){
    // How many picks this point has, worded from the data: a kind advise could not fill is named as missing.
    var n = view.picks.length, had = view.picks.map(function(p){ return p.kind; });
    var missing = D.picks.filter(function(k){ return had.indexOf(k) < 0; }).map(function(k){ return KINDS[k] || k; });
    var count = n === 1 ? 'one pick' : n + ' picks';
    return 'advise\'s ' + count + ' for ' + asCommand(view) + (n && missing.length ? ' (no ' + missing.join(', no ') + ' pick here)' : '');
  }

  function renderGeneration(view){
    // The online methods' sampling settings: the workload's (the page asks advise with them as they are).
    var box = document.getElementById('generation'), g = view.generation;
    box.hidden = !g;
    if (!g) { box.textContent = ''; return; }
    box.textContent = method().title + ' samples ' + g[0] + ' completions per prompt (num_generations), each of at most ' +
      tokens(g[1]) + ' tokens (max_completion_length), prompts of at most ' +
      (g[2] === null ? tokens(index().picked.length) + ' tokens (the max length)' : tokens(g[2]) + ' tokens') +
      ': the workload\'s generation settings.';
    box.setAttribute('data-generations', String(g[0]));
    box.setAttribute('data-completion', String(g[1]));
  }

  function renderPicks(view){
    var box = document.getElementById('picks');
    box.textContent = '';
    document.getElementById('answer-for').textContent = view.picks.length ? picksLine(view) : asCommand(view);
    renderGeneration(view);
    if (!view.picks.length) {
      var none = box.appendChild(el('p', {'class': 'no-fit', 'id': 'no-fit'}));
      none.textContent = 'Nothing fits as it is (PREDICTED). Run ' + asCommand(view) +
        ' for the smallest fix of each setup; the grid below shows how far each is.';
      return;
    }
    view.picks.forEach(function(pick){
      var cell = D.cells[pick.cell], v = view.cells[pick.cell];
      var card = box.appendChild(el('article', {'class': 'pick ' + v.css, 'data-kind': pick.kind, 'data-cell': cell.id,
                                                'data-total': gb(v.total), 'data-tokens': String(v.tokens),
                                                'data-mfu': String(v.mfu)}));
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

  function svgEl(tag, attrs, text){
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function chart(id, height, count){
    // An empty chart in the holder `id`: <svg class="chart" data-series="count">.
    var holder = document.getElementById(id);
    holder.textContent = '';
    return holder.appendChild(svgEl('svg', {'class': 'chart', 'id': id + '-svg', width: 600, height: height,
                                            viewBox: '0 0 600 ' + height, role: 'img', 'data-series': String(count)}));
  }

  function memoryChart(view, picked){
    // PREDICTED memory per device against the max length: a line per picked setup (its cell at each length of the
    // method's grid, the other choices kept), the usable memory dashed.
    var lengths = method().max_lengths, cells = [];
    view.picks.forEach(function(p){ if (cells.indexOf(p.cell) < 0) cells.push(p.cell); });
    var series = cells.map(function(i){
      var line = [];
      lengths.forEach(function(length, k){
        var v = pointView(index({length: k}).at, picked).cells[i];
        if (v && v.total !== undefined) line.push([length, v.total]);
      });
      return {cell: i, line: line};
    });
    document.getElementById('memory-caption').textContent = 'Memory per device against max length, the picked setups ' +
      '(PREDICTED; dashed: ' + gb(view.usable) + ' usable)' + (cells.length ? '' : ': no pick at this point');
    var svg = chart('memory-chart', 260, series.length), L = 56, R = 340, T = 12, B = 220;
    var top = Math.max.apply(null, [view.usable || 0].concat(series.map(function(s){
      return Math.max.apply(null, s.line.map(function(p){ return p[1]; }).concat([0])); }))) * 1.1 || 1;
    var lo = lengths[0], hi = lengths[lengths.length - 1];
    var x = function(v){ return hi === lo ? (L + R) / 2 : L + (R - L) * (v - lo) / (hi - lo); };
    var y = function(v){ return B - (B - T) * v / top; };
    svg.appendChild(svgEl('line', {'class': 'axis', x1: L, y1: B, x2: R, y2: B}));
    svg.appendChild(svgEl('line', {'class': 'axis', x1: L, y1: T, x2: L, y2: B}));
    lengths.forEach(function(v){ svg.appendChild(svgEl('text', {x: x(v), y: B + 16, 'text-anchor': 'middle'}, String(v))); });
    svg.appendChild(svgEl('text', {x: (L + R) / 2, y: B + 32, 'text-anchor': 'middle'}, 'max length (tokens)'));
    [0, 0.5, 1].forEach(function(f){
      svg.appendChild(svgEl('text', {x: L - 4, y: y(top * f / 1.1) + 4, 'text-anchor': 'end'}, gb(top * f / 1.1)));
    });
    if (view.usable !== null) svg.appendChild(svgEl('line', {'class': 'limit', x1: L, x2: R, y1: y(view.usable), y2: y(view.usable)}));
    series.forEach(function(s, n){
      var colour = COLOURS[n % COLOURS.length], id = D.cells[s.cell].id;
      var g = svg.appendChild(svgEl('g', {'class': 'series', 'data-series': id, stroke: colour, fill: colour}));
      g.appendChild(svgEl('path', {d: s.line.map(function(p, k){ return (k ? 'L' : 'M') + x(p[0]) + ' ' + y(p[1]); }).join(' ')}));
      s.line.forEach(function(p){ g.appendChild(svgEl('circle', {cx: x(p[0]), cy: y(p[1]), r: 3}, undefined)); });
      g.appendChild(svgEl('text', {x: R + 10, y: T + 12 + 16 * n, stroke: 'none'}, id));
    });
  }

  function speedChart(view){
    // PREDICTED tokens/s by backend: a bar per backend of the method's grid with a fitting setup that has a speed
    // (the fastest of its setups, variants included).
    var best = {}, fastest = {};
    view.cells.forEach(function(v, i){
      var b = D.cells[i].backend;
      if (v && v.tokens !== null && v.tokens !== undefined && (best[b] === undefined || v.tokens > best[b])) {
        best[b] = v.tokens;
        fastest[b] = v;
      }
    });
    var bars = method().backends.filter(function(b){ return best[b] !== undefined; });
    document.getElementById('speed-caption').textContent = 'PREDICTED tokens/s by backend, the fastest fitting setup of ' +
      'each' + (bars.length ? '' : ': no fitting setup has a PREDICTED speed at this point');
    var svg = chart('speed-chart', 24 + 22 * Math.max(bars.length, 1), bars.length), L = 140, R = 460;
    var top = Math.max.apply(null, bars.map(function(b){ return best[b]; }).concat([1]));
    bars.forEach(function(b, n){
      var g = svg.appendChild(svgEl('g', {'class': 'series', 'data-series': b, 'data-tokens': String(best[b])}));
      var y = 12 + 22 * n;
      g.appendChild(svgEl('text', {x: L - 6, y: y + 13, 'text-anchor': 'end'}, b));
      g.appendChild(svgEl('rect', {'class': 'bar', x: L, y: y, height: 16, width: Math.max(1, (R - L) * best[b] / top)}));
      g.appendChild(svgEl('text', {x: L + Math.max(1, (R - L) * best[b] / top) + 4, y: y + 13}, speedText(fastest[b])));
    });
  }

  function render(){
    var where = index(), view = pointView(where.at, where.picked), M = method();
    var hash = AXES.map(function(a){ return a[0] + '=' + encodeURIComponent(key(a[0], where.picked[a[0]])); }).join('&');
    if (location.search || location.hash.slice(1) !== hash) history.replaceState(null, '', location.pathname + '#' + hash);
    renderPicks(view);
    memoryChart(view, where.picked);
    speedChart(view);
    var table = el('table', {'class': 'matrix decide', 'data-point': view.flags});
    var head = table.appendChild(el('thead')).appendChild(el('tr'));
    head.appendChild(el('th', {}, 'init · quant'));
    M.backends.forEach(function(b){ head.appendChild(el('th', {'data-backend': b}, b.replace(/_/g, '_\u200b'))); });
    var body = table.appendChild(el('tbody'));
    M.rows.forEach(function(row){
      var tr = body.appendChild(el('tr'));
      tr.appendChild(el('th', {}, row[0]));
      row[1].forEach(function(i){ tr.appendChild(el('td')).appendChild(i === null ? el('span', {'class': 'not-run'}, 'not run') : cellElement(i, view)); });
    });
    var holder = document.getElementById('matrix');
    holder.textContent = '';
    holder.appendChild(table);
    var variants = document.getElementById('variants');
    variants.textContent = '';
    M.variants.forEach(function(i){
      var li = variants.appendChild(el('li'));
      li.appendChild(el('code', {}, D.cells[i].id));
      li.appendChild(cellElement(i, view));
    });
    var counts = {};
    view.cells.forEach(function(v){ if (v) counts[v.verdict] = (counts[v.verdict] || 0) + 1; });
    document.getElementById('summary').textContent = 'PREDICTED for ' + asCommand(view) + ': ' +
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

  var B85 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~';

  function base85(text){
    // Python's base64.b85decode: each 5 characters are 4 bytes, big-endian; a last group of k characters, padded
    // with the highest digit, gives k - 1 bytes.
    var digit = {}, n = text.length, groups = Math.ceil(n / 5), out = new Uint8Array(groups * 4);
    for (var i = 0; i < 85; i++) digit[B85.charCodeAt(i)] = i;
    for (var g = 0; g < groups; g++) {
      var v = 0;
      for (var j = g * 5; j < g * 5 + 5; j++) v = v * 85 + (j < n ? digit[text.charCodeAt(j)] : 84);
      out[g * 4] = (v >>> 24) & 255; out[g * 4 + 1] = (v >>> 16) & 255;
      out[g * 4 + 2] = (v >>> 8) & 255; out[g * 4 + 3] = v & 255;
    }
    return out.subarray(0, Math.floor(n / 5) * 4 + (n % 5 ? n % 5 - 1 : 0));
  }

  function unpack(data){
    // The per-point arrays come gzipped in base85 (bench/report/decide_data.py `pack`): the browser inflates them.
    if (!data.packed) return Promise.resolve(data);
    var bytes = base85(data.packed);
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

  function options(a){
    // The choices of an axis: the data's, or the chosen method's counts, lengths and batch sizes.
    var select = document.getElementById(a[0]);
    select.textContent = '';
    values(a).forEach(function(value){ select.appendChild(el('option', {value: key(a[0], value)}, label(a[0], value))); });
  }

  function methodChanged(){
    // Another method's counts, lengths and batch sizes: the chosen ones kept where it has them, else the nearest.
    AXES.forEach(function(a){
      if (!PER_METHOD[a[0]]) return;
      var select = document.getElementById(a[0]), was = select.value;
      options(a);
      var keys = values(a).map(String), at = keys.indexOf(was);
      select.selectedIndex = at >= 0 ? at : keys.indexOf(nearest(a[0], values(a), was)[0]);
    });
  }

  function choose(){
    // Select what the URL asks (an alias the CLI takes included); a value the grid lacks is named with the nearest.
    var chosen = asked(), problems = [];
    AXES.forEach(function(a){
      if (PER_METHOD[a[0]]) options(a);
      var select = document.getElementById(a[0]), list = values(a), want = chosen[a[0]];
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
      if (!PER_METHOD[a[0]]) options(a);
      document.getElementById(a[0]).addEventListener('change', function(){
        if (a[0] === 'method') methodChanged();
        warn([]);
        render();
      });
    });
    choose();
    window.addEventListener('hashchange', choose);
    document.documentElement.setAttribute('data-ready', '1');
  }
})();
