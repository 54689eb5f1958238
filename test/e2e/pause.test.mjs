// Pause and resume through the official SDK: pause() / connect() keep files,
// memory (a Python variable, a running background process), env vars and the
// envd access token; repeated and concurrent pause/resume; list() state
// filters; surviving SIGKILL + restart of `moat serve` while paused;
// lifecycle.onTimeout 'pause' (autoPause); auto-resume on sandbox traffic;
// kill of a paused sandbox; the filesystem-only pause (keepMemory: false,
// explicit and at the timeout) on every runtime.
//
// Runs on both runtimes: "vm" pauses to disk (memory snapshot), "container"
// freezes the cgroup (memory stays resident). Everything here is observable
// the same way through the SDK.
//
// Environment (besides the harness's):
//   MOAT_E2E_INTERPRETER_TEMPLATE  code-interpreter template (default: the
//                                  SDK's default, code-interpreter-v1)
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'

import { Sandbox, SandboxNotFoundError } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

import {
  useServer, createSandbox, killQuietly, within, run, sleep, exportSdkEnv, assertNoLeaks,
} from './harness.mjs'
import {
  timed, waitFor, counterState, startCounter, assertCounterAdvances, hasProcess, runCode,
} from './sandboxstate.mjs'

const srv = useServer()
const external = Boolean(process.env.MOAT_E2E_API_URL)
const runtime = process.env.MOAT_E2E_RUNTIME || '(server default)'
const interpreterTemplate = process.env.MOAT_E2E_INTERPRETER_TEMPLATE

// Pause and resume write/read a memory image on the vm runtime (TCG here):
// be generous.
const PAUSE_MS = 180_000
const CONNECT_MS = 180_000

// On the vm runtime with a local server, also look at the host. A paused
// microVM is on disk: its saved device state (vm/sandboxes/<id>/state)
// exists while it is paused and goes with the resume. Its QEMU process
// (-name moat-<id>) is gone, or, for a few recent pauses (--vm-keep-paused,
// default 4), kept stopped so that the resume only continues it: "kept" is
// allowed only where the test says so. After a server restart no paused
// microVM has a QEMU.
const hostChecks = process.env.MOAT_E2E_RUNTIME === 'vm' && !external

function qemuRunning(id) {
  const out = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8', maxBuffer: 16 << 20 })
  return out.split('\n').some((l) => /qemu-system/.test(l) && l.includes(`moat-${id}`))
}

function savedState(id) {
  return existsSync(`${srv.dataDir}/vm/sandboxes/${id}/state`)
}

function assertQemu(id, want, what, { kept = false } = {}) {
  if (!hostChecks) return
  if (want) {
    assert.equal(qemuRunning(id), true, `${what}: QEMU for ${id} should be running`)
    assert.equal(savedState(id), false, `${what}: ${id} runs but its saved state is still there`)
    return
  }
  assert.equal(savedState(id), true, `${what}: paused ${id} has no saved state on disk`)
  if (!kept) {
    assert.equal(qemuRunning(id), false,
      `${what}: QEMU for ${id} is still running while paused (vm pause should put the guest on disk and release its memory)`)
  }
}

// ---------- helpers ----------

async function pause(sbx) {
  return within(PAUSE_MS, `pause ${sbx.sandboxId}`, () => sbx.pause())
}

async function stateOf(id) {
  return (await within(30_000, `getInfo ${id}`, () => Sandbox.getInfo(id))).state
}

// listAll pages through Sandbox.list and returns every item.
async function listAll(query, { limit } = {}) {
  const pager = Sandbox.list({ query, limit })
  const out = []
  let pages = 0
  while (pager.hasNext) {
    out.push(...await within(30_000, `list page ${pages} ${JSON.stringify(query)}`, () => pager.nextItems()))
    if (++pages > 50) throw new Error('list pagination does not terminate')
  }
  return out
}

