// Teams: API keys belong to a team (`moat apikey create --team`), and a
// team's sandboxes are invisible to every other team's keys: list does not
// show them, getInfo / connect / setTimeout answer not found, kill answers
// false, exactly as for an unknown ID. The owning team keeps full use.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'

import { Sandbox, SandboxNotFoundError, NotFoundError } from 'e2b'

import { useServer, within, template, run } from './harness.mjs'

const ctx = useServer()

// keys makes one key per team on the server's data dir.
async function keys(...teams) {
  await ctx.ready
  return Promise.all(teams.map((team) => ctx.server.createTeamApiKey(team)))
}

async function killAs(id, apiKey) {
  try {
    return await within(30_000, `kill ${id}`, () => Sandbox.kill(id, { apiKey }))
  } catch {
    return false
  }
}

async function listIds(apiKey, metadata) {
  const ids = []
  const pager = Sandbox.list({ apiKey, ...(metadata ? { query: { metadata } } : {}), limit: 100 })
  while (pager.hasNext) {
    const items = await within(30_000, 'list', () => pager.nextItems())
    ids.push(...items.map((s) => s.sandboxId))
  }
  return ids
}

test('a team cannot see or touch another team\'s sandbox', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  if (ctx.external) {
    t.skip('needs the server\'s data dir to create team keys (not with MOAT_E2E_API_URL)')
    return
  }
  const [keyA, keyB] = await keys('e2e-a', 'e2e-b')
  assert.notEqual(keyA, keyB)
  const tag = randomUUID()
  const metadata = { suite: 'teams', tag }

  const sbx = await within(120_000, 'Sandbox.create as a', () =>
    Sandbox.create(template, { apiKey: keyA, metadata, timeoutMs: 600_000 }),
  )
  t.after(() => killAs(sbx.sandboxId, keyA))
  const id = sbx.sandboxId

  // Team b: list does not show it, with or without the metadata filter.
  assert.deepEqual(await listIds(keyB, { tag }), [], 'b lists a\'s sandbox by metadata')
  assert.ok(!(await listIds(keyB)).includes(id), 'b lists a\'s sandbox')

  // getInfo / connect: not found, like an unknown ID.
  await assert.rejects(within(30_000, 'getInfo as b', () => Sandbox.getInfo(id, { apiKey: keyB })), SandboxNotFoundError)
  await assert.rejects(within(30_000, 'connect as b', () => Sandbox.connect(id, { apiKey: keyB })), SandboxNotFoundError)
  await assert.rejects(
    within(30_000, 'setTimeout as b', () => Sandbox.setTimeout(id, 60_000, { apiKey: keyB })),
    (err) => err instanceof NotFoundError || /not found/i.test(String(err?.message)),
  )
  assert.equal(await within(30_000, 'kill as b', () => Sandbox.kill(id, { apiKey: keyB })), false)
  // The same answers as for an ID nobody has.
  const unknown = 'i' + '0'.repeat(19)
  await assert.rejects(within(30_000, 'getInfo unknown', () => Sandbox.getInfo(unknown, { apiKey: keyB })), SandboxNotFoundError)
  assert.equal(await within(30_000, 'kill unknown', () => Sandbox.kill(unknown, { apiKey: keyB })), false)

  // The default team's key (the suite's E2B_API_KEY) does not see it either.
  await assert.rejects(within(30_000, 'getInfo as default', () => Sandbox.getInfo(id)), SandboxNotFoundError)

  // Team a still sees and uses it: b's attempts changed nothing.
  const info = await within(30_000, 'getInfo as a', () => Sandbox.getInfo(id, { apiKey: keyA }))
  assert.equal(info.sandboxId, id)
  assert.equal(info.state, 'running')
  assert.equal(info.metadata.tag, tag)
  assert.deepEqual(await listIds(keyA, { tag }), [id])
  const again = await within(60_000, 'connect as a', () => Sandbox.connect(id, { apiKey: keyA }))
  const r = await run(again, 'echo team-a')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout.trim(), 'team-a')
  await within(30_000, 'setTimeout as a', () => Sandbox.setTimeout(id, 120_000, { apiKey: keyA }))

  // And b's own sandbox is b's alone.
  const sbxB = await within(120_000, 'Sandbox.create as b', () =>
    Sandbox.create(template, { apiKey: keyB, metadata, timeoutMs: 600_000 }),
  )
  t.after(() => killAs(sbxB.sandboxId, keyB))
  assert.deepEqual(await listIds(keyB, { tag }), [sbxB.sandboxId])
  assert.deepEqual(await listIds(keyA, { tag }), [id])
  await assert.rejects(
    within(30_000, 'getInfo b as a', () => Sandbox.getInfo(sbxB.sandboxId, { apiKey: keyA })),
    SandboxNotFoundError,
  )

  assert.equal(await within(30_000, 'kill as a', () => Sandbox.kill(id, { apiKey: keyA })), true)
  assert.equal(await within(30_000, 'kill b as b', () => Sandbox.kill(sbxB.sandboxId, { apiKey: keyB })), true)
})

test('apikey create refuses a bad team name', { timeout: 60_000 }, async (t) => {
  await ctx.ready
  if (ctx.external) {
    t.skip('needs the server\'s data dir')
    return
  }
  await assert.rejects(ctx.server.createTeamApiKey('Not A Team'), /invalid team name/)
})
