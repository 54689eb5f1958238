// Helpers shared by the pause and fork suites: watch state that only
// survives when a sandbox's memory does (a background counter whose value
// lives in a shell), poll for conditions, and time steps into the test log.

import assert from 'node:assert/strict'

import { within, run, sleep } from './harness.mjs'

const runtimeLabel = process.env.MOAT_E2E_RUNTIME || '(server default)'

// COUNTER is the file the background counter appends to.
export const COUNTER = '/tmp/moat-e2e-counter'

// timed runs fn and logs how long it took as a test diagnostic.
export async function timed(t, what, fn) {
  const start = performance.now()
  try {
    return await fn()
  } finally {
    t?.diagnostic?.(`[${runtimeLabel}] ${what}: ${Math.round(performance.now() - start)} ms`)
  }
}

// waitFor polls fn until it returns {ok: true, ...} or the time is up.
export async function waitFor(what, fn, { timeoutMs = 30_000, intervalMs = 250 } = {}) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    last = await fn()
    if (last.ok) return last
    if (Date.now() > deadline) throw new Error(`${what}: not reached after ${timeoutMs} ms (last: ${JSON.stringify(last)})`)
    await sleep(intervalMs)
  }
}

// counterState reads the counter file once: number of lines and last value.
export async function counterState(sbx, file = COUNTER) {
  const r = await run(sbx, `awk 'END{print NR, $0}' ${file} 2>/dev/null || echo 0 0`, {}, 60_000)
  const [lines, last] = r.stdout.trim().split(/\s+/).map(Number)
  return { lines, last: Number.isFinite(last) ? last : 0 }
}

// startCounter starts a background shell loop appending 1, 2, 3, ... to a
// file every 0.2 s. The value lives in the shell's memory: after a resume,
// or in a fork restored from a memory snapshot, the file continues where it
// stopped (a restarted process would start again at 1, a second one would
// break lines === last). It returns the process's PID.
export async function startCounter(sbx, file = COUNTER) {
  const h = await within(30_000, 'start background counter', () =>
    sbx.commands.run(`i=0; while :; do i=$((i+1)); echo $i >> ${file}; sleep 0.2; done`,
      { background: true, timeoutMs: 0 }),
  )
  // Keep the process, drop the stream (it would break across a pause).
  await h.disconnect()
  await waitFor('counter starts', () => counterState(sbx, file).then((c) => ({ ...c, ok: c.last >= 3 })))
  return h.pid
}

// assertCounterAdvances waits until the counter is past since + 2 and
// checks that it was never restarted or duplicated.
export async function assertCounterAdvances(sbx, since, what, file = COUNTER) {
  const c = await waitFor(`${what}: counter advances past ${since}`, async () => {
    const s = await counterState(sbx, file)
    return { ...s, ok: s.last > since + 2 }
  }, { timeoutMs: 30_000 })
  assert.equal(c.lines, c.last, `${what}: counter file has ${c.lines} lines but last value ${c.last} (process restarted or duplicated)`)
  return c
}

// hasProcess reports whether envd lists a process with pid.
export async function hasProcess(sbx, pid) {
  const procs = await within(30_000, 'commands.list', () => sbx.commands.list())
  return procs.some((p) => p.pid === pid)
}

// runCode runs code in a code-interpreter sandbox, bounded.
export function runCode(sbx, code, ms = 120_000) {
  return within(ms, `runCode(${JSON.stringify(code).slice(0, 60)})`, () => sbx.runCode(code))
}
