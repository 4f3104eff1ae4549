'use strict';
// Line charts drawn as SVG by hand (the page loads no library): the small multiples of a
// run's metrics and the per-worker phase totals. draw() replaces a chart's SVG and sets
// data-points on the chart element to the number of finite points plotted (tests and
// users can tell an empty chart from a drawn one through the DOM).
const TandemCharts = (() => {
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const PAD = {left: 48, right: 8, top: 6, bottom: 16};
  // The drawing's own units; the SVG scales to its box, so a wide box gets a wide size
  // (spec.width) to keep its text the size of the other charts'.
  let WIDTH = 320;
  let HEIGHT = 130;
  let PLOT_W = 0;
  let PLOT_H = 0;

  function svgElement(name, attributes) {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
    return element;
  }

  function formatNumber(value) {
    if (value === null || value === undefined || !Number.isFinite(value)) return '–';
    const magnitude = Math.abs(value);
    if (magnitude !== 0 && (magnitude >= 1e6 || magnitude < 1e-3)) return value.toExponential(2);
    if (Number.isInteger(value)) return String(value);
    return String(Number(value.toPrecision(4)));
  }

  // The finite (x, y) points of one series, thinned to the first, lowest and highest point
  // of each pixel column when there are many more points than columns: a spike survives
  // the thinning, and a long run draws as fast as a short one. A null value breaks the
  // line unless the series is thinned.
  function seriesPoints(xs, ys, toColumn) {
    const points = [];
    let finite = 0;
    for (let i = 0; i < xs.length; i++) {
      const y = ys[i];
      if (y === null || y === undefined || !Number.isFinite(y) || !Number.isFinite(xs[i])) {
        points.push(null);
      } else {
        points.push([xs[i], y]);
        finite++;
      }
    }
    if (finite <= 2 * PLOT_W) return {points, finite};
    const thinned = [];
    let column = null;
    let bucket = [];
    const flush = () => {
      if (bucket.length === 0) return;
      let low = bucket[0];
      let high = bucket[0];
      for (const p of bucket) {
        if (p[1] < low[1]) low = p;
        if (p[1] > high[1]) high = p;
      }
      const kept = [bucket[0], low, high].filter((p, i, all) => all.indexOf(p) === i);
      kept.sort((a, b) => a[0] - b[0]);
      thinned.push(...kept);
      bucket = [];
    };
    for (const p of points) {
      if (p === null) continue;
      const c = toColumn(p[0]);
      if (c !== column) {
        flush();
        column = c;
      }
      bucket.push(p);
    }
    flush();
    return {points: thinned, finite};
  }

  function extent(values) {
    let low = Infinity;
    let high = -Infinity;
    for (const v of values) {
      if (v === null || v === undefined || !Number.isFinite(v)) continue;
      if (v < low) low = v;
      if (v > high) high = v;
    }
    return low <= high ? [low, high] : null;
  }

  // spec: {xs: [step], series: [{name, color, values: [number | null]}], width?, height?}
  function draw(chart, spec) {
    WIDTH = spec.width || 320;
    HEIGHT = spec.height || 130;
    PLOT_W = WIDTH - PAD.left - PAD.right;
    PLOT_H = HEIGHT - PAD.top - PAD.bottom;
    const old = chart.querySelector('svg');
    if (old) old.remove();
    const svg = svgElement('svg', {viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img'});
    chart.appendChild(svg);

    const xRange = extent(spec.xs);
    const yRange = extent([].concat(...spec.series.map((s) => s.values)));
    if (!xRange || !yRange) {
      chart.dataset.points = '0';
      svg.appendChild(svgElement('text', {x: WIDTH / 2, y: HEIGHT / 2, 'text-anchor': 'middle', class: 'axis-label'}))
          .textContent = 'no data yet';
      return;
    }
    let [x0, x1] = xRange;
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    let [y0, y1] = yRange;
    if (y0 === y1) {
      const pad = Math.abs(y0) * 0.1 || 1;
      y0 -= pad;
      y1 += pad;
    }
    const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * PLOT_W;
    const sy = (y) => PAD.top + (1 - (y - y0) / (y1 - y0)) * PLOT_H;

    for (const y of [y0, (y0 + y1) / 2, y1]) {
      svg.appendChild(svgElement('line', {x1: PAD.left, x2: WIDTH - PAD.right, y1: sy(y), y2: sy(y), class: 'grid-line'}));
      svg.appendChild(svgElement('text', {x: PAD.left - 4, y: sy(y) + 3, 'text-anchor': 'end', class: 'axis-label'}))
          .textContent = formatNumber(y);
    }
    svg.appendChild(svgElement('text', {x: PAD.left, y: HEIGHT - 3, class: 'axis-label'})).textContent = formatNumber(x0);
    svg.appendChild(svgElement('text', {x: WIDTH - PAD.right, y: HEIGHT - 3, 'text-anchor': 'end', class: 'axis-label'}))
        .textContent = formatNumber(x1);

    let plotted = 0;
    for (const series of spec.series) {
      const {points, finite} = seriesPoints(spec.xs, series.values, (x) => Math.floor(sx(x)));
      plotted += finite;
      let d = '';
      let pen = 'M';
      for (const p of points) {
        if (p === null) { pen = 'M'; continue; }
        d += `${pen}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`;
        pen = 'L';
      }
      // A single point has no line: draw it as a dot.
      if (finite === 1) {
        const only = points.find((p) => p !== null);
        svg.appendChild(svgElement('circle', {cx: sx(only[0]), cy: sy(only[1]), r: 2, fill: series.color}));
      }
      svg.appendChild(svgElement('path', {d, class: 'series', stroke: series.color, 'data-series': series.name}));
    }
    chart.dataset.points = String(plotted);
    addHover(svg, spec, sx, sy, x0, x1);
  }

  // A dashed line at the step under the pointer, with each series' value there.
  function addHover(svg, spec, sx, sy, x0, x1) {
    const [width, plotW, plotH] = [WIDTH, PLOT_W, PLOT_H];
    const line = svgElement('line', {y1: PAD.top, y2: PAD.top + plotH, class: 'hover-line', visibility: 'hidden'});
    const label = svgElement('text', {y: PAD.top + 10, class: 'hover-text', visibility: 'hidden'});
    const area = svgElement('rect', {x: PAD.left, y: PAD.top, width: plotW, height: plotH, fill: 'transparent'});
    svg.append(line, label, area);
    area.addEventListener('mousemove', (event) => {
      const box = svg.getBoundingClientRect();
      const x = x0 + ((event.clientX - box.left) * (width / box.width) - PAD.left) / plotW * (x1 - x0);
      let nearest = 0;
      for (let i = 1; i < spec.xs.length; i++) {
        if (Math.abs(spec.xs[i] - x) < Math.abs(spec.xs[nearest] - x)) nearest = i;
      }
      const step = spec.xs[nearest];
      const values = spec.series.map((s) => (spec.series.length > 1 ? s.name + ' ' : '') + formatNumber(s.values[nearest]));
      line.setAttribute('x1', sx(step));
      line.setAttribute('x2', sx(step));
      const right = sx(step) > PAD.left + plotW / 2;
      label.setAttribute('x', right ? sx(step) - 4 : sx(step) + 4);
      label.setAttribute('text-anchor', right ? 'end' : 'start');
      label.textContent = `step ${formatNumber(step)}: ${values.join(', ')}`;
      line.setAttribute('visibility', 'visible');
      label.setAttribute('visibility', 'visible');
    });
    area.addEventListener('mouseleave', () => {
      line.setAttribute('visibility', 'hidden');
      label.setAttribute('visibility', 'hidden');
    });
  }

  return {draw, formatNumber};
})();
