// The console's pages. Each render function fills main and returns a
// cleanup function (timers, terminals) the router calls on leaving.
import { api } from './api.js'
import { drawChart, newChart } from './chart.js'
import { age, h, table, when } from './dom.js'
import { openTerminal } from './terminal.js'

const enc = encodeURIComponent

function fail(main, e) {
  main.replaceChildren(h('p', { class: 'error', role: 'alert' }, e.message))
}

async function kill(id) {
  if (!confirm(`Kill sandbox ${id}?`)) return false
  await api(`/sandboxes/${enc(id)}`, { method: 'DELETE' })
  return true
}

export function sandboxes(main) {
  const status = h('p', { class: 'muted' })
  const body = h('div')
  main.replaceChildren(h('h2', {}, 'Sandboxes'), status, body)
  const load = async () => {
    try {
      const list = (await api('/v2/sandboxes?state=running,paused')) || []
      list.sort((a, b) => Date.parse(b.startedAt) - Date.parse(a.startedAt))
      status.textContent = `${list.length} sandbox${list.length === 1 ? '' : 'es'}`
      body.replaceChildren(table('sandboxes', ['Sandbox', 'Template', 'State', 'Age', 'CPU', 'Memory', ''], list, (s) =>
        h('tr', { dataset: { id: s.sandboxID } },
          h('td', {}, h('a', { href: `#/sandbox/${enc(s.sandboxID)}` }, s.sandboxID)),
          h('td', {}, s.alias || s.templateID),
          h('td', { class: 'state' }, s.state),
          h('td', {}, age(s.startedAt)),
          h('td', {}, s.cpuCount),
          h('td', {}, `${s.memoryMB} MB`),
          h('td', {}, h('button', { class: 'kill', onclick: async () => {
            try { if (await kill(s.sandboxID)) await load() } catch (e) { status.textContent = e.message }
          } }, 'Kill')),
        )))
    } catch (e) {
      fail(main, e)
    }
  }
  load()
  const t = setInterval(load, 3000)
  return () => clearInterval(t)
}

export function sandbox(main, id) {
  const info = h('p', { class: 'muted' }, 'loading…')
  const chart = newChart()
  const termStatus = h('span', { id: 'terminal-status', class: 'muted' })
  const termEl = h('div', { id: 'terminal' })
  const logEl = h('pre', { id: 'sandbox-log', class: 'log' })
  const netEl = h('p', { id: 'sandbox-network' })
  let closeTerm = null
  const openBtn = h('button', { id: 'open-terminal', onclick: async () => {
    openBtn.disabled = true
    termStatus.textContent = 'connecting…'
    try { closeTerm = await openTerminal(termEl, id, (s) => { termStatus.textContent = s }) } catch (e) {
      termStatus.textContent = `terminal: ${e.message}`
      openBtn.disabled = false
    }
  } }, 'Open terminal')
  const killBtn = h('button', { class: 'kill', onclick: async () => {
    try { if (await kill(id)) location.hash = '#/' } catch (e) { info.textContent = e.message }
  } }, 'Kill')
  main.replaceChildren(
    h('h2', {}, `Sandbox ${id} `, killBtn), info,
    h('h3', {}, 'CPU and memory'),
    h('p', { class: 'legend' }, h('span', { class: 'cpu' }, '— CPU %'), h('span', { class: 'mem' }, '— memory %')),
    chart, h('p', { id: 'metrics-now', class: 'muted' }),
    h('h3', {}, 'Terminal'), h('p', {}, openBtn, ' ', termStatus), termEl,
    h('h3', {}, 'Network'), netEl,
    h('h3', {}, 'Log'), logEl,
  )
  const history = []
  const load = async () => {
    try {
      const s = await api(`/sandboxes/${enc(id)}`)
      info.textContent = `template ${s.alias || s.templateID} · ${s.state} · started ${when(s.startedAt)} · ends ${when(s.endAt)} · ${s.cpuCount} CPU · ${s.memoryMB} MB`
      netEl.textContent = networkText(s)
      // The server keeps a reading every 5 s: the first load draws the last
      // five minutes, later ones add what is newer than the chart's last.
      const since = Math.floor(Date.now() / 1000) - 300
      for (const m of (await api(`/sandboxes/${enc(id)}/metrics?start=${since}`)) || []) {
        if (!history.length || Date.parse(m.timestamp) > Date.parse(history.at(-1).timestamp)) history.push(m)
      }
      history.splice(0, Math.max(0, history.length - 60))
      drawChart(chart, history)
      // The newest 200 lines of the sandbox's own log, oldest first.
      const logs = ((await api(`/v2/sandboxes/${enc(id)}/logs?direction=backward&limit=200`)) || {}).logs || []
      logEl.textContent = logs.reverse().map((e) =>
        `${when(e.timestamp)} ${e.level.toUpperCase().padEnd(5)} ${e.message}` +
        Object.entries(e.fields || {}).map(([k, v]) => ` ${k}=${v}`).join('')).join('\n')
      const last = history.at(-1)
      if (last) {
        main.querySelector('#metrics-now').textContent =
          `CPU ${last.cpuUsedPct.toFixed(1)}% · memory ${(last.memUsed / 1048576).toFixed(0)} of ${(last.memTotal / 1048576).toFixed(0)} MiB`
      }
    } catch (e) {
      info.textContent = e.message
      info.className = 'error'
    }
  }
  load()
  const t = setInterval(load, 2000)
  return () => {
    clearInterval(t)
    if (closeTerm) closeTerm()
  }
}