// listStates returns what list() says about the sandboxes tagged `tag`:
// id -> state for the unfiltered list, and the sorted IDs under each state
// filter, with the given page size.
async function listStates(tag, { limit } = {}) {
  const all = await listAll({ metadata: { tag } }, { limit })
  const both = await listAll({ metadata: { tag }, state: ['running', 'paused'] }, { limit })
  const paused = await listAll({ metadata: { tag }, state: ['paused'] }, { limit })
  const running = await listAll({ metadata: { tag }, state: ['running'] }, { limit })
  for (const s of paused) assert.equal(s.state, 'paused', `state=paused filter returned ${s.sandboxId} as ${s.state}`)
  for (const s of running) assert.equal(s.state, 'running', `state=running filter returned ${s.sandboxId} as ${s.state}`)
  const ids = (l) => l.map((s) => s.sandboxId).sort()
  assert.equal(new Set(ids(all)).size, all.length, 'list returns each sandbox once')
  assert.deepEqual(ids(both), ids(all), 'state=running,paused lists the same sandboxes as no state filter')
  return {
    states: Object.fromEntries(all.map((s) => [s.sandboxId, s.state])),
    paused: ids(paused),
    running: ids(running),
  }
}

async function createInterpreter(t, opts = {}) {
  await srv.ready
  const o = { timeoutMs: 600_000, ...opts }
  const sbx = await within(240_000, 'Sandbox.create (code interpreter)', () =>
    interpreterTemplate ? CodeSandbox.create(interpreterTemplate, o) : CodeSandbox.create(o),
  )
  t.after(() => killQuietly(sbx.sandboxId))
  return sbx
}

// envdList calls envd's Process/List through the server with the given
// access token, bypassing the SDK, and returns the HTTP status.
async function envdList(id, token) {
  const headers = {
    'E2b-Sandbox-Id': id,
    'E2b-Sandbox-Port': '49983',
    'Content-Type': 'application/json',
    'Connect-Protocol-Version': '1',
  }
  if (token !== undefined) headers['X-Access-Token'] = token
  const res = await within(30_000, 'raw Process/List', () =>
    fetch(`${srv.url}/process.Process/List`, { method: 'POST', headers, body: '{}', signal: AbortSignal.timeout(25_000) }))
  await res.arrayBuffer().catch(() => {})
  return res.status
}

// ---------- tests ----------

test('pause then connect keeps files, a Python variable, a background process, env vars and the access token', { timeout: 600_000 }, async (t) => {
  const foo = `foo-${randomUUID()}`
  const sbx = await timed(t, 'create code-interpreter sandbox', () => createInterpreter(t, { envs: { FOO: foo } }))
  const id = sbx.sandboxId
  const marker = `marker-${randomUUID()}`
  await within(30_000, 'files.write', () => sbx.files.write('/tmp/pause-marker', marker))
  const py = await runCode(sbx, 'x = 41\nimport os\nkernel_pid = os.getpid()\nkernel_pid')
  assert.equal(py.error, undefined, JSON.stringify(py.error))
  const kernelPid = py.text
  const pid = await startCounter(sbx)
  assert.ok(await hasProcess(sbx, pid), 'counter is listed before pause')
  const token = sbx.envdAccessToken
  t.diagnostic(`envdAccessToken from create: ${token ? 'set' : 'not set'}`)

  const before = await counterState(sbx)
  assertQemu(id, true, 'before pause')
  assert.equal(await timed(t, 'pause', () => pause(sbx)), true, 'first pause returns true')
  assert.equal(await within(PAUSE_MS, 'second pause', () => Sandbox.pause(id)), false, 'pausing a paused sandbox returns false (409)')
  assert.equal(await stateOf(id), 'paused', 'getInfo().state while paused')
  const info = await within(30_000, 'getInfo (instance)', () => sbx.getInfo())
  assert.equal(info.state, 'paused')
  assert.equal(await within(30_000, 'isRunning while paused', () => sbx.isRunning()), false, 'isRunning() is false while paused (envd answers 502)')
  const pausedIds = (await listAll({ state: ['paused'] })).map((s) => s.sandboxId)
  assert.ok(pausedIds.includes(id), 'list(state=paused) shows it')
  const runningIds = (await listAll({ state: ['running'] })).map((s) => s.sandboxId)
  assert.ok(!runningIds.includes(id), 'list(state=running) does not show it')
  await sleep(1500)
  assert.equal(await stateOf(id), 'paused', 'still paused after a while (no spontaneous resume)')
  assertQemu(id, false, 'while paused', { kept: true })

  const again = await timed(t, 'Sandbox.connect (resume)', () => within(CONNECT_MS, 'Sandbox.connect', () => CodeSandbox.connect(id)))
  assert.equal(again.sandboxId, id)
  assert.equal(await stateOf(id), 'running', 'getInfo().state after connect')
  assertQemu(id, true, 'after connect')
  if (token) assert.equal(again.envdAccessToken, token, 'connect returns the same envdAccessToken (the instance connect() keeps the old one)')

  // Through the new handle.
  assert.equal(await within(30_000, 'files.read', () => again.files.read('/tmp/pause-marker')), marker, 'file written before pause')
  const py2 = await runCode(again, 'x + 1')
  assert.equal(py2.error, undefined, JSON.stringify(py2.error))
  assert.equal(py2.text, '42', 'Python variable survives')
  const py3 = await runCode(again, 'os.getpid()')
  assert.equal(py3.text, kernelPid, 'same Python kernel process after resume')
  assert.equal((await run(again, 'echo $FOO')).stdout, `${foo}\n`, 'create-time env var')
  assert.ok(await hasProcess(again, pid), `background counter (pid ${pid}) still listed by commands.list() after resume`)
  const c = await assertCounterAdvances(again, before.last, 'after resume')
  t.diagnostic(`counter ${before.last} before pause -> ${c.last} after resume`)

  // Through the old handle: its envd token still works.
  assert.equal((await run(sbx, 'echo old-handle')).stdout, 'old-handle\n', 'old handle (old access token) still works')
  assert.equal(await within(30_000, 'files.read old handle', () => sbx.files.read('/tmp/pause-marker')), marker)
  const py4 = await runCode(sbx, 'x')
  assert.equal(py4.text, '41')
  if (token) {
    assert.equal(await envdList(id, token), 200, 'raw envd call with the original token after resume')
    assert.equal(await envdList(id, 'wrong-token'), 401, 'envd still enforces the token after resume')
    assert.equal(await envdList(id), 401, 'envd still needs a token after resume')
  }
  assert.equal(await within(30_000, 'isRunning after resume', () => sbx.isRunning()), true)
})

