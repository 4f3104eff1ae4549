'use strict';
// The tandem dashboard (docs/dashboard.md): polls the /api/ endpoints and redraws the
// panels in place. Whatever comes from the run (samples are model output, log lines can
// say anything) enters the page as text (textContent), never as markup.
(() => {
  const POLL_MS = 1500;
  const SLOW_EVERY = 3;  // samples and errors: every third poll, or when the step changed
  const PHASE_ROWS_KEPT = 300;
  // The curves shown first, when the run has them; the group buttons show the others.
  const OVERVIEW_KEYS = ['reward/mean', 'response/length_mean', 'actor/entropy', 'actor/kl', 'actor/loss',
                         'actor/grad_norm', 'time/step_s', 'perf/rollout_tokens_per_s'];
  const PALETTE = ['#2f6fd6', '#e07b39', '#23824a', '#b83280', '#6b46c1', '#c53030', '#2c7a7b', '#975a16',
                   '#4a5568', '#d69e2e'];
  // The phase bars' commands: lighter than the workers' line colours, so the two never read alike.
  const COMMAND_PALETTE = ['#8fb3ef', '#f3b07c', '#8cd0a6', '#e39ac4', '#b7a3e6', '#f09a9a', '#86c9c9', '#d9b77a',
                           '#a0aec0', '#f6e05e'];

  const state = {
    metrics: {epoch: null, steps: [], series: {}, lastStep: null},
    phases: {epoch: null, rows: [], present: false},
    group: 'overview',
    filter: '',
    chartsDirty: true,
    groupKeys: '',
    polls: 0,
    lastStep: null,
    busy: false,
  };

  const $ = (id) => document.getElementById(id);

  function element(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  async function getJson(path) {
    const response = await fetch(path, {cache: 'no-store'});
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    return response.json();
  }

  function seconds(value) {
    if (!Number.isFinite(value) || value <= 0) return '–';
    if (value < 1) return `${value.toFixed(value < 0.01 ? 4 : 2)} s`;
    if (value < 60) return `${value.toFixed(1)} s`;
    const s = Math.round(value);
    if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
    return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
  }

  // ---- status, progress and workers ----

  function runState(status) {
    if (!status.status_present) return status.finished ? 'finished' : 'waiting';
    const active = status.state === 'running' || status.state === 'starting';
    if (active && status.controller_alive === false) return 'gone';
    return status.state || 'unknown';
  }

  function renderStatus(status) {
    const dir = status.run_dir || '';
    $('run-name').textContent = dir.split('/').filter(Boolean).pop() || dir;
    document.title = `tandem: ${$('run-name').textContent}`;
    const shown = runState(status);
    const badge = $('run-state');
    badge.className = `badge state-${shown}`;
    badge.textContent = shown === 'gone' ? 'not running (controller gone)'
        : shown === 'waiting' ? 'waiting for status.json' : shown;

    const step = Number(status.step || 0);
    const steps = Number(status.steps || 0);
    const progress = $('progress');
    progress.dataset.step = String(step);
    progress.dataset.steps = String(steps);
    $('progress-fill').style.width = steps > 0 ? `${Math.min(100, (100 * step) / steps).toFixed(1)}%` : '0';
    $('progress-text').textContent = steps > 0 ? `step ${step} of ${steps} (${Math.floor((100 * step) / steps)}%)`
                                               : `step ${step}`;

    const facts = [['run', dir]];
    if (status.step_seconds > 0) facts.push(['step time', seconds(status.step_seconds)]);
    if (shown === 'running' && status.step_seconds > 0 && steps > step) {
      facts.push(['eta', seconds(status.step_seconds * (steps - step))]);
    }
    if (status.updated_unix) facts.push(['updated', `${seconds(Math.max(0.001, status.now - status.updated_unix))} ago`]);
    if (status.pid) facts.push(['controller', `pid ${status.pid} on ${status.hostname || '?'}`]);
    const list = $('run-facts');
    list.replaceChildren(...facts.map(([name, value]) => {
      const row = element('div');
      row.append(element('dt', null, name), element('dd', null, value));
      return row;
    }));

    const banner = $('last-error');
    banner.hidden = !status.last_error;
    banner.textContent = status.last_error ? `last error: ${status.last_error}` +
        (status.last_error_log ? `\nits log: ${status.last_error_log}` : '') : '';
    // A worker does not outlive its run's controller: "ready" from a run that ended is stale.
    const live = shown === 'running' || shown === 'starting';
    renderWorkers((status.workers || []).map((w) =>
      (!live && (w.state === 'ready' || w.state === 'starting')) ? {...w, state: 'exited'} : w));
  }

  function latestPhaseRow() {
    const rows = state.phases.rows;
    return rows.length ? rows[rows.length - 1] : null;
  }

  function workerSeconds(row, name) {
    const commands = row && row.workers && row.workers[name];
    if (!commands) return null;
    return Object.values(commands).reduce((sum, v) => sum + (Number.isFinite(v) ? v : 0), 0);
  }

  function renderWorkers(workers) {
    const phase = latestPhaseRow();
    const stragglers = new Set((phase && phase.stragglers) || []);
    $('workers-body').replaceChildren(...workers.map((w) => {
      const row = element('tr', 'worker-row');
      row.dataset.worker = w.name;
      if (stragglers.has(w.name)) row.classList.add('straggler');
      const stateCell = element('td');
      stateCell.append(element('span', `badge state-${w.state}`, w.state));
      const busy = workerSeconds(phase, w.name);
      row.append(element('td', 'mono', w.name), stateCell, element('td', 'mono', w.pid || '–'),
                 element('td', 'nowrap', w.hostname || '–'), element('td', 'mono', w.address || '–'),
                 element('td', w.restarts > 0 ? 'restarted' : null, w.restarts),
                 element('td', 'mono', busy === null ? '–' : seconds(busy)),
                 element('td', 'path', (w.log || '').split('/').pop()));
      row.lastChild.title = w.log || '';  // the whole path on hover
      return row;
    }));
    $('workers-note').textContent = workers.length ? '' : 'No workers yet: status.json lists them once they started.';
  }

  // ---- curves ----

  function mergeMetrics(chunk) {
    const m = state.metrics;
    const before = m.steps.length;
    const added = chunk.steps.length;
    m.epoch = chunk.epoch;
    if (added === 0) return;
    m.steps.push(...chunk.steps);
    const keys = new Set([...Object.keys(m.series), ...Object.keys(chunk.series)]);
    for (const key of keys) {
      const column = m.series[key] || (m.series[key] = new Array(before).fill(null));
      const values = chunk.series[key] || new Array(added).fill(null);
      for (const v of values) column.push(v);
    }
    m.lastStep = chunk.last_step;
    state.chartsDirty = true;
  }

  async function pollMetrics() {
    const m = state.metrics;
    let chunk = await getJson(m.lastStep === null ? '/api/metrics' : `/api/metrics?after=${m.lastStep}`);
    if (m.epoch !== null && chunk.epoch !== m.epoch) {
      // metrics.jsonl was replaced or cut back (a resume): start over from its top.
      state.metrics = {epoch: null, steps: [], series: {}, lastStep: null};
      state.chartsDirty = true;
      chunk = await getJson('/api/metrics');
    }
    mergeMetrics(chunk);
  }

  function groupOf(key) {
    const slash = key.indexOf('/');
    return slash > 0 ? key.slice(0, slash) : 'other';
  }

  function overviewKeys(all) {
    const chosen = OVERVIEW_KEYS.filter((k) => all.includes(k));
    return chosen.length ? chosen : all.slice(0, 8);
  }

  function selectedKeys() {
    const all = Object.keys(state.metrics.series).sort();
    let keys = state.group === 'overview' ? overviewKeys(all)
        : state.group === 'all' ? all : all.filter((k) => groupOf(k) === state.group);
    if (state.filter) keys = all.filter((k) => k.toLowerCase().includes(state.filter.toLowerCase()));
    return keys;
  }

  function renderGroupButtons() {
    const all = Object.keys(state.metrics.series).sort();
    const groups = ['overview', ...[...new Set(all.map(groupOf))].sort(), 'all'];
    if (groups.join() === state.groupKeys) return;
    state.groupKeys = groups.join();
    if (!groups.includes(state.group)) state.group = 'overview';
    $('metric-groups').replaceChildren(...groups.map((group) => {
      const button = element('button', group === state.group ? 'selected' : null, group);
      button.type = 'button';
      button.dataset.group = group;
      button.addEventListener('click', () => {
        state.group = group;
        state.filter = '';
        $('metric-filter').value = '';
        for (const b of $('metric-groups').children) b.classList.toggle('selected', b.dataset.group === group);
        state.chartsDirty = true;
        renderCharts();
      });
      return button;
    }));
  }

  function renderCharts() {
    renderGroupButtons();
    if (!state.chartsDirty) return;
    state.chartsDirty = false;
    const m = state.metrics;
    const keys = selectedKeys();
    const container = $('charts');
    const existing = new Map([...container.children].map((c) => [c.dataset.key, c]));
    const charts = keys.map((key) => {
      let chart = existing.get(key);
      if (!chart) {
        chart = element('div', 'chart metric-chart');
        chart.dataset.key = key;
        const head = element('div', 'chart-head');
        head.append(element('span', 'chart-title', key), element('span', 'chart-value'));
        head.firstChild.title = key;
        chart.append(head);
      }
      const values = m.series[key];
      let last = null;
      for (let i = values.length - 1; i >= 0 && last === null; i--) last = values[i];
      chart.querySelector('.chart-value').textContent = TandemCharts.formatNumber(last);
      TandemCharts.draw(chart, {xs: m.steps, series: [{name: key, color: PALETTE[0], values}]});
      return chart;
    });
    container.replaceChildren(...charts);
    $('curves-note').textContent = m.steps.length ? ''
        : 'No metrics yet: metrics.jsonl gets a line after each RL step (a warm-up, sft, comes before).';
  }

  // ---- phase timings ----

  async function pollPhases() {
    const p = state.phases;
    const last = latestPhaseRow();
    let chunk = await getJson(last ? `/api/phases?after=${last.step}` : '/api/phases');
    if (p.epoch !== null && chunk.epoch !== p.epoch) {
      p.rows = [];
      chunk = await getJson('/api/phases');
    }
    p.epoch = chunk.epoch;
    p.present = chunk.present;
    p.rows.push(...chunk.rows);
    if (p.rows.length > PHASE_ROWS_KEPT) p.rows.splice(0, p.rows.length - PHASE_ROWS_KEPT);
  }

  function commandColors(rows) {
    const colors = new Map();
    for (const row of rows) {
      for (const commands of Object.values(row.workers || {})) {
        for (const name of Object.keys(commands)) {
          if (!colors.has(name)) colors.set(name, COMMAND_PALETTE[colors.size % COMMAND_PALETTE.length]);
        }
      }
    }
    return colors;
  }

  function renderPhases() {
    const p = state.phases;
    const row = latestPhaseRow();
    const bars = $('phases-bars');
    if (!row) {
      bars.replaceChildren();
      $('phases-legend').replaceChildren();
      $('phases-chart').replaceChildren();
      $('phases-step').textContent = '';
      $('phases-note').textContent = p.present ? 'worker_phases.jsonl has no step yet.'
          : 'No worker_phases.jsonl in this run (written by newer tandem versions, one line per step).';
      return;
    }
    $('phases-note').textContent = '';
    $('phases-step').textContent = `step ${row.step}: seconds per command`;
    const colors = commandColors(p.rows);
    const stragglers = new Set(row.stragglers || []);
    const workers = Object.keys(row.workers || {}).sort();
    const longest = Math.max(1e-9, ...workers.map((w) => workerSeconds(row, w)));
    const cells = [];
    for (const worker of workers) {
      const name = element('span', stragglers.has(worker) ? 'phase-name straggler' : 'phase-name',
                           stragglers.has(worker) ? `${worker} (straggler)` : worker);
      const track = element('div', 'phase-track');
      track.dataset.worker = worker;
      for (const [command, value] of Object.entries(row.workers[worker])) {
        const segment = element('div', 'phase-segment');
        segment.style.width = `${(100 * Math.max(0, value)) / longest}%`;
        segment.style.background = colors.get(command);
        segment.title = `${command}: ${TandemCharts.formatNumber(value)} s`;
        track.append(segment);
      }
      cells.push(name, track, element('span', 'phase-total', seconds(workerSeconds(row, worker))));
    }
    bars.replaceChildren(...cells);
    $('phases-legend').replaceChildren(...[...colors].map(([command, color]) => {
      const item = element('span');
      const swatch = element('i');
      swatch.style.background = color;
      item.append(swatch, document.createTextNode(command));
      return item;
    }));

    // Each worker's busy seconds per step over the recent steps: a straggler stands out.
    let chart = $('phases-chart').firstChild;
    if (!chart) {
      chart = element('div', 'chart phase-chart');
      const head = element('div', 'chart-head');
      head.append(element('span', 'chart-title', 'busy seconds per step, by worker'), element('span', 'chart-value'));
      chart.append(head);
      $('phases-chart').append(chart);
    }
    const allWorkers = [...new Set(p.rows.flatMap((r) => Object.keys(r.workers || {})))].sort();
    TandemCharts.draw(chart, {
      width: 640,
      height: 150,
      xs: p.rows.map((r) => r.step),
      series: allWorkers.map((w, i) => ({name: w, color: PALETTE[i % PALETTE.length],
                                         values: p.rows.map((r) => workerSeconds(r, w))})),
    });
    chart.querySelector('.chart-value').replaceChildren(...allWorkers.map((w, i) => {
      const name = element('span', 'series-name', w);
      name.style.color = PALETTE[i % PALETTE.length];
      return name;
    }));
  }

  // ---- samples and errors ----

  function rewardClass(reward) {
    if (!Number.isFinite(reward)) return null;
    return reward > 0 ? 'reward-good' : 'reward-bad';
  }

  function textCell(text) {
    const cell = element('td', 'text');
    cell.append(element('div', null, text === undefined || text === null ? '' : String(text)));
    return cell;
  }

  const SAMPLE_COLUMNS = new Set(['step', 'reward', 'prompt', 'response', 'finish_reason', 'messages', 'stop_reason']);

  // A multi-turn sample's conversation, turn by turn: each message with its role (and a
  // tool's name), reset()'s messages marked as the prompt's. Text only, never markup.
  function conversationCell(messages) {
    const cell = element('td', 'text conversation');
    const list = element('div', 'turns');
    for (const m of messages) {
      const role = String(m.role || '?');
      const turn = element('div', `turn turn-${role.replace(/[^a-z_]/g, '')}${m.prompt ? ' turn-prompt' : ''}`);
      const label = m.name ? `${role} (${m.name})` : role;
      turn.append(element('span', 'turn-role', m.prompt ? `${label}, prompt` : label),
                  element('span', 'turn-content', String(m.content === undefined ? '' : m.content)));
      list.append(turn);
    }
    cell.append(list);
    return cell;
  }

  function renderSamples(result) {
    $('samples-body').replaceChildren(...result.rows.map((sample) => {
      const row = element('tr', 'sample-row');
      const more = Object.entries(sample).filter(([k]) => !SAMPLE_COLUMNS.has(k))
          .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join('  ');
      const turns = Array.isArray(sample.messages);
      row.append(element('td', 'mono', sample.step), element('td', `mono ${rewardClass(sample.reward) || ''}`,
                 TandemCharts.formatNumber(sample.reward)), textCell(sample.prompt),
                 turns ? conversationCell(sample.messages) : textCell(sample.response),
                 element('td', null, (turns ? sample.stop_reason : sample.finish_reason) || ''),
                 element('td', 'more', more));
      return row;
    }));
    $('samples-note').textContent = result.rows.length ? ''
        : result.present ? 'samples.jsonl is empty so far.' : 'No samples.jsonl yet (logging.samples_per_step).';
  }

  function renderErrors(result) {
    const lines = result.lines.slice().reverse();  // newest first
    $('errors').replaceChildren(...lines.map((line) => {
      const item = element('li', `error-line level-${line.level}`);
      item.append(element('span', 'time', line.time ? line.time.slice(11) : ''),
                  element('span', `level level-${line.level}`, line.level),
                  element('span', 'text', `${line.log}: ${line.text}`));
      item.firstChild.title = line.time;
      return item;
    }));
    $('errors-note').textContent = lines.length ? '' : 'No errors or warnings in logs/.';
  }

  // ---- polling ----

  async function poll() {
    if (state.busy) return;
    state.busy = true;
    try {
      const status = await getJson('/api/status');
      await Promise.all([pollMetrics(), pollPhases()]);
      renderStatus(status);
      renderCharts();
      renderPhases();
      const stepChanged = status.step !== state.lastStep;
      if (stepChanged || state.polls % SLOW_EVERY === 0) {
        const [samples, errors] = await Promise.all([getJson('/api/samples?n=12'), getJson('/api/errors?n=60')]);
        renderSamples(samples);
        renderErrors(errors);
        state.lastStep = status.step;
      }
      $('connection').textContent = `updated ${new Date().toLocaleTimeString()}`;
      $('connection').classList.remove('lost');
    } catch (error) {
      $('connection').textContent = `cannot reach the dashboard server (${error.message}); retrying`;
      $('connection').classList.add('lost');
    } finally {
      state.polls++;
      state.busy = false;
    }
  }

  $('metric-filter').addEventListener('input', (event) => {
    state.filter = event.target.value.trim();
    state.chartsDirty = true;
    renderCharts();
  });
  poll();
  setInterval(poll, POLL_MS);
})();
