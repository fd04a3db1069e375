// Overview: health, partitions and their queues, apply rate, batch size,
// fsync time, memory; in cluster mode the nodes and who owns what.
import { api, h, table, card, fmtNum, fmtBytes, fmtTime, replace } from './core.js';

// parseMetrics reads the Prometheus text format into {name: [{labels, value}]}.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[2]) for (const l of m[2].slice(1, -1).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    (out[m[1]] ||= []).push({ labels, value: Number(m[3]) });
  }
  return out;
}

function one(ms, name) { return ms[name] && ms[name].length ? ms[name][0].value : undefined; }

// rates turns two scrapes into per-second figures and means over the interval.
function rates(prev, cur, dt) {
  const d = (name) => (one(cur, name) ?? 0) - (one(prev, name) ?? 0);
  const batches = d('surge_engine_batch_commands_count');
  const syncs = d('surge_wal_fsync_seconds_count');
  return {
    applyRate: dt > 0 ? d('surge_engine_batch_commands_sum') / dt : undefined,
    batchSize: batches > 0 ? d('surge_engine_batch_commands_sum') / batches : undefined,
    applyMs: batches > 0 ? 1000 * d('surge_engine_apply_seconds_sum') / batches : undefined,
    fsyncMs: syncs > 0 ? 1000 * d('surge_wal_fsync_seconds_sum') / syncs : undefined,
    requestRate: dt > 0 ? (sum(cur, 'surge_http_requests_total') - sum(prev, 'surge_http_requests_total')) / dt : undefined,
  };
}

function sum(ms, name) { return (ms[name] || []).reduce((a, s) => a + s.value, 0); }

export default {
  title: 'Overview',
  mount(root) {
    const view = h('div');
    root.append(view);
    let prev = null, prevAt = 0;
    return async () => {
      const health = await api.get('/healthz').catch(e => 'down: ' + e.message);
      const clustered = /\npartitions:/.test(health);
      const [text, cluster] = await Promise.all([
        api.get('/metrics').catch(() => ''),
        clustered ? api.get('/v1/cluster') : null,
      ]);
      const ms = parseMetrics(text || '');
      const now = performance.now();
      const r = prev ? rates(prev, ms, (now - prevAt) / 1000) : {};
      prev = ms; prevAt = now;
      const limit = one(ms, 'go_gc_gomemlimit_bytes');
      const rss = one(ms, 'process_resident_memory_bytes');
      const heap = one(ms, 'go_memstats_heap_inuse_bytes');
      const ok = health.startsWith('ok');
      const depth = (ms['surge_engine_inbox_depth'] || []).map(s => ({ partition: Number(s.labels.partition), depth: s.value }))
        .sort((a, b) => a.partition - b.partition);
      const owners = cluster ? cluster.owners : {};
      for (const p of depth) p.owner = owners[p.partition] ? owners[p.partition].nodeId : (cluster ? '–' : 'this node');
      replace(view,
        h('div', { class: 'cards' },
          card('health', ok ? 'serving' : health.split('\n')[0], ok ? 'ok' : 'bad'),
          card('requests/s', fmtNum(r.requestRate, 1)),
          card('commands applied/s', fmtNum(r.applyRate, 1)),
          card('mean batch', fmtNum(r.batchSize, 1)),
          card('apply per batch', r.applyMs === undefined ? '–' : fmtNum(r.applyMs, 3) + ' ms'),
          card('fsync', r.fsyncMs === undefined ? '–' : fmtNum(r.fsyncMs, 2) + ' ms'),
          card('memory (RSS / limit)', `${fmtBytes(rss)} / ${limit && limit < 2 ** 62 ? fmtBytes(limit) : 'none'}`),
          card('heap in use', fmtBytes(heap)),
          card('shed', fmtNum(sum(ms, 'surge_engine_shed_total'))),
          card('handler panics', fmtNum(sum(ms, 'surge_http_panics_total')), sum(ms, 'surge_http_panics_total') ? 'bad' : '')),
        cluster ? clusterView(cluster) : null,
        h('h2', {}, 'Partitions'),
        text ? table([{ k: 'partition', num: true }, { k: 'depth', label: 'queue depth', num: true }, { k: 'owner' }],
          depth, { id: 'partitions' }) : h('p', { class: 'muted' }, '/metrics is not served to this console (--metrics-access).'));
    };
  },
};

function clusterView(c) {
  const byNode = {};
  for (const [p, m] of Object.entries(c.owners || {})) (byNode[m.nodeId] ||= []).push(Number(p));
  const rows = (c.members || []).map(m => ({ node: m.nodeId, addr: m.addr,
    owns: (byNode[m.nodeId] || []).sort((a, b) => a - b).join(', '), me: m.nodeId === c.nodeId ? 'this node' : '' }));
  return [h('h2', {}, `Cluster ${c.cluster}: ${rows.length} nodes, ${c.partitions} partitions`),
    table([{ k: 'node' }, { k: 'addr' }, { k: 'owns', label: 'partitions owned' }, { k: 'me', label: '' }], rows, { id: 'nodes' }),
    h('p', { class: 'muted' }, 'owners read at ' + fmtTime(c.ownersReadAt))];
}