test('pause -> connect five times on the same sandbox', { timeout: 900_000 }, async (t) => {
  const sbx = await createSandbox(t, { metadata: { suite: 'pause-repeat' } })
  const id = sbx.sandboxId
  const pid = await startCounter(sbx)
  let last = (await counterState(sbx)).last
  for (let round = 1; round <= 5; round++) {
    await within(30_000, 'files.write', () => sbx.files.write(`/tmp/round-${round}`, `r${round}`))
    assert.equal(await timed(t, `round ${round}: pause`, () => pause(sbx)), true, `round ${round}: pause returns true`)
    assert.equal(await stateOf(id), 'paused', `round ${round}: paused`)
    // Alternate the instance method and the static one.
    if (round % 2) {
      const same = await timed(t, `round ${round}: sbx.connect()`, () => within(CONNECT_MS, 'sbx.connect', () => sbx.connect()))
      assert.equal(same, sbx, 'instance connect() returns the same object')
    } else {
      await timed(t, `round ${round}: Sandbox.connect(id)`, () => within(CONNECT_MS, 'Sandbox.connect', () => Sandbox.connect(id)))
    }
    assert.equal(await stateOf(id), 'running', `round ${round}: running after connect`)
    const r = await run(sbx, `echo round-${round}; cat /tmp/round-${round}`)
    assert.equal(r.stdout, `round-${round}\nr${round}`, `round ${round}: command and file`)
    const c = await assertCounterAdvances(sbx, last, `round ${round}`)
    last = c.last
  }
  assert.ok(await hasProcess(sbx, pid), 'counter process still listed after 5 rounds')
  t.diagnostic(`counter at ${last} after 5 rounds`)
})