export async function templates(main) {
  main.replaceChildren(h('h2', {}, 'Templates'), h('p', { class: 'muted' }, 'loading…'))
  try {
    const list = (await api('/templates')) || []
    main.replaceChildren(h('h2', {}, 'Templates'), table('templates', ['Template', 'Names', 'Status', 'Builds', 'Created', 'Spawns'], list, (t) =>
      h('tr', { dataset: { id: t.templateID } },
        h('td', {}, h('a', { href: `#/template/${enc(t.templateID)}` }, t.templateID)),
        h('td', {}, (t.names || t.aliases || []).join(', ')),
        h('td', {}, t.buildStatus), h('td', {}, t.buildCount), h('td', {}, when(t.createdAt)), h('td', {}, t.spawnCount),
      )))
  } catch (e) {
    fail(main, e)
  }
}

export async function template(main, id, buildID) {
  try {
    const t = await api(`/templates/${enc(id)}`)
    const log = h('div', { id: 'build-log' })
    main.replaceChildren(h('h2', {}, `Template ${id}`), h('p', { class: 'muted' }, (t.names || t.aliases || []).join(', ')),
      table('builds', ['Build', 'Status', 'Created', 'Finished', 'CPU', 'Memory'], t.builds || [], (b) =>
        h('tr', { dataset: { id: b.buildID } },
          h('td', {}, h('a', { href: `#/template/${enc(id)}/build/${enc(b.buildID)}` }, b.buildID)),
          h('td', {}, b.status), h('td', {}, when(b.createdAt)), h('td', {}, when(b.finishedAt)),
          h('td', {}, b.cpuCount), h('td', {}, `${b.memoryMB} MB`))),
      log)
    if (buildID) await buildLog(log, id, buildID)
  } catch (e) {
    fail(main, e)
  }
}

// buildLog shows a build's log, kept by the build API for the builds it
// ran (not for templates built by `moat template build` on the host).
async function buildLog(el, id, buildID) {
  try {
    const st = await api(`/templates/${enc(id)}/builds/${enc(buildID)}/status?logsOffset=0`)
    const lines = (st.logEntries || []).map((e) => `${e.timestamp} ${e.level || ''} ${e.message}`)
    el.replaceChildren(h('h3', {}, `Build ${buildID}: ${st.status}`),
      h('pre', { class: 'log' }, (lines.length ? lines : st.logs || []).join('\n') || '(no log)'))
  } catch (e) {
    el.replaceChildren(h('h3', {}, `Build ${buildID}`), h('p', { class: 'error' }, `no build log: ${e.message}`))
  }
}

// listPage shows a list API as a table of the given columns.
export async function listPage(main, title, path, cols) {
  main.replaceChildren(h('h2', {}, title), h('p', { class: 'muted' }, 'loading…'))
  try {
    const list = (await api(path)) || []
    main.replaceChildren(h('h2', {}, title), list.length === 0 ? h('p', { class: 'muted' }, 'none') :
      table(title.toLowerCase(), cols.map((c) => c[0]), list, (x) => h('tr', {}, cols.map(([, f]) => h('td', {}, f(x) ?? '')))))
  } catch (e) {
    fail(main, e)
  }
}

// apiKeys is the team's API keys: masked, with a name and a Delete each,
// and a form that makes one and shows its value once.
export async function apiKeys(main) {
  const name = h('input', { id: 'new-key-name', placeholder: 'name', required: true, maxlength: 128 })
  const made = h('p', { id: 'new-key' })
  const body = h('div', {}, h('p', { class: 'muted' }, 'loading…'))
  const load = async () => {
    try {
      const list = (await api('/api-keys')) || []
      body.replaceChildren(table('api-keys', ['Name', 'Key', 'Created', ''], list, (k) =>
        h('tr', { dataset: { id: k.id } },
          h('td', {}, k.name || '(no name)'),
          h('td', { class: 'mono' }, `${k.mask.prefix}${k.mask.maskedValuePrefix}…${k.mask.maskedValueSuffix}`),
          h('td', {}, when(k.createdAt)),
          h('td', {}, h('button', { class: 'kill', onclick: async () => {
            if (!confirm(`Delete API key ${k.name || k.id}?`)) return
            try {
              await api(`/api-keys/${enc(k.id)}`, { method: 'DELETE' })
              await load()
            } catch (e) { made.textContent = e.message; made.className = 'error' }
          } }, 'Delete')))))
    } catch (e) {
      body.replaceChildren(h('p', { class: 'error' }, e.message))
    }
  }
  const form = h('form', { class: 'inline', onsubmit: async (ev) => {
    ev.preventDefault()
    try {
      const k = await api('/api-keys', { method: 'POST', body: { name: name.value } })
      made.className = ''
      made.replaceChildren('New key (shown once): ', h('code', { id: 'new-key-value' }, k.key))
      name.value = ''
      await load()
    } catch (e) { made.textContent = e.message; made.className = 'error' }
  } }, name, h('button', { type: 'submit' }, 'Create key'))
  main.replaceChildren(h('h2', {}, 'API keys'), form, made, body)
  await load()
}

// networkText is a sandbox's network policy in a line: internet access,
// allowed and denied destinations, domain rules (their headers' values
// are secrets the API never returns) and public traffic.
function networkText(s) {
  const n = s.network || {}
  const parts = [s.allowInternetAccess === false ? 'no internet access' : 'internet access']
  if ((n.allowOut || []).length) parts.push(`allow ${n.allowOut.join(', ')}`)
  if ((n.denyOut || []).length) parts.push(`deny ${n.denyOut.join(', ')}`)
  const rules = Object.keys(n.rules || {})
  if (rules.length) parts.push(`rules for ${rules.join(', ')}`)
  if (n.allowPublicTraffic === false) parts.push('public traffic needs the access token')
  return parts.join(' · ')
}
