// Moat's web console: login with an API key, then a hash router over the
// pages. Everything it shows comes from this server's REST API.
import { ApiError, api, clearKey, getKey, setKey } from './api.js'
import { h, when } from './dom.js'
import * as pages from './pages.js'

const main = document.getElementById('app')
const nav = document.getElementById('nav')
let cleanup = () => {}

function login(message) {
  nav.hidden = true
  const input = h('input', { id: 'api-key', type: 'password', autocomplete: 'off', placeholder: 'API key', required: true })
  const err = h('p', { id: 'login-error', class: 'error', role: 'alert' }, message || '')
  const form = h('form', { class: 'login', onsubmit: async (ev) => {
    ev.preventDefault()
    const key = input.value.trim()
    err.textContent = ''
    try {
      await api('/sandboxes', { key })
      setKey(key)
      route()
    } catch (e) {
      err.textContent = e instanceof ApiError && (e.status === 401 || e.status === 403)
        ? `API key refused: ${e.message}` : `Cannot reach the server: ${e.message}`
    }
  } }, h('label', { for: 'api-key' }, 'API key'), input, h('button', { type: 'submit' }, 'Log in'), err)
  main.replaceChildren(h('h2', {}, 'Log in'), form)
}

const events = [['Time', (e) => when(e.timestamp)], ['Type', (e) => e.type], ['Sandbox', (e) => e.sandboxId], ['Template', (e) => e.sandboxTemplateId]]
const volumes = [['Volume', (v) => v.name], ['ID', (v) => v.volumeID || v.id]]
const secrets = [['Secret', (s) => s.name], ['ID', (s) => s.id || s.secretID], ['Created', (s) => when(s.createdAt)]]

function route() {
  cleanup()
  cleanup = () => {}
  if (!getKey()) return login()
  nav.hidden = false
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent)
  let c
  switch (parts[0]) {
    case '': c = pages.sandboxes(main); break
    case 'sandbox': c = pages.sandbox(main, parts[1]); break
    case 'templates': pages.templates(main); break
    case 'template': pages.template(main, parts[1], parts[2] === 'build' ? parts[3] : ''); break
    case 'events': pages.listPage(main, 'Events', '/events/sandboxes?limit=100&orderAsc=false', events); break
    case 'volumes': pages.listPage(main, 'Volumes', '/volumes', volumes); break
    case 'secrets': pages.listPage(main, 'Secrets', '/secrets', secrets); break
    case 'api-keys': pages.apiKeys(main); break
    default: main.replaceChildren(h('p', { class: 'error' }, 'no such page'))
  }
  if (typeof c === 'function') cleanup = c
}

document.getElementById('logout').addEventListener('click', () => {
  clearKey()
  location.hash = '#/'
  route()
})
window.addEventListener('hashchange', route)
// A key the server stops accepting (revoked) sends the user back to login.
window.addEventListener('unhandledrejection', (ev) => {
  if (ev.reason instanceof ApiError && ev.reason.status === 401) {
    clearKey()
    login(`API key refused: ${ev.reason.message}`)
  }
})
route()
