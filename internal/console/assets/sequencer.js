// Sequencer: groups with released and held positions, the gap holding a
// group up, consumers and their lag.
import { api, h, table, fmtNum, replace, Pager } from './core.js';

// GROUPS_PAGE is how many groups the list shows at a time.
const GROUPS_PAGE = 50;

export default {
  title: 'Sequencer',
  mount(root) {
    const groups = h('div', { id: 'groups' });
    const consumers = h('div', { id: 'consumers' });
    const pager = new Pager();
    root.append(h('h2', {}, 'Groups'), groups, pager.controls(), h('h2', {}, 'Consumers'), consumers);
    return async () => {
      const page = await api.get(`/v1/ops/groups?limit=${GROUPS_PAGE}` + pager.query());
      pager.update(page.next);
      const gs = page.groups || [];
      replace(groups, table([{ k: 'name', label: 'group' }, { k: 'mode' }, { k: 'partition', num: true },
        { k: 'released', num: true }, { k: 'last', num: true }, { k: 'unreleased', num: true },
        { k: 'pending', num: true }, { k: 'leased', num: true }, { k: 'held', num: true },
        { k: 'gap', label: 'held up by', fmt: g => (g.gap ? `seq ${g.gap.seq} (${g.gap.state})` : '') }],
      gs.map(g => ({ ...g, __key: g.name })), { id: 'groups-table' }));
      const rows = gs.flatMap(g => (g.consumers || []).map(c => ({ group: g.name, ...c })));
      replace(consumers, table([{ k: 'group' }, { k: 'name', label: 'consumer' }, { k: 'position', num: true },
        { k: 'lag', num: true, fmt: c => fmtNum(c.lag) }], rows, { id: 'consumers-table' }));
    };
  },
};
