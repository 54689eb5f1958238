// Crash recovery: kill -9 of `moat serve` with live sandboxes, then restart.
// The live sandboxes are listed and usable, the ones killed before the crash
// stay gone, and nothing leaks once everything is killed.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'

import { Sandbox, SandboxNotFoundError } from 'e2b'

import { MoatServer, exportSdkEnv, within, run, killQuietly, assertNoLeaks, sleep } from './harness.mjs'

const external = Boolean(process.env.MOAT_E2E_API_URL)
let server = null
after(async () => {
  await server?.stop()
}, { timeout: 60_000 })

test('kill -9 of moat serve with 5 sandboxes, then restart', { timeout: 600_000, skip: external && 'needs a server this suite starts itself' }, async (t) => {
  server = new MoatServer()
  await server.start()
  await server.createApiKey()
  exportSdkEnv(server.url, server.apiKey)

  const tag = randomUUID()
  const sbxs = await Promise.all(
    [0, 1, 2, 3, 4].map((i) => within(180_000, 'create', () =>
      Sandbox.create('base', { timeoutMs: 600_000, metadata: { suite: 'restart', tag, i: String(i) } }))),
  )
  const ids = sbxs.map((s) => s.sandboxId)
  t.after(async () => {
    for (const id of ids) await killQuietly(id)
  })
  for (const [i, s] of sbxs.entries()) {
    await within(30_000, 'marker', () => s.files.write('/tmp/marker', `m${i}`))
  }
  const killed = sbxs.slice(0, 2)
  const live = sbxs.slice(2)
  for (const s of killed) assert.equal(await within(30_000, 'kill', () => s.kill()), true)

  // A background process in a live sandbox, to check it survives too.
  await within(30_000, 'bg sleep', () => live[0].commands.run('sleep 900', { background: true }))

  const oldPort = server.port
  await server.kill9()

  // Restart on the same address and data dir; the key stays valid.
  server.port = oldPort
  await server.start()
  exportSdkEnv(server.url, server.apiKey)

  const listed = await within(60_000, 'list after restart', () => Sandbox.list({ query: { metadata: { tag } } }).nextItems())
  assert.deepEqual(listed.map((s) => s.sandboxId).sort(), live.map((s) => s.sandboxId).sort(),
    'exactly the live sandboxes are listed after restart')
  for (const s of listed) assert.equal(s.state, 'running')

  for (const [j, s] of live.entries()) {
    const c = await within(30_000, 'connect', () => Sandbox.connect(s.sandboxId))
    const r = await run(c, 'cat /tmp/marker; echo; echo ok')
    assert.equal(r.stdout, `m${j + 2}\nok\n`, `sandbox ${s.sandboxId} keeps its filesystem and answers`)
    assert.equal(await within(30_000, 'isRunning', () => c.isRunning()), true)
  }
  const procs = await within(30_000, 'list processes', async () => (await Sandbox.connect(live[0].sandboxId)).commands.list())
  t.diagnostic(`processes in ${live[0].sandboxId} after restart: ${procs.map((p) => p.args.join(' ')).join(' | ')}`)

  for (const s of killed) {
    await assert.rejects(within(30_000, 'getInfo killed', () => Sandbox.getInfo(s.sandboxId)), SandboxNotFoundError)
    assert.equal(await within(30_000, 'kill killed', () => Sandbox.kill(s.sandboxId)), false)
  }
  // The killed ones left nothing behind even across the crash.
  await assertNoLeaks(killed.map((s) => s.sandboxId))

  // New sandboxes work on the restarted server.
  const fresh = await within(180_000, 'create after restart', () => Sandbox.create('base', { timeoutMs: 120_000 }))
  ids.push(fresh.sandboxId)
  assert.equal((await run(fresh, 'echo fresh')).stdout, 'fresh\n')

  for (const id of [...live.map((s) => s.sandboxId), fresh.sandboxId]) {
    assert.equal(await within(30_000, 'kill', () => Sandbox.kill(id)), true)
  }
  await assertNoLeaks(ids, { waitMs: 30_000 })
})

test('a sandbox whose timeout passes while the server is down is gone after restart', { timeout: 300_000, skip: external && 'needs a server this suite starts itself' }, async () => {
  if (!server) {
    server = new MoatServer()
    await server.start()
    await server.createApiKey()
    exportSdkEnv(server.url, server.apiKey)
  }
  const s = await within(180_000, 'create', () => Sandbox.create('base', { timeoutMs: 10_000 }))
  const port = server.port
  await server.kill9()
  await sleep(12_000)
  server.port = port
  await server.start()
  exportSdkEnv(server.url, server.apiKey)
  const deadline = Date.now() + 15_000
  let gone = false
  while (!gone && Date.now() < deadline) {
    gone = await within(30_000, 'getInfo', () => Sandbox.getInfo(s.sandboxId)).then(() => false, (e) => e instanceof SandboxNotFoundError)
    if (!gone) await sleep(500)
  }
  assert.ok(gone, 'expired sandbox still exists after restart')
  await assertNoLeaks([s.sandboxId], { waitMs: 30_000 })
})
