// Snapshots and fork through the official SDK: sandbox.createSnapshot(),
// Sandbox.create(snapshotId) x5 concurrently (each fork has the source's
// files, memory and running processes, and its own writable state),
// Sandbox.listSnapshots(), Sandbox.deleteSnapshot(); and sandbox.fork()
// (checkpoint in place + N copies in one call).
//
// Snapshots need the vm runtime (a memory image on disk). On any other
// runtime the fork tests skip themselves, and one test checks instead that
// createSnapshot fails cleanly and leaves the source running.
//
// Environment (besides the harness's):
//   MOAT_E2E_RUNTIME               must be "vm" for the fork tests
//   MOAT_E2E_INTERPRETER_TEMPLATE  code-interpreter template (default: the
//                                  SDK's default, code-interpreter-v1)
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'

import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

import { useServer, createSandbox, killQuietly, within, run, assertNoLeaks } from './harness.mjs'
import {
  timed, waitFor, counterState, startCounter, assertCounterAdvances, hasProcess, runCode,
} from './sandboxstate.mjs'

const srv = useServer()
const runtime = process.env.MOAT_E2E_RUNTIME
const isVM = runtime === 'vm'
const vmOnly = !isVM &&
  `snapshots and fork need the vm runtime; MOAT_E2E_RUNTIME=${runtime || '(unset)'} (the container runtime has no memory snapshots)`
const interpreterTemplate = process.env.MOAT_E2E_INTERPRETER_TEMPLATE

const SNAPSHOT_MS = 240_000
const FORK_CREATE_MS = 400_000

// ---------- helpers ----------

async function listAllSnapshots(opts) {
  const pager = Sandbox.listSnapshots(opts)
  const out = []
  let pages = 0
  while (pager.hasNext) {
    out.push(...await within(30_000, `listSnapshots page ${pages}`, () => pager.nextItems()))
    if (++pages > 50) throw new Error('listSnapshots pagination does not terminate')
  }
  return out
}

// createFrom creates a sandbox from a snapshot (or template) ID and kills it
// when the test ends.
async function createFrom(t, Klass, id, opts = {}) {
  await srv.ready
  const sbx = await within(FORK_CREATE_MS, `create from ${id}`, () => Klass.create(id, { timeoutMs: 600_000, ...opts }))
  t.after(() => killQuietly(sbx.sandboxId))
  return sbx
}

// ---------- tests ----------

