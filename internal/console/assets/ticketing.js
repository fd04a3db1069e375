// Ticketing: an event's areas with their seat maps (sold, free) and
// sell-through rate; a reservation looked up by id.
import { api, h, table, card, fmtNum, replace, button, Pager, param } from './core.js';

// EVENTS_PAGE is how many events the list shows at a time.
const EVENTS_PAGE = 20;
// SEAT_MAPS_PAGE is how many areas' seat maps are read and drawn each
// refresh: an event may have 1,000 areas, and each map is one request.
const SEAT_MAPS_PAGE = 10;

// SEAT_PX is one seat's square on a seat map canvas, gap included.
const SEAT_PX = 4;

export default {
  title: 'Ticketing',
  mount(root) {
    const eventInput = h('input', { id: 'event-id', placeholder: 'event id', value: param('event') });
    const resInput = h('input', { id: 'reservation-id', placeholder: 'reservation id', size: 38 });
    const resView = h('div', { id: 'reservation' });
    const view = h('div', { id: 'event' });
    const list = h('div', { id: 'events' });
    const pager = new Pager();
    let areaFrom = 0;
    const areaPrev = h('button', { onclick: () => { areaFrom = Math.max(0, areaFrom - SEAT_MAPS_PAGE); } }, '‹ areas');
    const areaNext = h('button', { onclick: () => { areaFrom += SEAT_MAPS_PAGE; } }, 'areas ›');
    eventInput.addEventListener('change', () => { areaFrom = 0; });
    const lookUp = async () => {
      const id = resInput.value.trim();
      if (!id) return replace(resView);
      try {
        const r = await api.get('/v2/reservations/' + encodeURIComponent(id));
        replace(resView, reservationView(r, lookUp));
      } catch (e) { replace(resView, h('p', { class: 'error' }, e.message)); }
    };
    root.append(
      h('h2', {}, 'Events'), list, pager.controls(),
      h('div', { class: 'controls' }, 'Event', eventInput, h('span', { class: 'muted' }, 'refreshed every second')),
      view,
      h('h2', {}, 'Reservation'),
      h('form', { class: 'controls', onsubmit: (ev) => { ev.preventDefault(); lookUp(); } }, resInput, h('button', { type: 'submit' }, 'Look up')),
      resView);
    let prev = null;
    return async () => {
      const page = await api.get(`/v2/events?limit=${EVENTS_PAGE}` + pager.query());
      pager.update(page.next);
      if (!eventInput.value.trim() && page.events.length) eventInput.value = page.events[0].eventName;
      replace(list, table([{ k: 'eventName', label: 'event', fmt: e => h('a', { href: '#ticketing', onclick: (ev) => {
        ev.preventDefault(); eventInput.value = e.eventName; } }, e.eventName) },
        { k: 'artist' }, { k: 'areas', num: true }, { k: 'seats', num: true }, { k: 'sold', num: true },
        { k: 'sellThrough', label: 'sell-through', num: true, fmt: e => fmtNum(100 * e.sellThrough, 1) + ' %' }],
        page.events, { id: 'events-table' }));
      const id = eventInput.value.trim();
      if (!id) { replace(view, h('p', { class: 'muted' }, 'Name an event to watch its areas.')); return; }
      let ev;
      try { ev = await api.get('/v2/events/' + encodeURIComponent(id)); } catch (e) {
        if (e.status === 404) { replace(view, h('p', { class: 'error' }, 'No event ' + id)); return; }
        throw e;
      }
      if (areaFrom >= ev.areas.length) areaFrom = 0;
      areaPrev.disabled = areaFrom === 0;
      areaNext.disabled = areaFrom + SEAT_MAPS_PAGE >= ev.areas.length;
      const maps = await seatMaps(id, ev.areas.slice(areaFrom, areaFrom + SEAT_MAPS_PAGE));
      const now = performance.now();
      const sold = ev.areas.reduce((a, x) => a + x.reservedSeats, 0);
      const total = sold + ev.availableSeats;
      const rate = prev && prev.id === id ? (sold - prev.sold) / ((now - prev.at) / 1000) : undefined;
      prev = { id, sold, at: now };
      replace(view,
        h('div', { class: 'cards' },
          card('event', `${ev.eventName || id}${ev.artist ? ' – ' + ev.artist : ''}`),
          card('sold', `${fmtNum(sold)} / ${fmtNum(total)}`),
          card('sell-through', total ? fmtNum(100 * sold / total, 1) + ' %' : '–'),
          card('seats sold / s', fmtNum(rate, 1))),
        table([{ k: 'areaId', label: 'area' }, { k: 'size', fmt: a => `${a.rowCount} × ${a.colCount}` },
          { k: 'reservedSeats', label: 'sold', num: true }, { k: 'availableSeats', label: 'free', num: true },
          { k: 'bar', label: 'sold', fmt: a => soldBar(a) }], ev.areas, { id: 'areas' }),
        h('h2', {}, 'Seat maps'),
        ev.areas.length > SEAT_MAPS_PAGE ? h('div', { class: 'controls' }, areaPrev, areaNext) : null,
        maps);
    };
  },
};