test('10 sandboxes paused concurrently and resumed concurrently; list() states follow', { timeout: 900_000 }, async (t) => {
  const N = 10
  const tag = randomUUID()
  const t0 = Date.now()
  const created = await Promise.allSettled(
    Array.from({ length: N }, (_, i) => createSandbox(t, { metadata: { suite: 'pause-many', tag, i: String(i) } }, { withinMs: 400_000 })),
  )
  const failedCreates = created.filter((r) => r.status === 'rejected').map((r) => String(r.reason?.message || r.reason))
  assert.deepEqual(failedCreates, [], 'all creates succeed')
  const sbxs = created.map((r) => r.value)
  const ids = sbxs.map((s) => s.sandboxId)
  const sorted = [...ids].sort()
  t.diagnostic(`[${runtime}] created ${N} in ${Date.now() - t0} ms`)
  await Promise.all(sbxs.map((s, i) => within(60_000, 'files.write', () => s.files.write('/tmp/who', `sbx-${i}`))))

  let l = await listStates(tag)
  assert.deepEqual(l.running, sorted, 'all running before pause')
  assert.deepEqual(l.paused, [], 'none paused before pause')

  const t1 = Date.now()
  const pauses = await Promise.allSettled(sbxs.map((s) => pause(s)))
  t.diagnostic(`[${runtime}] paused ${N} concurrently in ${Date.now() - t1} ms`)
  const badPauses = pauses.map((p, i) => (p.status === 'fulfilled' && p.value === true ? null : `${ids[i]}: ${p.status === 'fulfilled' ? p.value : p.reason?.message}`)).filter(Boolean)
  assert.deepEqual(badPauses, [], 'every pause returns true')

  l = await listStates(tag)
  assert.deepEqual(l.paused, sorted, 'all paused after pause')
  assert.deepEqual(l.running, [], 'none running after pause')
  for (const id of ids) assert.equal(l.states[id], 'paused')
  for (const id of ids) assertQemu(id, false, 'concurrent pause', { kept: true })

  const t2 = Date.now()
  const conns = await Promise.allSettled(ids.map((id) => within(CONNECT_MS * 2, `connect ${id}`, () => Sandbox.connect(id))))
  t.diagnostic(`[${runtime}] resumed ${N} concurrently in ${Date.now() - t2} ms`)
  const badConns = conns.map((c, i) => (c.status === 'fulfilled' ? null : `${ids[i]}: ${c.reason?.message}`)).filter(Boolean)
  assert.deepEqual(badConns, [], 'every connect succeeds')

  const answers = await Promise.allSettled(conns.map((c, i) => run(c.value, `cat /tmp/who; echo; echo alive-${i}`, {}, 120_000)))
  const bad = []
  answers.forEach((a, i) => {
    if (a.status === 'rejected') bad.push(`${ids[i]}: ${a.reason?.message || a.reason}`)
    else if (a.value.stdout !== `sbx-${i}\nalive-${i}\n`) bad.push(`${ids[i]}: ${JSON.stringify(a.value)}`)
  })
  assert.deepEqual(bad, [], 'every resumed sandbox answers with its own file')

  l = await listStates(tag)
  assert.deepEqual(l.running, sorted, 'all running after resume')
  assert.deepEqual(l.paused, [], 'none paused after resume')

  const kills = await Promise.all(ids.map((id) => killQuietly(id)))
  assert.deepEqual(kills, ids.map(() => true))
  await assertNoLeaks(ids, { waitMs: 60_000 })
})

test('list() with state filters and pagination over a mix of running and paused sandboxes', { timeout: 600_000 }, async (t) => {
  const tag = randomUUID()
  const sbxs = await Promise.all([0, 1, 2, 3].map((i) => createSandbox(t, { metadata: { suite: 'pause-list', tag, i: String(i) } })))
  const ids = sbxs.map((s) => s.sandboxId)
  const pick = (...idx) => idx.map((i) => ids[i]).sort()

  assert.equal(await pause(sbxs[0]), true)
  assert.equal(await pause(sbxs[2]), true)
  for (const limit of [undefined, 1, 3]) {
    const l = await listStates(tag, { limit })
    assert.deepEqual(l.paused, pick(0, 2), `limit=${limit}: paused`)
    assert.deepEqual(l.running, pick(1, 3), `limit=${limit}: running`)
    assert.deepEqual(l.states, { [ids[0]]: 'paused', [ids[1]]: 'running', [ids[2]]: 'paused', [ids[3]]: 'running' }, `limit=${limit}: states`)
  }
  // Metadata filter combined with the state filter.
  const one = await listAll({ metadata: { tag, i: '2' }, state: ['paused'] })
  assert.deepEqual(one.map((s) => s.sandboxId), [ids[2]])
  assert.deepEqual(await listAll({ metadata: { tag, i: '2' }, state: ['running'] }), [])

  // Resume one, pause another.
  await within(CONNECT_MS, 'connect 0', () => Sandbox.connect(ids[0]))
  assert.equal(await pause(sbxs[3]), true)
  let l = await listStates(tag, { limit: 1 })
  assert.deepEqual(l.paused, pick(2, 3), 'after resume 0 / pause 3: paused')
  assert.deepEqual(l.running, pick(0, 1), 'after resume 0 / pause 3: running')

  // Killing a paused one removes it from every view.
  assert.equal(await within(60_000, 'kill paused', () => Sandbox.kill(ids[2])), true)
  l = await listStates(tag, { limit: 2 })
  assert.deepEqual(l.paused, pick(3))
  assert.deepEqual(l.running, pick(0, 1))
  assert.equal(l.states[ids[2]], undefined)
})

