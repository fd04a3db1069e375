// Jobs: queues with counts by state and submit→start latency; jobs by
// queue and state with attempts, log and result; workers with slots and
// heartbeats; cancel, retry, pause/resume a queue, drain a worker. The
// jq services are called with the Connect protocol (JSON over POST).
import { api, h, table, fmtNum, fmtTime, replace, button, Pager, param } from './core.js';

// JOBS_PAGE is ListJobs' page size (its maximum is 100).
const JOBS_PAGE = 50;
const STATES = ['', 'PENDING', 'ASSIGNED', 'RUNNING', 'DONE', 'FAILED', 'DEAD_LETTERED'];

const JOB = 'jq.JobService', ADMIN = 'jq.AdminService';

export default {
  title: 'Jobs',
  mount(root) {
    const queues = h('div', { id: 'queues' });
    const workers = h('div', { id: 'workers' });
    const jobs = h('div', { id: 'jobs' });
    const detail = h('div', { id: 'job-detail' });
    const queueSel = h('select', { id: 'job-queue' });
    const stateSel = h('select', { id: 'job-state' }, STATES.map(s => h('option', { value: s }, s || 'any state')));
    stateSel.value = param('state');
    const pager = new Pager();
    for (const s of [queueSel, stateSel]) s.addEventListener('change', () => pager.reset());
    let selected = '';
    root.append(h('h2', {}, 'Queues'), queues, h('h2', {}, 'Workers'), workers,
      h('h2', {}, 'Jobs'), h('div', { class: 'controls' }, 'queue', queueSel, 'state', stateSel), jobs, pager.controls(), detail);
    return async () => {
      const [qs, ws] = await Promise.all([api.get('/v1/ops/jobs/queues'), api.rpc(ADMIN, 'ListWorkers')]);
      syncOptions(queueSel, qs.queues.map(q => q.name));
      const page = queueSel.value ? await api.rpc(JOB, 'ListJobs', { queueName: queueSel.value, status: stateSel.value || undefined,
        limit: JOBS_PAGE, pageToken: pager.after }) : { jobs: [] };
      pager.update(page.nextPageToken);
      replace(queues, queueTable(qs.queues));
      replace(workers, workerTable(ws.workers || []));
      replace(jobs, table([{ k: 'jobId', label: 'job', fmt: j => h('a', { href: '#jobs', 'data-job': j.jobId,
        onclick: (ev) => { ev.preventDefault(); selected = j.jobId; } }, j.jobId) },
      { k: 'status', label: 'state' }, { k: 'priority', num: true, fmt: j => j.priority || 0 }, { k: 'attempts', num: true, fmt: j => `${j.retryCount || 0} / ${j.maxRetries || 0}` },
      { k: 'workerId', label: 'worker' }, { k: 'createdAt', label: 'submitted', fmt: j => fmtTime(j.createdAt) },
      { k: 'actions', label: '', fmt: j => jobActions(j) }], (page.jobs || []).map(j => ({ ...j, status: j.status || 'PENDING' })),
      { id: 'jobs-table' }));
      if (selected) replace(detail, await jobDetail(selected));
    };
  },
};

function syncOptions(sel, names) {
  const have = [...sel.options].map(o => o.value);
  if (have.join('\n') === names.join('\n')) return;
  const keep = sel.value;
  sel.replaceChildren(...names.map(n => h('option', { value: n }, n)));
  const want = keep || param('queue');
  sel.value = names.includes(want) ? want : (names[0] || '');
}

function queueTable(qs) {
  const lat = (q, k) => (q.startLatency && q.startLatency.samples ? fmtNum(q.startLatency[k], 1) : '–');
  return table([{ k: 'name', label: 'queue' }, { k: 'paused', fmt: q => (q.paused ? 'paused' : '') },
    { k: 'pending', num: true }, { k: 'assigned', num: true }, { k: 'running', num: true }, { k: 'failed', num: true },
    { k: 'done', num: true }, { k: 'deadLettered', label: 'dead', num: true },
    { k: 'p50', label: 'start p50 ms', num: true, fmt: q => lat(q, 'p50Ms') }, { k: 'p95', label: 'start p95 ms', num: true, fmt: q => lat(q, 'p95Ms') },
    { k: 'actions', label: '', fmt: q => (q.paused
      ? button('jobs', 'admin', 'Resume', () => api.rpc(ADMIN, 'ResumeQueue', { name: q.name }), { 'data-queue': q.name })
      : button('jobs', 'admin', 'Pause', () => api.rpc(ADMIN, 'PauseQueue', { name: q.name }), { 'data-queue': q.name })) }],
  qs.map(q => ({ ...q, __key: q.name })), { id: 'queues-table' });
}

function workerTable(ws) {
  return table([{ k: 'workerId', label: 'worker' }, { k: 'hostname', label: 'host' }, { k: 'status' },
    { k: 'slots', label: 'busy / slots', num: true, fmt: w => `${w.activeJobCount || 0} / ${w.concurrency || 0}` },
    { k: 'queues', fmt: w => (w.queues || []).join(', ') }, { k: 'lastHeartbeat', label: 'heartbeat', fmt: w => fmtTime(w.lastHeartbeat) },
    { k: 'actions', label: '', fmt: w => (w.status === 'DRAINING' ? ''
      : button('jobs', 'admin', 'Drain', () => api.rpc(ADMIN, 'DrainWorker', { workerId: w.workerId }), { 'data-worker': w.workerId })) }],
  ws, { id: 'workers-table' });
}

function jobActions(j) {
  const s = j.status;
  return [
    ['PENDING', 'ASSIGNED', 'RUNNING', 'FAILED'].includes(s) ? button('jobs', 'write', 'Cancel', () => api.rpc(JOB, 'CancelJob', { jobId: j.jobId }), { 'data-job': j.jobId }) : null,
    ['FAILED', 'DEAD_LETTERED'].includes(s) ? button('jobs', 'write', 'Retry', () => api.rpc(JOB, 'RetryJob', { jobId: j.jobId }), { 'data-job': j.jobId }) : null];
}

// text shows a payload or result (bytes, base64 in JSON) as text when it is.
function text(b64) {
  if (!b64) return '';
  try { return new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(atob(b64), c => c.charCodeAt(0))); } catch (_) { return '(binary) ' + b64; }
}

async function jobDetail(id) {
  const [st, logs] = await Promise.all([api.rpc(JOB, 'GetJobStatus', { jobId: id }), api.rpc(JOB, 'GetJobLogs', { jobId: id })]);
  const j = st.job || {};
  return h('div', {},
    h('h2', {}, 'Job ' + id),
    h('p', {}, `${j.status || 'PENDING'} in ${j.queueName}, attempt ${j.retryCount || 0} of ${j.maxRetries || 0}`, j.errorMessage ? ' – ' + j.errorMessage : ''),
    h('h3', {}, 'Payload'), h('pre', {}, text(j.payload)),
    h('h3', {}, 'Result'), h('pre', { id: 'job-result' }, text(j.result)),
    h('h3', {}, 'Log'),
    table([{ k: 'occurredAt', label: 'time', fmt: e => fmtTime(e.occurredAt) }, { k: 'fromStatus', label: 'from' }, { k: 'toStatus', label: 'to' },
      { k: 'workerId', label: 'worker' }, { k: 'reason' }], logs.events || [], { id: 'job-log' }));
}
