// Several runtimes in one server: `moat serve --runtime container,gvisor,vm`
// runs a container, a gVisor and a microVM sandbox side by side, each
// picked through create metadata `moat.runtime` (E2B's create body has no
// runtime field) and reported back in the sandbox's metadata. Inside, the
// kernel tells them apart: the container shares the host's, gVisor shows
// its own (uname and dmesg), the microVM boots another. A kill -9 of the
// server and a restart adopts all three, and nothing leaks once they are
// killed; a restart with one runtime leaves the others' sandboxes alone
// in between. MOAT_E2E_RUNTIME is ignored: the suite picks its own runtimes.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import os from 'node:os'
import { randomUUID } from 'node:crypto'

import { Sandbox } from 'e2b'

import { MoatServer, exportSdkEnv, within, run, killQuietly, assertNoLeaks, template } from './harness.mjs'

const runtimes = (process.env.MOAT_E2E_MULTI_RUNTIMES || 'container,gvisor,vm').split(',')
const external = Boolean(process.env.MOAT_E2E_API_URL)
let server = null
after(async () => {
  await server?.stop()
}, { timeout: 60_000 })

// kernelEvidence returns what a sandbox's kernel says about itself.
async function kernelEvidence(sbx) {
  const r = await run(sbx, 'uname -r; echo ===; dmesg 2>&1 | head -n 3; true', { user: 'root' }, 120_000)
  const [release, dmesg = ''] = r.stdout.split('===\n')
  return { release: release.trim(), dmesg }
}

// checkKernel asserts that rt's sandbox runs on the kernel rt promises.
function checkKernel(rt, { release, dmesg }) {
  const host = os.release()
  switch (rt) {
    case 'container':
      assert.equal(release, host, 'a container shares the host kernel')
      break
    case 'gvisor':
      assert.notEqual(release, host, 'gVisor reports its own kernel version')
      assert.match(dmesg, /gVisor/, 'gVisor\'s dmesg names it')
      break
    case 'vm':
      assert.notEqual(release, host, 'a microVM boots its own kernel')
      assert.doesNotMatch(dmesg, /gVisor/)
      break
  }
}

test('container, gVisor and microVM sandboxes side by side; kill -9 and restart adopts all', {
  timeout: 900_000, skip: external && 'needs a server this suite starts itself',
}, async (t) => {
  server = new MoatServer({ extraArgs: ['--runtime', runtimes.join(',')] })
  await server.start()
  await server.createApiKey()
  exportSdkEnv(server.url, server.apiKey)
  const tag = randomUUID()

  // An unknown runtime is refused up front, naming the choices.
  await assert.rejects(
    within(60_000, 'create unknown runtime', () => Sandbox.create(template, { metadata: { 'moat.runtime': 'nope' } })),
    (err) => /400|not enabled/.test(`${err.message}`) && runtimes.every((r) => err.message.includes(r)),
  )

  const ids = []
  t.after(async () => {
    for (const id of ids) await killQuietly(id)
  })
  const sbxs = {}
  for (const rt of runtimes) {
    const started = Date.now()
    const sbx = await within(300_000, `create on ${rt}`, () =>
      Sandbox.create(template, { timeoutMs: 900_000, metadata: { suite: 'runtimes', tag, 'moat.runtime': rt } }))
    ids.push(sbx.sandboxId)
    sbxs[rt] = sbx
    t.diagnostic(`${rt}: created ${sbx.sandboxId} in ${Date.now() - started} ms`)
  }
  // The default (no metadata) is the first runtime.
  const dflt = await within(300_000, 'create default', () => Sandbox.create(template, { timeoutMs: 300_000 }))
  ids.push(dflt.sandboxId)
  assert.equal((await within(30_000, 'getInfo default', () => Sandbox.getInfo(dflt.sandboxId))).metadata['moat.runtime'], runtimes[0])
  assert.equal(await within(30_000, 'kill default', () => dflt.kill()), true)

  for (const rt of runtimes) {
    const sbx = sbxs[rt]
    const info = await within(30_000, 'getInfo', () => Sandbox.getInfo(sbx.sandboxId))
    assert.equal(info.metadata['moat.runtime'], rt, `${sbx.sandboxId} reports its runtime`)
    const ev = await kernelEvidence(sbx)
    t.diagnostic(`${rt}: uname -r ${ev.release}; dmesg: ${ev.dmesg.split('\n')[0]}`)
    checkKernel(rt, ev)
    await within(60_000, 'marker', () => sbx.files.write('/home/user/marker', `m-${rt}`))
  }

  const port = server.port
  // A server restarted with the first runtime only leaves the others'
  // sandboxes alone: still listed, answered 503 naming their runtime, and
  // still running for the restart with every runtime below to adopt.
  if (runtimes.length > 1) {
    const all = server.extraArgs
    await server.kill9()
    server.port = port
    server.extraArgs = ['--runtime', runtimes[0]]
    try {
      await server.start()
      exportSdkEnv(server.url, server.apiKey)
      for (const rt of runtimes.slice(1)) {
        await assert.rejects(within(30_000, `getInfo of ${rt} on a ${runtimes[0]}-only server`, () => Sandbox.getInfo(sbxs[rt].sandboxId)),
          (err) => err.message.includes(`the ${rt} runtime, which is not enabled`), `${rt} sandbox is answered 503`)
      }
      const kept = await within(60_000, 'list on a one-runtime server', () => Sandbox.list({ query: { metadata: { tag } } }).nextItems())
      assert.deepEqual(kept.map((s) => s.sandboxId).sort(), runtimes.map((rt) => sbxs[rt].sandboxId).sort(),
        'the other runtimes\' sandboxes are still listed')
    } finally {
      server.extraArgs = all
    }
  }
  await server.kill9()
  server.port = port
  await server.start()
  exportSdkEnv(server.url, server.apiKey)

  const listed = await within(60_000, 'list after restart', () => Sandbox.list({ query: { metadata: { tag } } }).nextItems())
  assert.deepEqual(listed.map((s) => s.sandboxId).sort(), runtimes.map((rt) => sbxs[rt].sandboxId).sort(),
    'every runtime\'s sandbox is adopted after the restart')
  for (const rt of runtimes) {
    const c = await within(60_000, 'connect', () => Sandbox.connect(sbxs[rt].sandboxId))
    const r = await run(c, 'cat /home/user/marker', {}, 120_000)
    assert.equal(r.stdout, `m-${rt}`, `${rt} sandbox keeps its files and answers after the restart`)
    const info = await within(30_000, 'getInfo', () => Sandbox.getInfo(c.sandboxId))
    assert.equal(info.metadata['moat.runtime'], rt)
    checkKernel(rt, await kernelEvidence(c))
  }
  for (const rt of runtimes) {
    assert.equal(await within(60_000, `kill ${rt}`, () => Sandbox.kill(sbxs[rt].sandboxId)), true)
  }
  await assertNoLeaks(ids, { waitMs: 30_000 })
})