test('kill of a paused sandbox: true, gone from list, connect gives SandboxNotFoundError', { timeout: 300_000 }, async (t) => {
  const tag = randomUUID()
  const sbx = await createSandbox(t, { metadata: { suite: 'pause-kill', tag } })
  const id = sbx.sandboxId
  await within(30_000, 'files.write', () => sbx.files.write('/tmp/x', 'x'))
  await startCounter(sbx)
  assert.equal(await pause(sbx), true)
  assert.equal(await stateOf(id), 'paused')
  assert.equal(await within(60_000, 'Sandbox.kill paused', () => Sandbox.kill(id)), true, 'kill of a paused sandbox returns true')
  assert.deepEqual(await listAll({ metadata: { tag } }), [], 'gone from list()')
  assert.deepEqual(await listAll({ metadata: { tag }, state: ['paused'] }), [], 'gone from list(state=paused)')
  await assert.rejects(within(30_000, 'getInfo killed', () => Sandbox.getInfo(id)), SandboxNotFoundError)
  await assert.rejects(within(30_000, 'connect killed', () => Sandbox.connect(id)), SandboxNotFoundError)
  await assert.rejects(within(30_000, 'instance connect killed', () => sbx.connect()), SandboxNotFoundError)
  assert.equal(await within(30_000, 'pause killed', () => Sandbox.pause(id)).catch((e) => e.constructor.name), 'SandboxNotFoundError', 'pause of a killed sandbox')
  assert.equal(await within(30_000, 'second kill', () => Sandbox.kill(id)), false)
  assert.equal(await within(30_000, 'isRunning killed', () => sbx.isRunning()), false)
  await assertNoLeaks([id], { waitMs: 30_000 })
})

test("lifecycle onTimeout 'pause' (autoPause): the sandbox is paused at its timeout, not killed, and connect brings it back", { timeout: 300_000 }, async (t) => {
  const tag = randomUUID()
  const t0 = Date.now()
  const sbx = await createSandbox(t, { timeoutMs: 3000, lifecycle: { onTimeout: 'pause' }, metadata: { suite: 'pause-auto', tag } })
  const id = sbx.sandboxId
  const created = Date.now()
  const marker = `auto-${randomUUID()}`
  await within(30_000, 'files.write', () => sbx.files.write('/tmp/auto-marker', marker))
  const info = await within(30_000, 'getInfo', () => sbx.getInfo())
  t.diagnostic(`created in ${created - t0} ms; getInfo.lifecycle = ${JSON.stringify(info.lifecycle)}`)
  assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: false }, 'getInfo().lifecycle')

  // Poll with the API only: sandbox traffic (isRunning) must not be what we watch.
  const { state } = await waitFor('sandbox paused after its 3 s timeout', async () => {
    const s = await stateOf(id)
    return { state: s, ok: s !== 'running' }
  }, { timeoutMs: 90_000, intervalMs: 500 })
  t.diagnostic(`[${runtime}] state ${state} ${Date.now() - created} ms after create returned`)
  assert.equal(state, 'paused')
  assert.ok(Date.now() - t0 >= 2500, 'not paused before its timeout')
  const listed = await listAll({ metadata: { tag } })
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[id, 'paused']],
    'listed as paused, not gone (right after getInfo() said paused: list() must agree)')
  await sleep(3000)
  assert.equal(await stateOf(id), 'paused', 'stays paused (the reaper does not kill it later)')
  assertQemu(id, false, 'auto-paused', { kept: true })

  const again = await timed(t, 'Sandbox.connect (resume after autoPause)', () =>
    within(CONNECT_MS, 'Sandbox.connect', () => Sandbox.connect(id, { timeoutMs: 60_000 })))
  assert.equal(await within(30_000, 'files.read', () => again.files.read('/tmp/auto-marker')), marker)
  const after = await within(30_000, 'getInfo after connect', () => again.getInfo())
  assert.equal(after.state, 'running')
  const left = after.endAt.getTime() - Date.now()
  assert.ok(left > 30_000, `connect({timeoutMs: 60000}) gives a fresh timeout; endAt is ${left} ms away`)
  await sleep(5000)
  assert.equal(await stateOf(id), 'running', 'not paused again by the old 3 s timeout')
})

