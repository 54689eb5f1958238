// Drives moat serve's control plane with the official e2b SDK (CommonJS
// build). Run by TestJSSDKControlPlane; exits non-zero on the first failure.
const assert = require('node:assert/strict')
const { Sandbox, SandboxNotFoundError } = require(process.env.E2B_MODULE)

const within = (ms, what, p) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timeout: ${what}`)), ms))])

async function main() {
  const sbx = await within(20000, 'create', Sandbox.create('base', { metadata: { 'a b': 'c&d', team: 'x' } }))
  assert.match(sbx.sandboxId, /^i[a-z0-9]{20}$/)
  const id = sbx.sandboxId

  const info = await within(5000, 'getInfo', sbx.getInfo())
  assert.equal(info.state, 'running')
  assert.equal(info.name, 'base')
  // The server echoes the sandbox's runtime under moat.runtime.
  assert.deepEqual(info.metadata, { 'a b': 'c&d', team: 'x', 'moat.runtime': 'fake' })
  assert.ok(info.endAt.getTime() - info.startedAt.getTime() >= 299000)

  const other = await within(20000, 'create 2', Sandbox.create('base', { metadata: { team: 'y' }, timeoutMs: 60000 }))
  let page = await within(5000, 'list', Sandbox.list({ query: { metadata: { 'a b': 'c&d' } } }).nextItems())
  assert.deepEqual(page.map((s) => s.sandboxId), [id])
  page = await within(5000, 'list paused', Sandbox.list({ query: { state: ['paused'] } }).nextItems())
  assert.equal(page.length, 0)
  const pager = Sandbox.list({ limit: 1 })
  const seen = []
  while (pager.hasNext) seen.push(...(await within(5000, 'page', pager.nextItems())).map((s) => s.sandboxId))
  assert.deepEqual(seen.sort(), [id, other.sandboxId].sort())

  await within(5000, 'setTimeout', sbx.setTimeout(120000))
  const metrics = await within(5000, 'metrics', sbx.getMetrics())
  assert.equal(metrics.length, 1)
  assert.ok(metrics[0].memTotal > 0)

  assert.equal(await within(5000, 'pause', sbx.pause()), true)
  assert.equal(await within(5000, 'pause again', Sandbox.pause(id)), false)
  assert.equal((await Sandbox.getInfo(id)).state, 'paused')
  const back = await within(5000, 'connect', Sandbox.connect(id))
  assert.equal(back.sandboxId, id)
  assert.equal((await Sandbox.getInfo(id)).state, 'running')

  assert.equal(await within(5000, 'kill', sbx.kill()), true)
  assert.equal(await within(5000, 'kill again', Sandbox.kill(id)), false)
  assert.equal(await within(5000, 'isRunning', sbx.isRunning()), false)
  await assert.rejects(within(5000, 'connect killed', Sandbox.connect(id)), SandboxNotFoundError)
  await assert.rejects(within(5000, 'getInfo killed', Sandbox.getInfo(id)), SandboxNotFoundError)
  await other.kill()
  console.log('SDK OK')
  process.exit(0)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
