// Sandbox lifecycle through the control-plane API: create, getInfo, list with
// metadata filter and pagination, setTimeout, kill, isRunning, expiry, and
// the not-found paths, and a stream open while the sandbox is killed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'

import { Sandbox, SandboxNotFoundError } from 'e2b'

import { useServer, createSandbox, killQuietly, within, sleep, template } from './harness.mjs'

useServer()

test('create, getInfo fields, isRunning, kill', { timeout: 180_000 }, async (t) => {
  const tag = randomUUID()
  const sbx = await createSandbox(t, { metadata: { suite: 'lifecycle', tag } })
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/, 'sandbox IDs are lowercase alphanumeric')

  const info = await within(30_000, 'getInfo', () => sbx.getInfo())
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.ok(info.templateId, 'templateId is set')
  assert.equal(info.metadata.tag, tag)
  assert.equal(info.metadata.suite, 'lifecycle')
  assert.equal(info.state, 'running')
  assert.ok(info.startedAt instanceof Date && !isNaN(info.startedAt), 'startedAt parses')
  assert.ok(info.endAt instanceof Date && !isNaN(info.endAt), 'endAt parses')
  assert.ok(info.endAt > info.startedAt, 'endAt after startedAt')
  assert.ok(info.cpuCount >= 1, `cpuCount ${info.cpuCount}`)
  assert.ok(info.memoryMB >= 128, `memoryMB ${info.memoryMB}`)
  assert.match(info.envdVersion, /^\d+\.\d+\.\d+/, 'envdVersion is semver')

  const staticInfo = await within(30_000, 'Sandbox.getInfo', () => Sandbox.getInfo(sbx.sandboxId))
  assert.equal(staticInfo.sandboxId, sbx.sandboxId)

  assert.equal(await within(30_000, 'isRunning', () => sbx.isRunning()), true)
  assert.equal(await within(30_000, 'kill', () => sbx.kill()), true)
  assert.equal(await within(30_000, 'isRunning after kill', () => sbx.isRunning()), false)
  await assert.rejects(within(30_000, 'getInfo after kill', () => sbx.getInfo()), SandboxNotFoundError)
  assert.equal(await within(30_000, 'second kill', () => Sandbox.kill(sbx.sandboxId)), false)
})

test('list filters by metadata and paginates', { timeout: 300_000 }, async (t) => {
  const tag = randomUUID()
  const created = await Promise.all(
    [0, 1, 2].map((i) => createSandbox(t, { metadata: { suite: 'lifecycle-list', tag, idx: String(i) } })),
  )
  const want = created.map((s) => s.sandboxId).sort()

  // One page with everything.
  const all = Sandbox.list({ query: { metadata: { tag } } })
  const items = await within(30_000, 'list', () => all.nextItems())
  assert.deepEqual(items.map((s) => s.sandboxId).sort(), want)
  for (const s of items) {
    assert.equal(s.metadata.tag, tag)
    assert.equal(s.state, 'running')
    assert.ok(s.startedAt instanceof Date && !isNaN(s.startedAt))
  }
  assert.equal(all.hasNext, false)

  // Filter by a metadata pair that only one sandbox has.
  const one = Sandbox.list({ query: { metadata: { tag, idx: '1' } } })
  const oneItems = await within(30_000, 'list idx=1', () => one.nextItems())
  assert.deepEqual(oneItems.map((s) => s.sandboxId), [created[1].sandboxId])

  // A filter that matches nothing.
  const none = Sandbox.list({ query: { metadata: { tag: randomUUID() } } })
  assert.deepEqual(await within(30_000, 'list none', () => none.nextItems()), [])

  for (const limit of [1, 2]) {
    const pager = Sandbox.list({ query: { metadata: { tag } }, limit })
    const seen = []
    let pages = 0
    while (pager.hasNext) {
      const page = await within(30_000, `list limit=${limit} page ${pages}`, () => pager.nextItems())
      assert.ok(page.length <= limit, `page of ${page.length} > limit ${limit}`)
      seen.push(...page.map((s) => s.sandboxId))
      pages++
      assert.ok(pages <= 5, 'pagination does not terminate')
    }
    assert.deepEqual([...seen].sort(), want, `limit=${limit} returns every sandbox exactly once`)
    assert.ok(pages >= Math.ceil(3 / limit), `limit=${limit}: ${pages} pages`)
  }

  // Special characters in metadata survive the triple encoding (hazard H7).
  const odd = { 'a b': 'c&d=e', tag2: tag }
  const sbx = await createSandbox(t, { metadata: odd })
  const oddList = Sandbox.list({ query: { metadata: { 'a b': 'c&d=e', tag2: tag } } })
  const oddItems = await within(30_000, 'list odd metadata', () => oddList.nextItems())
  assert.deepEqual(oddItems.map((s) => s.sandboxId), [sbx.sandboxId])
})