test('pause({ keepMemory: false }) keeps the files, not the processes; connect boots it from its disk; onTimeout keepMemory: false too', { timeout: 900_000 }, async (t) => {
  const foo = `foo-${randomUUID()}`
  const sbx = await createSandbox(t, { envs: { FOO: foo }, timeoutMs: 600_000 })
  const id = sbx.sandboxId
  const marker = `fs-${randomUUID()}`
  await within(30_000, 'files.write', () => sbx.files.write('/home/user/fs-marker', marker))
  assert.equal((await run(sbx, `echo ${marker} > /tmp/fs-marker`)).exitCode, 0)
  await startCounter(sbx)
  const token = sbx.envdAccessToken

  assert.equal(await timed(t, 'pause({ keepMemory: false })', () =>
    within(PAUSE_MS, 'pause keepMemory false', () => sbx.pause({ keepMemory: false }))), true)
  assert.equal(await stateOf(id), 'paused', 'getInfo().state after a filesystem-only pause')
  if (hostChecks) {
    assert.equal(qemuRunning(id), false, 'no QEMU while paused to its files')
    assert.equal(savedState(id), false, 'no saved device state: the memory was dropped')
    assert.equal(existsSync(`${srv.dataDir}/vm/sandboxes/${id}/mem`), false, 'the memory file is gone')
  }
  // Traffic never wakes a sandbox without its memory (E2B: resume it explicitly).
  await assert.rejects(within(30_000, 'files.read while paused', () => sbx.files.read('/home/user/fs-marker')))
  assert.equal(await stateOf(id), 'paused', 'still paused after traffic')

  const again = await timed(t, 'Sandbox.connect (boot from the files)', () =>
    within(CONNECT_MS, 'Sandbox.connect', () => Sandbox.connect(id)))
  assert.equal(await stateOf(id), 'running')
  assert.equal(await within(30_000, 'files.read', () => again.files.read('/home/user/fs-marker')), marker, 'a file written through files.write')
  assert.equal((await run(again, 'cat /tmp/fs-marker')).stdout, `${marker}\n`, 'a file written by a command in /tmp')
  assert.equal((await run(again, 'echo $FOO')).stdout, `${foo}\n`, 'the create-time env var is set again')
  if (token) assert.equal(again.envdAccessToken, token, 'the same envd access token')
  const c1 = await counterState(again)
  await sleep(1500)
  const c2 = await counterState(again)
  assert.equal(c2.last, c1.last, `the background counter did not survive: its file stays at ${c1.last} (then ${c2.last})`)
  if (c1.last === 0) {
    // The counter appended to its file until the pause stopped it; what a
    // file being written at that moment keeps is not promised (E2B: files
    // written before the pause). Seen once on a microVM in CI (2026-12-06:
    // the file read as empty or missing while the markers above had
    // survived): kept as a diagnostic until it is explained.
    const seen = (await run(again, 'ls -la /tmp; od -c /tmp/moat-e2e-counter | tail -4')).stdout
    t.diagnostic(`[${runtime}] the counter's file after the filesystem resume: ${seen}`)
  }
  assert.equal((await run(sbx, 'echo old-handle')).stdout, 'old-handle\n', 'the old handle works after the resume')

  // E2B's lifecycle.onTimeout { action: 'pause', keepMemory: false }; with
  // autoResume the SDK refuses before any request.
  await assert.rejects(Sandbox.create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false }, autoResume: true } }),
    { name: 'InvalidArgumentError' })
  const auto = await createSandbox(t, { timeoutMs: 3000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  await within(30_000, 'files.write (auto)', () => auto.files.write('/home/user/auto-marker', marker))
  await waitFor('auto-paused to its files', async () => ({ ok: (await stateOf(auto.sandboxId)) === 'paused' }), { timeoutMs: 120_000, intervalMs: 500 })
  const back = await timed(t, 'Sandbox.connect (after the auto filesystem pause)', () =>
    within(CONNECT_MS, 'Sandbox.connect auto', () => Sandbox.connect(auto.sandboxId, { timeoutMs: 60_000 })))
  assert.equal(await within(30_000, 'files.read auto', () => back.files.read('/home/user/auto-marker')), marker)
})

