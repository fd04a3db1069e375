// Overview: health, partitions with their queue depth, apply rate, batch
// size and commit (fsync) time; in cluster mode the nodes and which
// partitions each owns; memory against its limit; recent errors.
import { api, h, table, card, fmtNum, fmtBytes, fmtTime, replace } from './core.js';

// ERRORS_SHOWN is how many of the node's newest warnings and errors the page lists.
const ERRORS_SHOWN = 20;

export default {
  title: 'Overview',
  mount(root) {
    const view = h('div');
    root.append(view);
    let prev = null;
    return async () => {
      const o = await api.get('/v1/admin/overview');
      const cluster = o.node.mode === 'cluster' ? await api.get('/v1/cluster') : null;
      const now = performance.now();
      const applied = o.partitions.reduce((a, p) => a + p.applied, 0);
      const rate = prev ? (applied - prev.applied) / ((now - prev.at) / 1000) : undefined;
      prev = { applied, at: now };
      const m = o.memory || {};
      replace(view,
        h('div', { class: 'cards' },
          card('health', o.healthy ? 'serving' : 'not serving', o.healthy ? 'ok' : 'bad'),
          card('node', `${o.node.nodeId} (${o.node.mode})`),
          card('uptime', fmtNum(o.node.uptimeSeconds / 60, 1) + ' min'),
          card('commands applied/s', fmtNum(rate, 1)),
          card('memory / limit', `${fmtBytes(m.inUse)} / ${m.limit ? fmtBytes(m.limit) : 'none'}`,
            m.fraction > 0.9 ? 'bad' : m.fraction > 0.7 ? 'warn' : ''),
          card('heap', fmtBytes(m.heap)),
          card('GC cycles', fmtNum(o.gc && o.gc.cycles)),
          card('goroutines', fmtNum(o.gc && o.gc.goroutines)),
          card('warnings and errors', fmtNum(o.errorsTotal), o.errorsTotal ? 'warn' : '')),
        cluster ? clusterView(cluster) : null,
        h('h2', {}, 'Partitions'),
        table([{ k: 'partition', num: true }, { k: 'owner', fmt: p => p.owner || (p.served ? o.node.nodeId : '?') },
          { k: 'queueDepth', label: 'queue depth', num: true }, { k: 'applied', num: true, fmt: p => fmtNum(p.applied) },
          { k: 'recentBatch', label: 'batch (recent)', num: true, fmt: p => fmtNum(p.recentBatch, 1) },
          { k: 'recentApplyMs', label: 'apply ms', num: true, fmt: p => fmtNum(p.recentApplyMs, 3) },
          { k: 'recentCommitMs', label: 'commit ms', num: true, fmt: p => fmtNum(p.recentCommitMs, 2) },
          { k: 'lag', num: true, fmt: p => (p.lag === undefined ? '' : fmtNum(p.lag)) }],
        o.partitions, { id: 'partitions' }),
        h('h2', {}, 'Recent warnings and errors'),
        (o.errors || []).length ? table([{ k: 'time', fmt: e => fmtTime(e.time) }, { k: 'level' }, { k: 'msg', label: 'message' },
          { k: 'attrs', fmt: e => Object.entries(e.attrs || {}).map(([k, v]) => `${k}=${v}`).join(' ') }],
        o.errors.slice(-ERRORS_SHOWN).reverse(), { id: 'errors' }) : h('p', { class: 'muted' }, 'None since the node started.'));
    };
  },
};

function clusterView(c) {
  const byNode = {};
  for (const [p, m] of Object.entries(c.owners || {})) (byNode[m.nodeId] ||= []).push(Number(p));
  const rows = (c.members || []).map(m => ({ node: m.nodeId, addr: m.addr,
    owns: (byNode[m.nodeId] || []).sort((a, b) => a - b).join(', '), me: m.nodeId === c.nodeId ? 'this node' : '' }));
  return [h('h2', {}, `Cluster ${c.cluster}: ${rows.length} nodes, ${c.partitions} partitions`),
    table([{ k: 'node' }, { k: 'addr' }, { k: 'owns', label: 'partitions owned' }, { k: 'me', label: '' }],
      rows.map(r => ({ ...r, __key: r.node })), { id: 'nodes' }),
    h('p', { class: 'muted' }, 'owners read at ' + fmtTime(c.ownersReadAt))];
}