test('setTimeout moves endAt', { timeout: 180_000 }, async (t) => {
  const sbx = await createSandbox(t, { timeoutMs: 60_000 })
  const before = await within(30_000, 'getInfo', () => sbx.getInfo())
  await within(30_000, 'setTimeout', () => sbx.setTimeout(300_000))
  const afterInfo = await within(30_000, 'getInfo', () => sbx.getInfo())
  assert.ok(afterInfo.endAt.getTime() > before.endAt.getTime() + 200_000,
    `endAt ${before.endAt.toISOString()} -> ${afterInfo.endAt.toISOString()}`)
  // Shortening is allowed by /timeout.
  await within(30_000, 'setTimeout shorter', () => Sandbox.setTimeout(sbx.sandboxId, 120_000))
  const shorter = await within(30_000, 'getInfo', () => sbx.getInfo())
  const left = shorter.endAt.getTime() - Date.now()
  assert.ok(left > 90_000 && left < 150_000, `endAt ~120 s away, got ${left} ms`)
})

test('negative timeouts and unusable envs answer 400 and change nothing', { timeout: 180_000 }, async (t) => {
  const sbx = await createSandbox(t, { timeoutMs: 120_000 })
  const before = await within(30_000, 'getInfo', () => sbx.getInfo())
  for (const ms of [-1_000, -3_600_000]) {
    await assert.rejects(within(30_000, `setTimeout(${ms})`, () => sbx.setTimeout(ms)), /greater than 0/)
  }
  assert.equal(await within(30_000, 'isRunning', () => sbx.isRunning()), true, 'a rejected setTimeout kills nothing')
  const after = await within(30_000, 'getInfo', () => sbx.getInfo())
  assert.equal(after.endAt.getTime(), before.endAt.getTime(), 'endAt unchanged')
  for (const [envs, msg] of [
    [{ '': 'x' }, /name is empty/],
    [{ 'A=B': 'x' }, /contains '='/],
    [{ BIG: 'v'.repeat(900 * 1024) }, /execve/],
  ]) {
    await assert.rejects(within(60_000, 'create with bad envs', () => Sandbox.create(template, { envs })), msg)
  }
})

test('a sandbox created with timeoutMs 10000 is gone after ~12 s', { timeout: 120_000 }, async (t) => {
  const t0 = Date.now()
  const sbx = await createSandbox(t, { timeoutMs: 10_000 })
  assert.equal(await within(30_000, 'isRunning', () => sbx.isRunning()), true)
  const id = sbx.sandboxId
  await sleep(Math.max(0, t0 + 12_000 - Date.now()))
  // Allow a few seconds of reaper slack beyond 12 s, then it must be gone.
  let running = true
  const deadline = t0 + 17_000
  while (Date.now() < deadline) {
    running = await within(15_000, 'isRunning after timeout', () => sbx.isRunning())
    if (!running) break
    await sleep(500)
  }
  assert.equal(running, false, `still running ${Date.now() - t0} ms after create`)
  await assert.rejects(within(30_000, 'getInfo expired', () => Sandbox.getInfo(id)), SandboxNotFoundError)
  const ids = (await within(30_000, 'list', () => Sandbox.list().nextItems())).map((s) => s.sandboxId)
  assert.ok(!ids.includes(id), 'expired sandbox is not listed')
})

// The proxy closes its connections to a sandbox once it is removed: a
// command stream open through it ends when another client kills the
// sandbox, instead of hanging until TCP gives up (~165 s seen on gVisor,
// whose netstack never resets them).
test('a commands.run stream ends promptly when another client kills the sandbox', { timeout: 120_000 }, async (t) => {
  const sbx = await createSandbox(t)
  const stream = sbx.commands.run('sleep 600', { timeoutMs: 0 }).then(
    (r) => ({ resolved: r }),
    (err) => ({ err }),
  )
  await sleep(2_000) // the stream is open through the proxy
  const killedAt = Date.now()
  assert.equal(await within(30_000, 'kill from another client', () => Sandbox.kill(sbx.sandboxId)), true)
  const outcome = await within(60_000, 'the command stream after the kill', stream)
  t.diagnostic(`stream ended ${Date.now() - killedAt} ms after the kill: ${outcome.err?.name ?? 'resolved'}`)
  assert.ok(outcome.err, `the killed sandbox's command resolved: ${JSON.stringify(outcome.resolved)}`)
})

