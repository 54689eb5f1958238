// Many sandboxes at once, and a clean host after they are killed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'

import { Sandbox } from 'e2b'

import { useServer, createSandbox, killQuietly, within, run, assertNoLeaks, leftovers } from './harness.mjs'

useServer()

// 20 at once; 10 on microVMs in the default tier (TCG: each create costs a
// core for seconds), 20 there in the full tier.
const vmDefaultTier = process.env.MOAT_E2E_RUNTIME === 'vm' && process.env.MOAT_TEST_FULL !== '1'
const N = Number(process.env.MOAT_E2E_CONCURRENCY || (vmDefaultTier ? 10 : 20))

test(`${N} sandboxes created concurrently all answer; nothing leaks after kill`, { timeout: 600_000 }, async (t) => {
  const tag = randomUUID()
  const t0 = Date.now()
  // requestTimeoutMs: the SDK's own 60 s would cut the last creates of the
  // burst short first (a slow CI host's twentieth microVM create, queued
  // behind admission, took longer); these sandboxes' later calls inherit it
  // and are bounded by the test's own timeouts.
  const results = await Promise.allSettled(
    Array.from({ length: N }, (_, i) => createSandbox(t, { metadata: { suite: 'concurrency', tag, i: String(i) }, requestTimeoutMs: 400_000 }, { withinMs: 400_000 })),
  )
  const created = results.filter((r) => r.status === 'fulfilled').map((r) => r.value)
  const failed = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason?.message || r.reason))
  t.diagnostic(`created ${created.length}/${N} in ${Date.now() - t0} ms`)
  const ids = created.map((s) => s.sandboxId)
  try {
    assert.deepEqual(failed, [], `${failed.length} creates failed`)
    assert.equal(new Set(ids).size, N, 'IDs are unique')

    const answers = await Promise.allSettled(created.map((s, i) => run(s, `echo sandbox-${i}; hostname`, {}, 120_000)))
    const bad = []
    answers.forEach((a, i) => {
      if (a.status === 'rejected') bad.push(`${ids[i]}: ${a.reason?.message || a.reason}`)
      else if (!a.value.stdout.startsWith(`sandbox-${i}\n`)) bad.push(`${ids[i]}: ${JSON.stringify(a.value)}`)
    })
    assert.deepEqual(bad, [], 'every sandbox answers its own command')

    const listed = await within(60_000, 'list', () => Sandbox.list({ query: { metadata: { tag } } }).nextItems())
    assert.deepEqual(listed.map((s) => s.sandboxId).sort(), [...ids].sort())
  } finally {
    const kills = await Promise.all(ids.map((id) => killQuietly(id)))
    t.diagnostic(`killed ${kills.filter(Boolean).length}/${ids.length}`)
  }
  for (const s of created) {
    assert.equal(await within(30_000, 'isRunning after kill', () => s.isRunning()), false, `${s.sandboxId} still running`)
  }
  await assertNoLeaks(ids, { waitMs: 30_000 })
})

test('leak check finds nothing for an unknown ID (sanity of the helper)', { timeout: 60_000 }, async () => {
  assert.deepEqual(await leftovers(['zzzznotasandbox000000']), [])
})