test('createSnapshot, 5 concurrent forks with files, memory and processes, listSnapshots, deleteSnapshot', { timeout: 900_000, skip: vmOnly }, async (t) => {
  const tag = randomUUID()
  const src = await createSandbox(t, { metadata: { suite: 'fork', tag, role: 'source' } })
  const marker = `fork-${randomUUID()}`
  await within(30_000, 'files.write', () => src.files.write('/tmp/fork-marker', marker))
  const pid = await startCounter(src)
  const before = await counterState(src)

  const snap = await timed(t, 'createSnapshot', () => within(SNAPSHOT_MS, 'createSnapshot', () => src.createSnapshot()))
  t.diagnostic(`createSnapshot -> ${JSON.stringify(snap)}`)
  // Snapshots outlive sandboxes: delete it even when the test fails early.
  t.after(() => within(60_000, 'deleteSnapshot (cleanup)', () => Sandbox.deleteSnapshot(snap.snapshotId)).catch(() => {}))
  assert.equal(typeof snap.snapshotId, 'string')
  assert.ok(snap.snapshotId.length > 0, 'snapshotId is set')
  assert.ok(Array.isArray(snap.names), 'names is an array')

  // The source keeps running, with its process and memory.
  const srcInfo = await within(30_000, 'getInfo source', () => src.getInfo())
  assert.equal(srcInfo.state, 'running', 'source is running after createSnapshot')
  assert.ok(await hasProcess(src, pid), 'source still has its counter')
  await assertCounterAdvances(src, before.last, 'source after snapshot')
  // Written after the snapshot: must not show up in forks.
  await within(30_000, 'files.write after', () => src.files.write('/tmp/after-snapshot', 'x'))

  // listSnapshots: global and per source sandbox.
  const all = await listAllSnapshots()
  assert.ok(all.some((s) => s.snapshotId === snap.snapshotId), `Sandbox.listSnapshots() shows ${snap.snapshotId}: ${JSON.stringify(all)}`)
  const mine = []
  const pager = src.listSnapshots()
  while (pager.hasNext) mine.push(...await within(30_000, 'sbx.listSnapshots', () => pager.nextItems()))
  assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId], 'sbx.listSnapshots() shows exactly this snapshot')

  // Five forks at once.
  const N = 5
  const t0 = Date.now()
  const settled = await Promise.allSettled(Array.from({ length: N }, (_, i) =>
    createFrom(t, Sandbox, snap.snapshotId, { metadata: { suite: 'fork', tag, role: 'fork', i: String(i) } })))
  t.diagnostic(`[vm] ${N} forks created concurrently in ${Date.now() - t0} ms`)
  const failed = settled.filter((r) => r.status === 'rejected').map((r) => String(r.reason?.message || r.reason))
  assert.deepEqual(failed, [], 'every create from the snapshot succeeds')
  const forks = settled.map((r) => r.value)
  const forkIds = forks.map((f) => f.sandboxId)
  assert.equal(new Set([src.sandboxId, ...forkIds]).size, N + 1, 'forks have their own IDs')

  const listed = await within(30_000, 'list', () => Sandbox.list({ query: { metadata: { tag, role: 'fork' } } }).nextItems())
  assert.deepEqual(listed.map((s) => s.sandboxId).sort(), [...forkIds].sort(), 'forks are listed')
  for (const s of listed) assert.equal(s.state, 'running')

  await Promise.all(forks.map(async (f, i) => {
    const what = `fork ${i} (${f.sandboxId})`
    assert.equal(await within(30_000, 'files.read', () => f.files.read('/tmp/fork-marker')), marker, `${what}: file from before the snapshot`)
    const after = await run(f, 'test -e /tmp/after-snapshot && echo yes || echo no')
    assert.equal(after.stdout, 'no\n', `${what}: a file written to the source after the snapshot is not there`)
    assert.ok(await hasProcess(f, pid), `${what}: counter process (pid ${pid}) exists`)
    // The counter continues from its value at snapshot time (memory state).
    const c = await assertCounterAdvances(f, before.last, what)
    t.diagnostic(`${what}: counter at ${c.last} (source was at ${before.last} before the snapshot)`)
  }))

  // Each fork has its own writable state.
  await Promise.all(forks.map((f) => within(30_000, 'write own', () => f.files.write('/tmp/own', `own-${f.sandboxId}`))))
  await Promise.all(forks.map((f) => run(f, 'echo mem-$((6*7)) > /tmp/own2')))
  for (const f of forks) {
    assert.equal(await within(30_000, 'read own', () => f.files.read('/tmp/own')), `own-${f.sandboxId}`, `${f.sandboxId} sees only its own write`)
  }
  assert.equal((await run(src, 'test -e /tmp/own && echo yes || echo no')).stdout, 'no\n', 'source does not see forks\' writes')
  // Killing a fork's counter does not touch the others.
  await within(30_000, 'kill counter in fork 0', () => forks[0].commands.kill(pid))
  await waitFor('fork 0 counter killed', async () => ({ ok: !(await hasProcess(forks[0], pid)) }), { intervalMs: 50 })
  assert.ok(await hasProcess(forks[1], pid), 'fork 1 counter unaffected')
  assert.ok(await hasProcess(src, pid), 'source counter unaffected')

  // The snapshot outlives its source.
  assert.equal(await within(60_000, 'kill source', () => src.kill()), true)
  const late = await timed(t, 'create from snapshot after the source was killed', () =>
    createFrom(t, Sandbox, snap.snapshotId, { metadata: { suite: 'fork', tag, role: 'late' } }))
  assert.equal(await within(30_000, 'files.read late', () => late.files.read('/tmp/fork-marker')), marker)
  assert.ok(await hasProcess(late, pid), 'late fork has the counter process')

  // Delete the snapshot: gone from the list, create fails, forks keep running.
  assert.equal(await within(60_000, 'deleteSnapshot', () => Sandbox.deleteSnapshot(snap.snapshotId)), true, 'deleteSnapshot returns true')
  assert.equal(await within(60_000, 'deleteSnapshot again', () => Sandbox.deleteSnapshot(snap.snapshotId)), false, 'second deleteSnapshot returns false')
  const afterDelete = await listAllSnapshots()
  assert.ok(!afterDelete.some((s) => s.snapshotId === snap.snapshotId), 'deleted snapshot is not listed')
  const createErr = await within(120_000, 'create from deleted snapshot', () => Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })).then(
    (s) => { killQuietly(s.sandboxId); return null }, (e) => e)
  assert.ok(createErr, 'create from a deleted snapshot fails')
  assert.doesNotMatch(String(createErr.message), /^timed out after/, 'fails promptly')
  t.diagnostic(`create from deleted snapshot -> ${createErr.name}: ${createErr.message}`)
  for (const f of [...forks, late]) {
    assert.equal((await run(f, 'echo still')).stdout, 'still\n', `${f.sandboxId} keeps running after the snapshot is deleted`)
  }

  const ids = [src.sandboxId, ...forkIds, late.sandboxId]
  await Promise.all(ids.map((id) => killQuietly(id)))
  await assertNoLeaks(ids, { waitMs: 60_000 })
})