test('unknown IDs: getInfo/connect throw SandboxNotFoundError, kill returns false', { timeout: 60_000 }, async () => {
  const id = 'inotexist' + Math.random().toString(36).slice(2, 12)
  await assert.rejects(within(20_000, 'getInfo unknown', () => Sandbox.getInfo(id)), SandboxNotFoundError)
  await assert.rejects(within(20_000, 'connect unknown', () => Sandbox.connect(id)), SandboxNotFoundError)
  await assert.rejects(within(20_000, 'setTimeout unknown', () => Sandbox.setTimeout(id, 30_000)), SandboxNotFoundError)
  assert.equal(await within(20_000, 'kill unknown', () => Sandbox.kill(id)), false)
})

test('connect to a running sandbox returns a usable handle', { timeout: 120_000 }, async (t) => {
  const sbx = await createSandbox(t)
  const again = await within(30_000, 'Sandbox.connect', () => Sandbox.connect(sbx.sandboxId))
  assert.equal(again.sandboxId, sbx.sandboxId)
  const r = await within(60_000, 'run via connected handle', () => again.commands.run('echo connected'))
  assert.equal(r.stdout.trim(), 'connected')
  assert.equal(template.length > 0, true)
  await killQuietly(sbx.sandboxId)
})

// getMetrics through the SDK: CPU, memory and disk. A container's disk
// figures come from its own disk (its quota), a microVM's from envd inside.
// The server keeps a reading every 5 s: a range answers those in it, the
// newest last, with one taken now when the range reaches now.
test('getMetrics reports CPU, memory and disk use', { timeout: 120_000 }, async (t) => {
  const sbx = await createSandbox(t)
  const first = await within(30_000, 'getMetrics', () => sbx.getMetrics())
  assert.ok(first.length >= 1, JSON.stringify(first))
  const m = first.at(-1)
  assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, JSON.stringify(m))
  assert.ok(m.memUsed > 0 && m.memTotal > 0, JSON.stringify(m))
  assert.ok(m.diskTotal > 0 && m.diskUsed > 0, JSON.stringify(m))
  if (process.env.MOAT_E2E_RUNTIME !== 'vm') {
    assert.ok(m.diskTotal <= 2048 * 2 ** 20 && m.diskTotal > 1900 * 2 ** 20, `diskTotal ${m.diskTotal}`)
  }
  await within(60_000, 'write 64 MiB', () => sbx.commands.run('dd if=/dev/zero of=/home/user/m bs=1M count=64 conv=fsync'))
  const after = (await within(30_000, 'getMetrics', () => sbx.getMetrics())).at(-1)
  assert.ok(after.diskUsed >= m.diskUsed + 60 * 2 ** 20, `diskUsed ${m.diskUsed} → ${after.diskUsed}`)

  const created = Date.now()
  // The first collection after the create only notes the CPU time; the
  // next ones each keep a reading.
  await new Promise((resolve) => setTimeout(resolve, 16_000))
  const all = await within(30_000, 'getMetrics (all)', () => sbx.getMetrics())
  assert.ok(all.length >= 3, `${all.length} readings after 16 s: ${JSON.stringify(all)}`)
  for (let i = 1; i < all.length; i++) {
    assert.ok(all[i].timestamp > all[i - 1].timestamp, `readings out of order: ${JSON.stringify(all)}`)
  }
  const past = await within(30_000, 'getMetrics (past range)', () =>
    sbx.getMetrics({ start: new Date(created - 3_600_000), end: new Date(created - 1_800_000) }))
  assert.deepEqual(past, [], 'no readings from before the sandbox existed')
  const recent = await within(30_000, 'getMetrics (recent)', () => sbx.getMetrics({ start: new Date(created) }))
  assert.ok(recent.length >= 1 && recent.length <= all.length, `${recent.length} recent of ${all.length}`)
  assert.ok(recent.every((r) => r.timestamp.getTime() >= Math.floor(created / 1000) * 1000), JSON.stringify(recent))
  await killQuietly(sbx.sandboxId)
})