test('auto-resume: traffic to a paused sandbox with autoResume resumes it; without, it fails and stays paused', { timeout: 600_000 }, async (t) => {
  // Without auto-resume: sandbox traffic gets 502 and the SDK throws.
  const plain = await createSandbox(t, { lifecycle: { onTimeout: 'pause' } })
  await within(30_000, 'files.write', () => plain.files.write('/tmp/f', 'plain'))
  assert.equal(await pause(plain), true)
  const cmdErr = await within(60_000, 'commands.run on paused', () => plain.commands.run('echo hi', { timeoutMs: 30_000 })).then(
    () => null, (e) => e)
  assert.ok(cmdErr, 'commands.run on a paused sandbox without autoResume fails')
  assert.doesNotMatch(String(cmdErr.message), /^timed out after/, 'fails promptly, does not hang')
  t.diagnostic(`without autoResume, commands.run -> ${cmdErr.name}: ${cmdErr.message}`)
  const readErr = await within(60_000, 'files.read on paused', () => plain.files.read('/tmp/f')).then(() => null, (e) => e)
  assert.ok(readErr, 'files.read on a paused sandbox without autoResume fails')
  t.diagnostic(`without autoResume, files.read -> ${readErr.name}: ${readErr.message}`)
  assert.equal(await within(30_000, 'isRunning paused', () => plain.isRunning()), false)
  assert.equal(await stateOf(plain.sandboxId), 'paused', 'traffic does not resume a sandbox without autoResume')
  await within(CONNECT_MS, 'connect plain', () => plain.connect())
  assert.equal(await within(30_000, 'files.read after connect', () => plain.files.read('/tmp/f')), 'plain')
  await killQuietly(plain.sandboxId)

  // With auto-resume, explicit pause: the old handle just works.
  const sbx = await createSandbox(t, { lifecycle: { onTimeout: 'pause', autoResume: true } })
  const id = sbx.sandboxId
  const info = await within(30_000, 'getInfo', () => sbx.getInfo())
  assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true }, 'getInfo().lifecycle')
  const marker = `ar-${randomUUID()}`
  await within(30_000, 'files.write', () => sbx.files.write('/tmp/ar-marker', marker))
  const pid = await startCounter(sbx)
  const before = await counterState(sbx)
  assert.equal(await pause(sbx), true)
  assert.equal(await stateOf(id), 'paused')
  const content = await timed(t, 'files.read on paused sandbox (auto-resume)', () =>
    within(CONNECT_MS, 'files.read (auto-resume)', () => sbx.files.read('/tmp/ar-marker')))
  assert.equal(content, marker, 'files.read through the old handle resumes the sandbox')
  assert.equal(await stateOf(id), 'running', 'running after auto-resume')
  assert.equal((await run(sbx, 'echo resumed')).stdout, 'resumed\n')
  assert.ok(await hasProcess(sbx, pid), 'background process survives auto-resume')
  await assertCounterAdvances(sbx, before.last, 'after auto-resume')

  // Paused again, this time the first traffic is an RPC (commands.run).
  assert.equal(await pause(sbx), true)
  assert.equal(await stateOf(id), 'paused')
  const r = await timed(t, 'commands.run on paused sandbox (auto-resume)', () =>
    run(sbx, 'cat /tmp/ar-marker', {}, CONNECT_MS))
  assert.equal(r.stdout, marker, 'commands.run through the old handle resumes the sandbox')
  assert.equal(await stateOf(id), 'running')

  // With auto-resume and autoPause on a short timeout.
  const short = await createSandbox(t, { timeoutMs: 3000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  await within(30_000, 'files.write', () => short.files.write('/tmp/short', 'short'))
  await waitFor('short sandbox auto-paused', async () => {
    const s = await stateOf(short.sandboxId)
    return { state: s, ok: s === 'paused' }
  }, { timeoutMs: 90_000, intervalMs: 500 })
  const r2 = await timed(t, 'commands.run after autoPause (auto-resume)', () => run(short, 'cat /tmp/short', {}, CONNECT_MS))
  assert.equal(r2.stdout, 'short', 'auto-paused sandbox with autoResume answers traffic')
})

