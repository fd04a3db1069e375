// Commerce: the dead-letter queue with replay and discard, sagas in
// flight, orders with their saga timeline and payment, products' stock.
import { api, h, table, card, fmtNum, fmtTime, replace, button, can, Pager } from './core.js';

// Page sizes of the lists.
const ORDERS_PAGE = 50;
const DLQ_PAGE = 100;
const SAGAS_PAGE = 20;
const PRODUCTS_PAGE = 20;

const SAGA_STATUSES = ['IN_PROGRESS', 'STARTED', 'COMPENSATING', 'COMPLETED', 'COMPENSATED', 'FAILED', 'TIMED_OUT'];
const ORDER_STATUSES = ['', 'PENDING', 'CONFIRMED', 'CANCELLED'];

const enc = encodeURIComponent;

export default {
  title: 'Commerce',
  mount(root) {
    const dlq = h('div', { id: 'dlq' });
    const sagas = h('div', { id: 'sagas' });
    const orders = h('div', { id: 'orders' });
    const detail = h('div', { id: 'order-detail' });
    const products = h('div', { id: 'products' });
    const sagaStatus = h('select', { id: 'saga-status' }, SAGA_STATUSES.map(s => h('option', { value: s }, s)));
    const orderStatus = h('select', { id: 'order-status' }, ORDER_STATUSES.map(s => h('option', { value: s }, s || 'any status')));
    const pager = new Pager();
    orderStatus.addEventListener('change', () => pager.reset());
    let selected = '';
    const select = (id) => { selected = id; };
    root.append(
      h('h2', {}, 'Dead-letter queue'), dlq,
      h('h2', {}, 'Sagas'), h('div', { class: 'controls' }, 'status', sagaStatus), sagas,
      h('h2', {}, 'Orders'), h('div', { class: 'controls' }, 'status', orderStatus), orders, pager.controls(),
      detail,
      h('h2', {}, 'Products'), products);
    return async () => {
      const st = orderStatus.value;
      const [page, sagaList, prods] = await Promise.all([
        api.get(`/api/ops/orders?limit=${ORDERS_PAGE}${st ? '&status=' + st : ''}` + pager.query()),
        api.get(`/api/sagas?status=${sagaStatus.value}&limit=${SAGAS_PAGE}`),
        api.get(`/api/products?limit=${PRODUCTS_PAGE}`),
        refreshDLQ(dlq)]);
      pager.update(page.next);
      replace(sagas, table([{ k: 'sagaId', label: 'saga' }, { k: 'orderId', label: 'order', fmt: s => orderLink(s.orderId, select) },
        { k: 'status' }, { k: 'step', label: 'last step', fmt: s => lastStep(s) }, { k: 'updatedAt', label: 'updated', fmt: s => fmtTime(s.updatedAt) },
        { k: 'failureReason', label: 'reason' }], sagaList, { id: 'sagas-table' }));
      replace(orders, table([{ k: 'orderId', label: 'order', fmt: o => orderLink(o.orderId, select) }, { k: 'status' },
        { k: 'customerId', label: 'customer' }, { k: 'total', num: true, fmt: o => fmtNum(o.total, 2) },
        { k: 'createdAt', label: 'created', fmt: o => fmtTime(o.createdAt) }, { k: 'cancellationReason', label: 'reason' }],
        page.orders, { id: 'orders-table' }));
      replace(products, table([{ k: 'productId', label: 'product' }, { k: 'sku' }, { k: 'name' }, { k: 'price', num: true },
        { k: 'quantityOnHand', label: 'on hand', num: true }, { k: 'quantityReserved', label: 'reserved', num: true },
        { k: 'availableQuantity', label: 'available', num: true }], prods, { id: 'products-table' }));
      if (selected) replace(detail, await orderDetail(selected));
    };
  },
};

function orderLink(id, select) {
  return h('a', { href: '#commerce', 'data-order': id, onclick: (ev) => { ev.preventDefault(); select(id); } }, id);
}

function lastStep(s) {
  const steps = s.steps || [];
  return steps.length ? `${steps[steps.length - 1].stepName} ${steps[steps.length - 1].status}` : '';
}

async function refreshDLQ(el) {
  if (!can('commerce', 'admin')) {
    replace(el, h('p', { class: 'muted' }, 'The dead-letter queue needs a commerce:admin token.'));
    return;
  }
  const [count, entries] = await Promise.all([api.get('/api/admin/dlq/count'), api.get(`/api/admin/dlq?limit=${DLQ_PAGE}`)]);
  const again = () => refreshDLQ(el);
  replace(el,
    h('div', { class: 'cards' }, card('parked now', fmtNum(count.count), count.count ? 'bad' : 'ok'),
      card('fault injection', count.faultEnabled ? 'on' : 'off', count.faultEnabled ? 'warn' : ''),
      card('replayed', fmtNum(count.replayed)), card('discarded', fmtNum(count.discarded))),
    entries.length ? table([{ k: 'id' }, { k: 'eventType', label: 'step' }, { k: 'service' }, { k: 'orderId', label: 'order' },
      { k: 'partition', num: true }, { k: 'failedAt', label: 'failed', fmt: e => fmtTime(e.failedAt) }, { k: 'failureReason', label: 'cause' },
      { k: 'actions', label: '', fmt: e => [
        button('commerce', 'admin', 'Replay', async () => { await api.post(`/api/admin/dlq/${enc(e.id)}/replay`); await again(); }),
        button('commerce', 'admin', 'Discard', async () => { await api.del(`/api/admin/dlq/${enc(e.id)}`); await again(); })] }],
    entries.map(e => ({ ...e, __key: e.id })), { id: 'dlq-table' }) : h('p', { class: 'muted', id: 'dlq-empty' }, 'Nothing parked.'));
}

async function orderDetail(id) {
  const [order, saga] = await Promise.all([api.get('/api/orders/' + enc(id)),
    api.get('/api/ops/sagas/' + enc(id)).catch(e => (e.status === 404 ? null : Promise.reject(e)))]);
  const paid = saga && saga.steps.some(s => s.step === 'PAYMENT');
  const payment = paid ? await api.get('/api/payments/order/' + enc(id)).catch(e => (e.status === 404 ? null : Promise.reject(e))) : null;
  return h('div', {},
    h('h2', {}, 'Order ' + id),
    h('div', { class: 'cards' }, card('status', order.status), card('total', fmtNum(order.total, 2)),
      card('payment', payment ? `${payment.status} ${payment.amount} ${payment.currency}` : '–')),
    saga ? timeline(saga) : h('p', { class: 'muted' }, 'The saga has ended and been purged (--saga-retention); the order keeps the outcome.'));
}

function timeline(s) {
  return h('div', { id: 'timeline' },
    h('p', {}, `Saga ${s.sagaId}: ${s.status} (partition ${s.partition})`, s.failureReason ? ' – ' + s.failureReason : '',
      s.dlq ? h('span', { class: 'bad' }, ` ${s.dlq} step(s) parked in the dead-letter queue`) : ''),
    table([{ k: 'step' }, { k: 'status' }, { k: 'at', label: 'time', fmt: x => fmtTime(x.at) },
      { k: 'partitions', fmt: x => (x.partitions || []).join(', ') },
      { k: 'compensation', fmt: x => (x.compensation ? 'compensation' : '') }],
    s.steps.map(x => ({ ...x })), { class: 'timeline' }));
}
