// Warm pools (issue 12): `moat serve --pool TEMPLATE=N` keeps N sandboxes
// ready. Through the official SDK: pool members never show in
// Sandbox.list; a create takes one (the server log names it) and applies
// the request's envs, metadata and timeout; a killed sandbox is never
// handed out again and the pool refills; after kill -9 of the server and a
// restart without the pool, nothing of the members is left on the host.
// Operators see the pools with `moat sandbox list --pool`.
// It also prints create→first command medians with and without a pool
// (both through the SDK, same machine, one run; no timed asserts).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox } from 'e2b'

import { MoatServer, exportSdkEnv, within, sleep, killQuietly, assertNoLeaks, template, runMoat } from './harness.mjs'

const external = Boolean(process.env.MOAT_E2E_API_URL)
const skip = external && 'needs a server this suite starts itself'
let server = null
after(async () => {
  await server?.stop()
}, { timeout: 60_000 })

// readyMembers returns the IDs the server logged as warm members, in order.
function readyMembers(log) {
  return [...log.matchAll(/warm pool: member ready.*?sandboxID=(\w+)/g)].map((m) => m[1])
}

// waitReady waits until the server's pool of template has n members ready,
// as `moat sandbox list --pool` reports it (the log's last "member ready"
// line is stale once a member was handed out: rounds timed after it found
// the pool short and were partly unpooled).
async function waitReady(srv, n, what) {
  const deadline = Date.now() + 240_000
  let last = ''
  while (Date.now() < deadline) {
    last = (await runMoat(['sandbox', 'list', '--pool'])).stdout
    const m = new RegExp(`^${template}\\s+\\d+\\s+(\\d+)$`, 'm').exec(last)
    if (m && Number(m[1]) >= n) return
    await sleep(200)
  }
  throw new Error(`${what}: the pool never had ${n} ready members (last: ${last})\n${srv.log.slice(-3000)}`)
}

async function createToFirstCommand() {
  const start = process.hrtime.bigint()
  const sbx = await within(180_000, 'create', () => Sandbox.create(template, { timeoutMs: 300_000 }))
  await within(60_000, 'first command', () => sbx.commands.run('true'))
  const ms = Number(process.hrtime.bigint() - start) / 1e6
  await killQuietly(sbx.sandboxId)
  return ms
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

test('warm pool: hand-out, no reuse, not listed, no leaks after a crash', { timeout: 900_000, skip }, async (t) => {
  server = new MoatServer({ extraArgs: ['--pool', `${template}=2`] })
  await server.start()
  await server.createApiKey()
  exportSdkEnv(server.url, server.apiKey)
  await waitReady(server, 2, 'start')
  const warm = await server.waitForLog((log) => readyMembers(log).length >= 2 && readyMembers(log))
  // Operators see the pool (the E2B API does not).
  const pools = await runMoat(['sandbox', 'list', '--pool'])
  assert.match(pools.stdout, new RegExp(`^${template}\\s+2\\s+2$`, 'm'), pools.stdout)

  assert.deepEqual(await within(30_000, 'list', () => Sandbox.list().nextItems()), [], 'pool members are listed')

  const sbx = await within(60_000, 'create', () =>
    Sandbox.create(template, { envs: { POOLED: 'yes' }, metadata: { suite: 'pool' }, timeoutMs: 120_000 }),
  )
  t.after(() => killQuietly(sbx.sandboxId))
  assert.ok(warm.includes(sbx.sandboxId), `create did not take a warm member (${sbx.sandboxId} not in ${warm})`)
  await server.waitForLog(new RegExp(`sandbox created from the warm pool.*sandboxID=${sbx.sandboxId}|sandboxID=${sbx.sandboxId}.*sandbox created from the warm pool`))
  const r = await within(30_000, 'run', () => sbx.commands.run('echo $POOLED; whoami'))
  assert.equal(r.stdout, 'yes\nuser\n')
  const listed = await within(30_000, 'list', () => Sandbox.list().nextItems())
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.equal(listed[0].metadata.suite, 'pool')
  const info = await within(30_000, 'getInfo', () => sbx.getInfo())
  assert.ok(info.endAt.getTime() - info.startedAt.getTime() <= 121_000, 'timeout not applied')

  // Killed, never handed out again; the pool refills with new members.
  await within(30_000, 'kill', () => sbx.kill())
  await waitReady(server, 2, 'refill')
  const next = await within(60_000, 'create again', () => Sandbox.create(template, { timeoutMs: 120_000 }))
  t.after(() => killQuietly(next.sandboxId))
  assert.notEqual(next.sandboxId, sbx.sandboxId)
  await waitReady(server, 2, 'refill again')

  // Create→first command with the pool (median of 5), each a hand-out.
  const handOuts = () => (server.log.match(/sandbox created from the warm pool/g) || []).length
  const pooled = []
  for (let i = 0; i < 5; i++) {
    const before = handOuts()
    pooled.push(await createToFirstCommand())
    await server.waitForLog(() => handOuts() > before).catch(() => {}) // asserted below
    assert.equal(handOuts(), before + 1, `pooled round ${i} did not take a warm member`)
    await waitReady(server, 2, 'refill between rounds')
  }

  // kill -9 with members ready; a restart without the pool removes them.
  // Every hand-out was refilled (waitReady), so the log names 2 + hand-outs members.
  const ready = await server.waitForLog((log) => readyMembers(log).length >= 2 + handOuts() && readyMembers(log))
  const members = ready.filter((id) => id !== sbx.sandboxId && id !== next.sandboxId)
  server.proc.kill('SIGKILL')
  await server.exited
  server = new MoatServer()
  await server.start()
  await server.createApiKey()
  exportSdkEnv(server.url, server.apiKey)
  assert.deepEqual(
    (await within(30_000, 'list after restart', () => Sandbox.list().nextItems())).map((s) => s.sandboxId),
    [next.sandboxId],
  )
  await killQuietly(next.sandboxId)
  await assertNoLeaks([...members, sbx.sandboxId, next.sandboxId])

  // The same without a pool, in this run.
  const unpooled = []
  for (let i = 0; i < 5; i++) unpooled.push(await createToFirstCommand())
  const p = median(pooled), u = median(unpooled)
  console.log(
    `# create→first command (${process.env.MOAT_E2E_RUNTIME || 'container'}, SDK): pooled ${p.toFixed(0)} ms, ` +
      `unpooled ${u.toFixed(0)} ms, pooled/unpooled ${(p / u).toFixed(2)}`,
  )
})