test('a paused sandbox survives SIGKILL of moat serve and a restart', { timeout: 600_000, skip: external && 'needs a server this suite starts itself' }, async (t) => {
  await srv.ready
  const server = srv.server
  const tag = randomUUID()
  const sbx = await createSandbox(t, { metadata: { suite: 'pause-restart', tag } })
  const id = sbx.sandboxId
  const marker = `restart-${randomUUID()}`
  await within(30_000, 'files.write', () => sbx.files.write('/tmp/restart-marker', marker))
  const pid = await startCounter(sbx)
  const before = await counterState(sbx)
  assert.equal(await pause(sbx), true)
  assert.equal(await stateOf(id), 'paused')
  assertQemu(id, false, 'paused before the crash', { kept: true })

  const port = server.port
  await server.kill9()
  server.port = port
  await timed(t, 'restart moat serve', () => server.start())
  exportSdkEnv(server.url, server.apiKey)

  assert.equal(await stateOf(id), 'paused', 'still paused after restart')
  assertQemu(id, false, 'after restart, before connect')
  const listed = await listAll({ metadata: { tag } })
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[id, 'paused']], 'listed as paused after restart')
  assert.equal(await within(30_000, 'isRunning', () => sbx.isRunning()), false, 'not running after restart')

  const again = await timed(t, 'connect after restart', () => within(CONNECT_MS, 'Sandbox.connect', () => Sandbox.connect(id)))
  assert.equal(await within(30_000, 'files.read', () => again.files.read('/tmp/restart-marker')), marker, 'file survives')
  assert.equal((await run(again, 'echo back')).stdout, 'back\n')
  assert.ok(await hasProcess(again, pid), 'background process survives pause + server crash + resume')
  await assertCounterAdvances(again, before.last, 'after restart + resume')
  assert.equal(await stateOf(id), 'running')
  assert.equal(await within(60_000, 'kill', () => Sandbox.kill(id)), true)
  await assertNoLeaks([id], { waitMs: 30_000 })
})

test("an open PTY's shell survives pause/resume and still takes input", { timeout: 300_000 }, async (t) => {
  const sbx = await createSandbox(t, { metadata: { suite: 'pause-pty' } })
  const enc = new TextEncoder()
  const term = await within(30_000, 'pty.create', () =>
    sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: () => {} }),
  )
  const file = '/tmp/pty-counter'
  await within(30_000, 'sendInput loop', () => sbx.pty.sendInput(term.pid,
    enc.encode(`i=0; while :; do i=$((i+1)); echo $i >> ${file}; sleep 0.2; done\n`)))
  const before = await waitFor('pty loop runs', () => counterState(sbx, file).then((c) => ({ ...c, ok: c.last >= 3 })))
  // The output stream breaks across a pause; the shell must not.
  await term.disconnect().catch(() => {})
  assert.equal(await timed(t, 'pause (pty open)', () => pause(sbx)), true)
  await timed(t, 'connect (pty open)', () => within(CONNECT_MS, 'Sandbox.connect', () => Sandbox.connect(sbx.sandboxId)))
  assert.ok(await hasProcess(sbx, term.pid), 'the PTY shell is still listed after resume')
  await assertCounterAdvances(sbx, before.last, 'pty loop after resume', file)
  // Still interactive: interrupt the loop, then run a command in the same shell.
  // The terminal flushes its pending input when it delivers the interrupt
  // (ISIG without NOFLSH): a line that arrives before that is lost (seen on
  // gVisor), so it is sent again until the shell has run it. The interrupt
  // is sent again too: on microVMs a single ^C right after the resume was
  // sometimes not acted on (the loop went on; 2 of 4 CI runs on
  // 2026-12-05/06, not yet explained: see issue 35's notes). At the prompt
  // a ^C only clears the line. The ^C goes with every third try only, and
  // the tries are a second apart: on a loaded host (CI, gVisor beside a
  // TCG microVM) a shell slower than the tries had each line flushed by
  // the next ^C before it read it, for 30 s (2026-12-06).
  let tries = 0
  const after = await waitFor('the shell answers after resume', async () => {
    if (tries++ % 3 === 0) await within(30_000, 'sendInput ^C', () => sbx.pty.sendInput(term.pid, enc.encode('\x03')))
    await within(30_000, 'sendInput echo', () => sbx.pty.sendInput(term.pid, enc.encode('echo "pty-$i" > /tmp/pty-after\n')))
    const r = await run(sbx, 'cat /tmp/pty-after 2>/dev/null || true')
    return { out: r.stdout, ok: /^pty-\d+\n$/.test(r.stdout) }
  }, { timeoutMs: 90_000, intervalMs: 1000 })
  const n = Number(after.out.trim().slice(4))
  assert.ok(n > before.last, `the shell's variable kept counting across the pause (${n} > ${before.last})`)
  assert.equal(await within(30_000, 'pty.kill', () => sbx.pty.kill(term.pid)), true)
})
