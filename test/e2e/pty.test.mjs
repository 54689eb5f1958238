// Interactive terminals through sandbox.pty: create, input, output, resize, kill.
import { test } from 'node:test'
import assert from 'node:assert/strict'

import { useServer, createSandbox, within, sleep } from './harness.mjs'

useServer()

async function waitFor(pred, ms, what) {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (pred()) return
    await sleep(100)
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`)
}

test('pty: create, sendInput, onData, resize, kill', { timeout: 180_000 }, async (t) => {
  const sbx = await createSandbox(t)
  const dec = new TextDecoder()
  let out = ''
  const term = await within(30_000, 'pty.create', () =>
    sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 120_000, onData: (d) => { out += dec.decode(d, { stream: true }) } }),
  )
  assert.ok(term.pid > 0, `pid ${term.pid}`)

  await within(30_000, 'sendInput echo', () => sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo hel""lo\n')))
  // The terminal echoes the input line (`echo hel""lo`); the output line is `hello`.
  await waitFor(() => /(^|[\r\n])hello\r?\n/.test(out), 20_000, `"hello" in pty output; got ${JSON.stringify(out.slice(-500))}`)

  // A pty has a terminal: tty succeeds and stty reports the size.
  await within(30_000, 'sendInput stty', () => sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; tty\n')))
  await waitFor(() => /24 80/.test(out) && /\/dev\/pts\//.test(out), 20_000, `stty size 24 80 and a /dev/pts tty; got ${JSON.stringify(out.slice(-500))}`)

  await within(30_000, 'resize', () => sbx.pty.resize(term.pid, { cols: 132, rows: 40 }))
  await within(30_000, 'sendInput stty 2', () => sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n')))
  await waitFor(() => /40 132/.test(out), 20_000, `stty size 40 132 after resize; got ${JSON.stringify(out.slice(-500))}`)

  // The environment the SDK asks for.
  await within(30_000, 'sendInput TERM', () => sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "T=$TERM"\n')))
  await waitFor(() => /T=xterm-256color/.test(out), 20_000, 'TERM=xterm-256color')

  assert.equal(await within(30_000, 'pty.kill', () => sbx.pty.kill(term.pid)), true)
  const res = await within(30_000, 'wait after kill', () => term.wait()).catch((e) => e)
  assert.ok(res instanceof Error || res.exitCode !== 0, 'killed pty does not exit 0')
  const list = await within(30_000, 'commands.list', () => sbx.commands.list())
  assert.ok(!list.some((p) => p.pid === term.pid), 'killed pty is gone')
  assert.equal(await within(30_000, 'pty.kill again', () => sbx.pty.kill(term.pid)), false)
})

test('pty: exit ends the stream with the exit code', { timeout: 120_000 }, async (t) => {
  const sbx = await createSandbox(t)
  const term = await within(30_000, 'pty.create', () =>
    sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 60_000, onData: () => {} }),
  )
  await within(30_000, 'sendInput exit', () => sbx.pty.sendInput(term.pid, new TextEncoder().encode('exit 0\n')))
  const r = await within(30_000, 'wait exit', () => term.wait())
  assert.equal(r.exitCode, 0)
})