function soldBar(a) {
  const total = a.reservedSeats + a.availableSeats;
  const bar = h('span', { class: 'bar' });
  // A CSSOM property, not a style attribute: the policy allows no inline style.
  bar.style.width = (total ? Math.round(100 * a.reservedSeats / total) : 0) + 'px';
  return h('span', { class: 'bar back' }, bar);
}

// seatMaps draws each area's seats, sold in red, free in green, from the
// area's seat map (docs/API.md, "Operator reads").
async function seatMaps(eventId, areas) {
  const maps = await Promise.all(areas.map(a =>
    api.get(`/v2/events/${encodeURIComponent(eventId)}/areas/${encodeURIComponent(a.areaId)}/seats`).then(m => ({ a, m }),
      (e) => ({ a, err: e }))));
  return h('div', { class: 'seatmaps' }, maps.map(({ a, m, err }) =>
    h('div', { class: 'seatmap-area' }, h('div', {}, a.areaId), err ? h('p', { class: 'muted' }, err.message) : drawSeats(a, m))));
}

// drawSeats paints a canvas: one square per seat.
function drawSeats(a, m) {
  const c = h('canvas', { class: 'seats', width: a.colCount * SEAT_PX, height: a.rowCount * SEAT_PX, 'data-area': a.areaId });
  const g = c.getContext('2d');
  g.fillStyle = '#2da44e';
  g.fillRect(0, 0, c.width, c.height);
  g.fillStyle = '#cf222e';
  let n = 0;
  forEachSold(m, (row, col) => { g.fillRect(col * SEAT_PX, row * SEAT_PX, SEAT_PX - 1, SEAT_PX - 1); n++; });
  c.dataset.sold = n;
  return c;
}

// forEachSold calls f(row, col) (0-based) for every sold seat of m, whose
// bitmap has seat i = row·colCount + col at bit i mod 8 of byte ⌊i/8⌋.
function forEachSold(m, f) {
  const bytes = atob(m.bitmap || '');
  for (let b = 0; b < bytes.length; b++) {
    const v = bytes.charCodeAt(b);
    if (!v) continue;
    for (let bit = 0; bit < 8; bit++) {
      if (!(v & (1 << bit))) continue;
      const i = b * 8 + bit;
      if (i < m.seats) f(Math.floor(i / m.colCount), i % m.colCount);
    }
  }
}

function reservationView(r, refresh) {
  return h('div', {},
    table([{ k: 'k', label: 'field' }, { k: 'v', label: 'value' }],
      Object.entries(r).map(([k, v]) => ({ k, v: typeof v === 'object' ? JSON.stringify(v) : v }))),
    r.state === 'RESERVED' ? button('ticketing', 'write', 'Cancel reservation', async () => {
      await api.del('/v2/reservations/' + encodeURIComponent(r.reservationId)); await refresh();
    }) : null);
}