test('forks of a code-interpreter sandbox keep a Python variable and diverge', { timeout: 900_000, skip: vmOnly }, async (t) => {
  await srv.ready
  const o = { timeoutMs: 600_000 }
  const src = await timed(t, 'create code-interpreter sandbox', () => within(240_000, 'CodeSandbox.create', () =>
    interpreterTemplate ? CodeSandbox.create(interpreterTemplate, o) : CodeSandbox.create(o)))
  t.after(() => killQuietly(src.sandboxId))
  const secret = randomUUID()
  const ex = await runCode(src, `x = 41\nsecret = ${JSON.stringify(secret)}`)
  assert.equal(ex.error, undefined, JSON.stringify(ex.error))

  const snap = await timed(t, 'createSnapshot (code interpreter)', () =>
    within(SNAPSHOT_MS, 'createSnapshot', () => src.createSnapshot()))
  t.after(() => within(60_000, 'deleteSnapshot', () => Sandbox.deleteSnapshot(snap.snapshotId)).catch(() => {}))

  const forks = await timed(t, 'create 2 code-interpreter forks', () =>
    Promise.all([0, 1].map(() => createFrom(t, CodeSandbox, snap.snapshotId))))
  for (const [i, f] of forks.entries()) {
    const r = await runCode(f, 'x + 1, secret')
    assert.equal(r.error, undefined, JSON.stringify(r.error))
    assert.equal(r.text, `(42, '${secret}')`, `fork ${i} has the Python state`)
  }
  await runCode(forks[0], 'x = 100')
  assert.equal((await runCode(forks[0], 'x')).text, '100')
  assert.equal((await runCode(forks[1], 'x')).text, '41', 'fork 1 does not see fork 0\'s assignment')
  assert.equal((await runCode(src, 'x')).text, '41', 'source does not see fork 0\'s assignment')
})

