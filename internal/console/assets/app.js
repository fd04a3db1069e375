// The console's shell: who the token is, the page list and the router.
import { api, h, setToken, setRoles, replace, Poller, ApiError, notice } from './core.js';
import overview from './overview.js';
import ticketing from './ticketing.js';
import commerce from './commerce.js';
import jobs from './jobs.js';
import sequencer from './sequencer.js';

const pages = { overview, ticketing, commerce, jobs, sequencer };
let current = null;

function pageName() {
  const name = location.hash.replace(/^#\/?/, '').split('?')[0];
  return pages[name] ? name : 'overview';
}

function show() {
  if (current) current.stop();
  current = null;
  const name = pageName();
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === name);
  const main = document.getElementById('main');
  const root = h('section', { id: 'page-' + name, class: 'page' });
  replace(main, root);
  notice('');
  current = new Poller(pages[name].mount(root));
  current.start();
}

async function whoami() {
  try {
    const me = await api.get('/v1/auth/whoami');
    setRoles(me.roles);
    document.getElementById('who').textContent = me.auth ? `${me.name} (${me.scopes.join(', ')})` : 'no authentication on this server';
    document.getElementById('signout').hidden = !me.auth;
    return true;
  } catch (e) {
    if (e instanceof ApiError && (e.status === 401 || e.status === 403)) return false;
    throw e;
  }
}

function askToken(message) {
  if (current) current.stop();
  current = null;
  replace(document.getElementById('main'));
  const form = document.getElementById('login');
  form.hidden = false;
  document.getElementById('login-error').textContent = message || '';
  document.getElementById('token').focus();
}

async function start() {
  document.getElementById('nav').replaceChildren(...Object.entries(pages).map(([name, p]) =>
    h('a', { href: '#' + name, 'data-page': name }, p.title)));
  document.getElementById('login').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    setToken(document.getElementById('token').value.trim());
    document.getElementById('token').value = '';
    if (await whoami()) {
      document.getElementById('login').hidden = true;
      show();
    } else {
      setToken('');
      askToken('That token is not valid on this server.');
    }
  });
  document.getElementById('signout').addEventListener('click', () => { setToken(''); askToken(''); });
  window.addEventListener('hashchange', () => { if (document.getElementById('login').hidden) show(); });
  window.addEventListener('surge-unauthorized', () => { setToken(''); askToken('The token was refused; sign in again.'); });
  if (await whoami()) show(); else askToken('');
}

start().catch((e) => notice(e.message));
