// A terminal in the browser: xterm.js on envd's PTY (process.Process/Start
// with a pty, keys through SendInput, sizes through Update), reached
// through the sandbox proxy of this same server.
import { Terminal } from '@xterm/xterm'

import { api } from './api.js'
import { fromBase64, serverStream, toBase64, unary } from './connect.js'

const enc = new TextEncoder()

// openTerminal starts a login shell on a PTY in the sandbox and shows it in
// el. It returns a function that closes the terminal and kills the shell.
export async function openTerminal(el, sandboxID, onStatus) {
  // connect hands out envd's access token (GET /sandboxes/{id} may not).
  const sandbox = await api(`/v2/sandboxes/${encodeURIComponent(sandboxID)}/connect`, { method: 'POST', body: {} })
  const cols = 100
  const rows = 24
  const term = new Terminal({ cols, rows, convertEol: false, fontSize: 14 })
  term.open(el)
  const abort = new AbortController()
  let pid = 0
  let queue = Promise.resolve() // keys go in the order typed
  const send = (bytes) => {
    queue = queue
      .then(() => unary(sandbox, 'process.Process/SendInput', { process: { pid }, input: { pty: toBase64(bytes) } }))
      .catch((e) => onStatus(`input: ${e.message}`))
  }
  term.onData((d) => pid && send(enc.encode(d)))
  term.onResize(({ cols: c, rows: r }) =>
    pid && unary(sandbox, 'process.Process/Update', { process: { pid }, pty: { size: { cols: c, rows: r } } }).catch(() => {}),
  )
  const start = {
    process: { cmd: '/bin/bash', args: ['-i', '-l'], envs: { TERM: 'xterm-256color' } },
    pty: { size: { cols, rows } },
  }
  const done = serverStream(sandbox, 'process.Process/Start', start, (m) => {
    const ev = m.event || {}
    if (ev.start) {
      pid = ev.start.pid
      onStatus(`connected (pid ${pid})`)
      term.focus()
    } else if (ev.data && ev.data.pty) {
      term.write(fromBase64(ev.data.pty))
    } else if (ev.end) {
      onStatus(`exited${ev.end.exitCode !== undefined ? ` (${ev.end.exitCode})` : ''}`)
    }
  }, abort.signal)
  done.catch((e) => abort.signal.aborted || onStatus(`terminal: ${e.message}`))
  return () => {
    if (pid) unary(sandbox, 'process.Process/SendSignal', { process: { pid }, signal: 'SIGNAL_SIGKILL' }).catch(() => {})
    abort.abort()
    term.dispose()
  }
}