test('sandbox.fork({count: 3}): the source keeps its ID and timeout, each fork has its files, processes and memory', { timeout: 900_000, skip: vmOnly }, async (t) => {
  const tag = randomUUID()
  const src = await createSandbox(t, { metadata: { suite: 'fork-call', tag } })
  const marker = `forkcall-${randomUUID()}`
  await within(30_000, 'files.write', () => src.files.write('/tmp/fork-marker', marker))
  const pid = await startCounter(src)
  const before = await counterState(src)
  const infoBefore = await within(30_000, 'getInfo', () => src.getInfo())

  const results = await timed(t, 'sandbox.fork({count: 3})', () =>
    within(FORK_CREATE_MS, 'sandbox.fork', () => src.fork({ count: 3, timeoutMs: 300_000 })))
  const errors = results.filter((r) => r instanceof Error).map((e) => `${e.name}: ${e.message}`)
  const forks = results.filter((r) => !(r instanceof Error))
  for (const f of forks) t.after(() => killQuietly(f.sandboxId))
  assert.equal(results.length, 3, 'one entry per requested fork')
  assert.deepEqual(errors, [], 'every fork starts')
  assert.ok(forks.every((f) => f instanceof Sandbox), 'forks are Sandbox instances')
  const ids = forks.map((f) => f.sandboxId)
  assert.equal(new Set([src.sandboxId, ...ids]).size, 4, 'forks have their own IDs')

  // The source was checkpointed in place: same ID, running, same end time.
  const infoAfter = await within(30_000, 'getInfo source', () => src.getInfo())
  assert.equal(infoAfter.state, 'running')
  assert.equal(infoAfter.endAt.getTime(), infoBefore.endAt.getTime(), 'fork leaves the source\'s expiration untouched')
  assert.ok(await hasProcess(src, pid), 'source keeps its counter')
  await assertCounterAdvances(src, before.last, 'source after fork')

  for (const [i, f] of forks.entries()) {
    const what = `fork ${i} (${f.sandboxId})`
    assert.equal(await within(30_000, 'files.read', () => f.files.read('/tmp/fork-marker')), marker, `${what}: file`)
    assert.ok(await hasProcess(f, pid), `${what}: counter process exists`)
    await assertCounterAdvances(f, before.last, what)
    const fi = await within(30_000, 'getInfo fork', () => f.getInfo())
    assert.equal(fi.state, 'running')
    const left = fi.endAt.getTime() - Date.now()
    assert.ok(left > 200_000 && left <= 300_000 + 5000, `${what}: fork timeout 300 s, endAt ${left} ms away`)
  }
  await Promise.all(forks.map((f) => within(30_000, 'write own', () => f.files.write('/tmp/own', f.sandboxId))))
  for (const f of forks) assert.equal(await within(30_000, 'read own', () => f.files.read('/tmp/own')), f.sandboxId)
  assert.equal((await run(src, 'test -e /tmp/own && echo yes || echo no')).stdout, 'no\n')

  const all = [src.sandboxId, ...ids]
  await Promise.all(all.map((id) => killQuietly(id)))
  await assertNoLeaks(all, { waitMs: 60_000 })
})

test('createSnapshot on a runtime without snapshots fails cleanly and leaves the source running', { timeout: 300_000, skip: isVM && 'vm runtime supports snapshots (see the fork tests)' }, async (t) => {
  const src = await createSandbox(t, { metadata: { suite: 'fork-unsupported' } })
  await within(30_000, 'files.write', () => src.files.write('/tmp/keep', 'keep'))
  const res = await within(120_000, 'createSnapshot', () => src.createSnapshot()).then((s) => ({ s }), (e) => ({ e }))
  if (res.s) {
    t.diagnostic(`runtime ${runtime || '(default)'} supports createSnapshot (${JSON.stringify(res.s)}); the fork tests could run here`)
    await within(60_000, 'deleteSnapshot', () => Sandbox.deleteSnapshot(res.s.snapshotId)).catch(() => {})
  } else {
    t.diagnostic(`createSnapshot -> ${res.e.name}: ${res.e.message}`)
    assert.doesNotMatch(String(res.e.message), /^timed out after/, 'fails promptly')
    const code = res.e.statusCode
    assert.ok(code === 501 || (code >= 400 && code < 500),
      `an unsupported snapshot is a 4xx or 501, not a server failure: status ${code}, ${res.e.message}`)
  }
  const info = await within(30_000, 'getInfo', () => src.getInfo())
  assert.equal(info.state, 'running', 'source still running')
  assert.equal((await run(src, 'cat /tmp/keep')).stdout, 'keep')

  // fork() likewise: an error (thrown, or one Error per requested fork), no hang.
  const fr = await within(120_000, 'sandbox.fork', () => src.fork({ count: 2 })).then((r) => ({ r }), (e) => ({ e }))
  if (fr.e) {
    t.diagnostic(`fork -> ${fr.e.name}: ${fr.e.message}`)
    const code = fr.e.statusCode
    assert.ok(code === 501 || (code >= 400 && code < 500), `fork: status ${code}, ${fr.e.message}`)
  } else {
    t.diagnostic(`fork -> ${fr.r.map((x) => (x instanceof Error ? `${x.name}: ${x.message}` : x.sandboxId)).join(' | ')}`)
    for (const x of fr.r) if (!(x instanceof Error)) await killQuietly(x.sandboxId)
  }
  assert.equal((await within(30_000, 'getInfo', () => src.getInfo())).state, 'running', 'source still running after fork')
  assert.equal((await run(src, 'cat /tmp/keep')).stdout, 'keep')
})
