// The decision page's view over window.DECIDE (decide-data.js, written by `make publish`; its encoding:
// bench/report/decide_data.py). Nothing is estimated here: verdicts and sizes are the Python estimator's.
// The selection lives in the URL fragment (#model=...&gpu=...&count=...&length=...&batch=...).
(function(){
  var AXES = [['model', 'models'], ['gpu', 'gpus'], ['count', 'counts'], ['length', 'max_lengths'], ['batch', 'batch_sizes']];
  var D, CFG;

  function label(axis, value){ return axis === 'model' ? value.name + (value.flag === '--workload' ? ' (workload)' : '') : String(value); }
  function key(axis, value){ return axis === 'model' ? value.name : String(value); }
  function gb(mb){ return mb === null || mb === undefined ? '—' : (mb / 1000).toFixed(1) + ' GB'; }
  function el(tag, attrs, text){
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fromHash(){
    var chosen = {};
    location.hash.slice(1).split('&').forEach(function(part){
      var kv = part.split('=');
      if (kv.length === 2) chosen[decodeURIComponent(kv[0])] = decodeURIComponent(kv[1]);
    });
    return chosen;
  }

  function index(){
    // The point's position in the grid's order (batch size fastest), and each axis's chosen position.
    var at = 0, picked = {};
    AXES.forEach(function(a){
      var list = D[a[1]], i = document.getElementById(a[0]).selectedIndex;
      picked[a[0]] = list[i];
      at = at * list.length + i;
    });
    return {at: at, picked: picked};
  }

  function cellView(i, point){
    // {verdict, css, label, total, margin, host, breakdown} of cell i at this point, or null when absent.
    var mark = D.marks[point[3]].charAt(i);
    if (mark === '-') return null;
    if (mark === 'x') return {verdict: 'not_applicable', css: 'v-not_applicable', label: CFG.labels.not_applicable,
                              reason: D.reasons[D.not_applicable[point[4]][i]]};
    var verdict = D.verdicts[CFG.codes.indexOf(mark)];
    var size = D.sizes[point[2]][i], usable = point[1];
    var margin = usable === null ? null : usable - size[0];
    var css = 'v-' + verdict;
    return {verdict: verdict, css: css, label: CFG.labels[verdict] || verdict, total: size[0], margin: margin,
            host: size[2], breakdown: D.breakdowns[size[1]]};
  }

  function title(cell, v){
    if (v.verdict === 'not_applicable') return cell.id + ': N/A: ' + v.reason;
    var parts = [cell.id + ': PREDICTED ' + v.verdict + ', total ' + gb(v.total) + ' per device, margin ' + gb(v.margin)];
    for (var k = 0; k < v.breakdown.length; k += 2) parts.push(D.terms[v.breakdown[k]] + ' ' + gb(v.breakdown[k + 1]));
    return parts.join('\n');
  }

  function cellElement(i, point){
    var cell = D.cells[i], v = cellView(i, point);
    if (v === null) return el('span', {'class': 'not-run'}, 'not in matrix');
    var e = el('span', {'class': 'dcell ' + v.css, 'data-cell': cell.id, 'data-verdict': v.verdict, 'title': title(cell, v),
                        'tabindex': '0'});
    e.appendChild(el('span', {'class': 'badge ' + v.css}, v.label));
    if (v.verdict !== 'not_applicable') {
      e.setAttribute('data-total-mb', String(v.total));
      e.setAttribute('data-margin-mb', String(v.margin));
      e.appendChild(document.createTextNode(' ' + gb(v.total)));
    }
    e.addEventListener('click', function(){ showDetail(i, point, e); });
    return e;
  }

  function showDetail(i, point, e){
    var cell = D.cells[i], v = cellView(i, point);
    document.querySelectorAll('.dcell.selected').forEach(function(s){ s.classList.remove('selected'); });
    e.classList.add('selected');
    var box = document.getElementById('detail');
    box.hidden = false;
    box.setAttribute('data-cell', cell.id);
    document.getElementById('detail-title').textContent = cell.id + ' · PREDICTED ' + v.verdict;
    var terms = document.getElementById('detail-terms');
    terms.textContent = '';
    if (v.verdict === 'not_applicable') {
      document.getElementById('detail-meta').textContent = 'Not applicable here: ' + v.reason;
    } else {
      document.getElementById('detail-meta').textContent = 'setup ' + (cell.setup || '—') + ' · total ' + gb(v.total) +
        ' per device (train peak + context + allocator slack) of ' + gb(point[1]) + ' · margin ' + gb(v.margin) +
        (v.host ? ' · host memory per rank ' + gb(v.host) + ' (not checked)' : '');
      terms.appendChild(el('tr')).appendChild(el('th', {colspan: '2'}, 'training peak, by term (PREDICTED)'));
      for (var k = 0; k < v.breakdown.length; k += 2) {
        var row = el('tr', {'data-term': D.terms[v.breakdown[k]]});
        row.appendChild(el('td', {}, D.terms[v.breakdown[k]]));
        row.appendChild(el('td', {'class': 'num'}, gb(v.breakdown[k + 1])));
        terms.appendChild(row);
      }
    }
    document.getElementById('detail-command').textContent = cell.command.replace(CFG.flags, point[0]);
  }

  function render(){
    var where = index(), point = D.points[where.at];
    var hash = AXES.map(function(a){ return a[0] + '=' + encodeURIComponent(key(a[0], where.picked[a[0]])); }).join('&');
    if (location.hash.slice(1) !== hash) history.replaceState(null, '', '#' + hash);
    var table = el('table', {'class': 'matrix decide', 'data-point': point[0]});
    var head = table.appendChild(el('thead')).appendChild(el('tr'));
    head.appendChild(el('th', {}, 'init · quant'));
    D.backends.forEach(function(b){ head.appendChild(el('th', {}, b)); });
    var body = table.appendChild(el('tbody'));
    D.rows.forEach(function(row){
      var tr = body.appendChild(el('tr'));
      tr.appendChild(el('th', {}, row[0]));
      row[1].forEach(function(i){ tr.appendChild(el('td')).appendChild(i === null ? el('span', {'class': 'not-run'}, 'not run') : cellElement(i, point)); });
    });
    var holder = document.getElementById('matrix');
    holder.textContent = '';
    holder.appendChild(table);
    var variants = document.getElementById('variants');
    variants.textContent = '';
    D.variants.forEach(function(i){
      var li = variants.appendChild(el('li'));
      li.appendChild(el('code', {}, D.cells[i].id));
      li.appendChild(cellElement(i, point));
    });
    var counts = {};
    for (var i = 0; i < D.cells.length; i++) {
      var v = cellView(i, point);
      if (v) counts[v.verdict] = (counts[v.verdict] || 0) + 1;
    }
    document.getElementById('summary').textContent = 'PREDICTED for python -m bench advise ' + point[0] + ': ' +
      Object.keys(counts).sort().map(function(k){ return counts[k] + ' ' + k; }).join(', ') + '.';
    document.getElementById('detail').hidden = true;
  }

  document.addEventListener('DOMContentLoaded', function(){
    D = window.DECIDE;
    CFG = JSON.parse(document.getElementById('decide-config').textContent);
    var chosen = fromHash();
    AXES.forEach(function(a){
      var select = document.getElementById(a[0]);
      D[a[1]].forEach(function(value, i){
        var option = el('option', {value: key(a[0], value)}, label(a[0], value));
        if (chosen[a[0]] === key(a[0], value) || (chosen[a[0]] === undefined && key(a[0], value) === CFG.defaults[a[0]])) option.defaultSelected = option.selected = true;
        select.appendChild(option);
      });
      select.addEventListener('change', render);
    });
    render();
    document.documentElement.setAttribute('data-ready', '1');
  });
})();
