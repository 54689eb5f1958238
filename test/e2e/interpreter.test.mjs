// Code interpreter (envd on :49999, Jupyter kernels) through the official
// @e2b/code-interpreter SDK, against sandboxes of the code-interpreter-v1
// template (build it first: moat template build code-interpreter-v1).
//
// Environment (besides the harness's):
//   MOAT_E2E_INTERPRETER_TEMPLATE  template to use (default: the SDK's
//                                  default, code-interpreter-v1)
// Error bodies in SandboxError messages (the SDK adds them for source "ci").
process.env.E2B_USER_AGENT_SOURCE ??= 'ci'
import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox } from '@e2b/code-interpreter'

import { useServer, within, killQuietly } from './harness.mjs'

const server = useServer()

const interpreterTemplate = process.env.MOAT_E2E_INTERPRETER_TEMPLATE

// createInterpreter creates a code-interpreter sandbox (the SDK's default
// template unless overridden) and kills it when the test (or suite) ends.
async function createInterpreter(t, opts = {}) {
  await server.ready
  const o = { timeoutMs: 600_000, ...opts }
  const sbx = await within(180_000, 'Sandbox.create (code interpreter)', () =>
    interpreterTemplate ? Sandbox.create(interpreterTemplate, o) : Sandbox.create(o),
  )
  t?.after?.(() => killQuietly(sbx.sandboxId))
  return sbx
}

// timed runs fn and reports how long it took in the test's diagnostics.
async function timed(t, what, fn) {
  const start = performance.now()
  try {
    return await fn()
  } finally {
    t.diagnostic(`${what}: ${Math.round(performance.now() - start)} ms`)
  }
}

// run is runCode bounded by a harness timer (SDK timeouts do not bound a
// hung server).
function run(sbx, code, opts = {}, ms = 90_000) {
  return within(ms, `runCode(${JSON.stringify(code).slice(0, 60)})`, () => sbx.runCode(code, opts))
}

// vmFullOnly: on microVMs the default tier (scripts/test.sh) runs what
// depends on the runtime (the snapshot's kernel, state, streaming, errors,
// rich results, Python and Bash); the JavaScript, TypeScript and R kernels
// and the kernel's own lifecycle (contexts, timeouts, a crash, pandas) are
// the same Jupyter code inside a microVM as on containers and gVisor,
// where the default tier runs them, and each costs tens of seconds of TCG:
// on microVMs only the full tier (MOAT_TEST_FULL=1) runs them.
function vmFullOnly() {
  if (process.env.MOAT_E2E_RUNTIME !== 'vm' || process.env.MOAT_TEST_FULL === '1') return false
  return 'full tier only on microVMs: the same Jupyter kernel as on containers (scripts/test.sh --full)'
}

function otherKernelsSkip(language) {
  return ['js', 'ts', 'r'].includes(language) ? vmFullOnly() : false
}

describe('code interpreter', () => {
  let sbx
  let createMs = 0
  before(async () => {
    await server.ready
    const start = performance.now()
    sbx = await createInterpreter(null, { envs: { MOAT_CREATE_VAR: 'from-create' } })
    createMs = Math.round(performance.now() - start)
  }, { timeout: 240_000 })
  after(async () => {
    if (sbx) await killQuietly(sbx.sandboxId)
  }, { timeout: 60_000 })

  test('python keeps state between calls', { timeout: 120_000 }, async (t) => {
    t.diagnostic(`Sandbox.create (code-interpreter-v1): ${createMs} ms`)
    const first = await timed(t, 'x = 1 (first call)', () => run(sbx, 'x = 1'))
    assert.equal(first.error, undefined, JSON.stringify(first.error))
    const ex = await timed(t, 'x += 1; x', () => run(sbx, 'x += 1; x'))
    assert.equal(ex.error, undefined, JSON.stringify(ex.error))
    assert.equal(ex.text, '2')
  })

  // On microVMs the template snapshot is taken once envd's default Python
  // context is up, so every clone wakes up with a running kernel (and
  // reseeds its random module before the first execution).
  test('a new sandbox has its python context at once; clones draw different random numbers', { timeout: 240_000 }, async (t) => {
    const other = await createInterpreter(t)
    if (process.env.MOAT_E2E_RUNTIME === 'vm') {
      const listed = await timed(t, 'listCodeContexts right after create', () =>
        within(30_000, 'listCodeContexts', () => other.listCodeContexts()))
      assert.ok(listed.some((c) => c.language === 'python'),
        `the snapshot holds the default python context: ${JSON.stringify(listed)}`)
    }
    const draw = 'import random\nrandom.getrandbits(64)'
    const [a, b] = await timed(t, 'random.getrandbits(64) in two sandboxes', () =>
      Promise.all([run(sbx, draw), run(other, draw)]))
    assert.equal(a.error, undefined, JSON.stringify(a.error))
    assert.ok(a.text && b.text, `results: ${a.text} ${b.text}`)
    assert.notEqual(a.text, b.text, 'two sandboxes of one template draw the same random numbers')
  })

  test('stdout and stderr stream to callbacks while code runs', { timeout: 120_000 }, async (t) => {
    const out = []
    const err = []
    const start = performance.now()
    const code = [
      'import sys, time',
      'print("out-1", flush=True)',
      'print("err-1", file=sys.stderr, flush=True)',
      'time.sleep(2)',
      'print("out-2")',
    ].join('\n')
    const ex = await timed(t, 'runCode with callbacks', () =>
      run(sbx, code, {
        onStdout: (m) => out.push({ line: m.line, at: performance.now() - start }),
        onStderr: (m) => err.push({ line: m.line, at: performance.now() - start }),
      }),
    )
    const end = performance.now() - start
    assert.equal(ex.error, undefined, JSON.stringify(ex.error))
    assert.equal(out.map((m) => m.line).join(''), 'out-1\nout-2\n')
    assert.equal(err.map((m) => m.line).join(''), 'err-1\n')
    t.diagnostic(`first stdout at ${Math.round(out[0].at)} ms, stderr at ${Math.round(err[0].at)} ms, done at ${Math.round(end)} ms`)
    assert.ok(end - out[0].at >= 1500, `first stdout arrived ${Math.round(end - out[0].at)} ms before the end; want it while the code runs`)
    assert.ok(end - err[0].at >= 1500, 'stderr arrived only at the end')
    assert.equal(ex.logs.stdout.join(''), 'out-1\nout-2\n')
    assert.equal(ex.logs.stderr.join(''), 'err-1\n')
  })

  test('an exception arrives in execution.error and is not thrown', { timeout: 120_000 }, async (t) => {
    let seen
    const ex = await timed(t, 'runCode 1/0', () =>
      run(sbx, 'print("before")\n1 / 0', { onError: (e) => { seen = e } }),
    )
    assert.ok(ex.error, 'execution.error is set')
    assert.equal(ex.error.name, 'ZeroDivisionError')
    assert.match(ex.error.value, /division by zero/)
    assert.match(ex.error.traceback, /ZeroDivisionError/)
    assert.equal(seen?.name, 'ZeroDivisionError', 'onError called')
    assert.equal(ex.logs.stdout.join(''), 'before\n')
    const again = await run(sbx, '40 + 2')
    assert.equal(again.text, '42')
  })

  test('matplotlib figure: PNG result and chart data', { timeout: 180_000 }, async (t) => {
    const code = [
      'import matplotlib.pyplot as plt',
      'plt.figure()',
      'plt.plot([1, 2, 3], [4, 5, 6], label="rising")',
      'plt.title("moat chart")',
      'plt.xlabel("x")',
      'plt.ylabel("y")',
      'plt.show()',
    ].join('\n')
    const ex = await timed(t, 'matplotlib plot', () => run(sbx, code, {}, 150_000))
    assert.equal(ex.error, undefined, JSON.stringify(ex.error))
    const img = ex.results.find((r) => r.png)
    assert.ok(img, `a PNG result; got formats ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
    const png = Buffer.from(img.png, 'base64')
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG magic')
    assert.ok(png.length > 1000, `PNG of ${png.length} bytes`)
    const chart = img.chart
    assert.ok(chart, 'chart attached to the figure result')
    assert.equal(chart.type, 'line')
    assert.equal(chart.title, 'moat chart')
    assert.equal(chart.elements.length, 1)
    assert.equal(chart.elements[0].label, 'rising')
    assert.deepEqual(chart.elements[0].points, [[1, 4], [2, 5], [3, 6]])
  })

  test('pandas DataFrame: html and text', { timeout: 120_000, skip: vmFullOnly() }, async (t) => {
    const ex = await timed(t, 'DataFrame', () =>
      run(sbx, 'import pandas as pd\npd.DataFrame({"a": [1, 2], "b": [3, 4]})'),
    )
    assert.equal(ex.error, undefined, JSON.stringify(ex.error))
    const r = ex.results.find((x) => x.isMainResult) ?? ex.results[0]
    assert.ok(r, 'a result')
    assert.match(r.html ?? '', /<table/)
    assert.match(r.text ?? '', /a\s+b/)
    assert.match(r.text ?? '', /1\s+3/)
  })

  for (const [language, first, second, check] of [
    ['js', 'const y = 40', 'y + 2', (ex) => assert.equal(ex.text, '42')],
    ['ts', 'let z: number = 41', 'const w: number = z + 1; w', (ex) => assert.equal(ex.text, '42')],
    // IRkernel publishes values as display_data, so (as on E2B) they are
    // results but not the main result: execution.text stays undefined.
    ['r', 'v <- 20', 'v * 2', (ex) => assert.equal(ex.results[0]?.text, '[1] 40')],
    ['bash', 'export MOAT_B=bar; cd /tmp', 'echo "$MOAT_B"; pwd',
      (ex) => assert.equal(ex.logs.stdout.join(''), 'bar\n/tmp\n')],
  ]) {
    test(`${language}: runs and keeps state in its context`, { timeout: 240_000, skip: otherKernelsSkip(language) }, async (t) => {
      const ctx = await timed(t, `createCodeContext(${language})`, () =>
        within(150_000, `createCodeContext ${language}`, () =>
          sbx.createCodeContext({ language, requestTimeoutMs: 120_000 })),
      )
      assert.ok(ctx.id)
      const a = await timed(t, `${language} first call`, () =>
        run(sbx, first, { context: ctx, requestTimeoutMs: 120_000, timeoutMs: 120_000 }, 150_000))
      assert.equal(a.error, undefined, JSON.stringify(a.error))
      const b = await timed(t, `${language} second call`, () => run(sbx, second, { context: ctx }))
      assert.equal(b.error, undefined, JSON.stringify(b.error))
      check(b)
      await within(30_000, 'removeCodeContext', () => sbx.removeCodeContext(ctx))
    })
  }

  test('env vars: from Sandbox.create and per runCode', { timeout: 120_000 }, async (t) => {
    const ex = await timed(t, 'os.environ (create envs)', () =>
      run(sbx, 'import os\nprint(os.environ.get("MOAT_CREATE_VAR"))'))
    assert.equal(ex.logs.stdout.join(''), 'from-create\n')
    const per = await timed(t, 'os.environ (runCode envs)', () =>
      run(sbx, 'import os\nprint(os.environ.get("MOAT_RUN_VAR"), os.environ.get("MOAT_CREATE_VAR"))',
        { envs: { MOAT_RUN_VAR: 'per-run', MOAT_CREATE_VAR: 'overridden' } }))
    assert.equal(per.error, undefined, JSON.stringify(per.error))
    assert.equal(per.logs.stdout.join(''), 'per-run overridden\n')
    const later = await run(sbx, 'import os\nprint(os.environ.get("MOAT_RUN_VAR"), os.environ.get("MOAT_CREATE_VAR"))')
    assert.equal(later.logs.stdout.join(''), 'None from-create\n', 'runCode envs do not outlive the call')
    const sh = await run(sbx, 'echo "$MOAT_RUN_VAR|$MOAT_CREATE_VAR"', { language: 'bash', envs: { MOAT_RUN_VAR: 'sh' } })
    assert.equal(sh.logs.stdout.join(''), 'sh|from-create\n')
  })

  test('contexts: isolated, listed, restarted, removed', { timeout: 180_000, skip: vmFullOnly() }, async (t) => {
    const [c1, c2] = await timed(t, 'create two python contexts', () => Promise.all([
      within(90_000, 'createCodeContext 1', () => sbx.createCodeContext({ requestTimeoutMs: 60_000 })),
      within(90_000, 'createCodeContext 2', () => sbx.createCodeContext({ language: 'python', cwd: '/tmp', requestTimeoutMs: 60_000 })),
    ]))
    assert.notEqual(c1.id, c2.id)
    assert.equal(c2.cwd, '/tmp')
    await run(sbx, 'secret = 7', { context: c1 })
    const iso = await run(sbx, 'secret', { context: c2 })
    assert.equal(iso.error?.name, 'NameError', 'state does not leak between contexts')
    const cwd = await run(sbx, 'import os\nos.getcwd()', { context: c2 })
    // Like E2B, envd strips the quotes of a str repr from text results.
    assert.equal(cwd.text, '/tmp')
    const seen = await run(sbx, 'secret * 6', { context: c1 })
    assert.equal(seen.text, '42')

    const list = await timed(t, 'listCodeContexts', () => within(30_000, 'listCodeContexts', () => sbx.listCodeContexts()))
    const ids = list.map((c) => c.id)
    assert.ok(ids.includes(c1.id) && ids.includes(c2.id), `listed: ${JSON.stringify(list)}`)
    assert.equal(list.find((c) => c.id === c2.id).language, 'python')

    await timed(t, 'restartCodeContext', () => within(90_000, 'restartCodeContext', () => sbx.restartCodeContext(c1)))
    const gone = await run(sbx, 'secret', { context: c1 })
    assert.equal(gone.error?.name, 'NameError', 'restart drops the state')
    const alive = await run(sbx, '1 + 1', { context: c1 })
    assert.equal(alive.text, '2')

    await timed(t, 'removeCodeContext', () => within(30_000, 'removeCodeContext', () => sbx.removeCodeContext(c2.id)))
    const after = await within(30_000, 'listCodeContexts', () => sbx.listCodeContexts())
    assert.ok(!after.some((c) => c.id === c2.id), 'removed context not listed')
    assert.ok(after.some((c) => c.id === c1.id), 'other context still listed')
    await assert.rejects(run(sbx, '1', { context: c2 }), 'running code in a removed context fails')
    await sbx.removeCodeContext(c1)
  })

  test('an infinite loop times out (timeoutMs 5000) and the context recovers', { timeout: 120_000, skip: vmFullOnly() }, async (t) => {
    const ctx = await within(90_000, 'createCodeContext', () => sbx.createCodeContext({ requestTimeoutMs: 60_000 }))
    await run(sbx, 'kept = "still here"', { context: ctx })
    const start = performance.now()
    let outcome
    try {
      const ex = await within(20_000, 'infinite loop', () => sbx.runCode('while True:\n    pass', { context: ctx, timeoutMs: 5000 }))
      outcome = ex.error ? `execution.error ${ex.error.name}` : 'no error'
    } catch (err) {
      outcome = `rejected: ${err.name}: ${err.message}`
    }
    const took = performance.now() - start
    t.diagnostic(`infinite loop: ${outcome} after ${Math.round(took)} ms`)
    assert.notEqual(outcome, 'no error')
    assert.ok(took < 6500, `timed out after ${Math.round(took)} ms, want ~5 s`)
    const next = await timed(t, 'next call on the same context', () => run(sbx, 'kept', { context: ctx }, 30_000))
    assert.equal(next.error, undefined, JSON.stringify(next.error))
    assert.equal(next.text, 'still here', 'interrupt keeps the kernel state')
    await sbx.removeCodeContext(ctx)
  })

  test('a TypeScript busy loop times out and the context keeps its state', { timeout: 120_000, skip: otherKernelsSkip('ts') }, async (t) => {
    const ctx = await within(90_000, 'createCodeContext ts', () =>
      sbx.createCodeContext({ language: 'ts', requestTimeoutMs: 60_000 }))
    await run(sbx, "const kept: string = 'ts state'", { context: ctx })
    const start = performance.now()
    await assert.rejects(
      within(20_000, 'ts busy loop', () => sbx.runCode('while (true) {}', { context: ctx, timeoutMs: 3000 })),
      (err) => err?.name === 'TimeoutError',
    )
    const took = performance.now() - start
    t.diagnostic(`ts busy loop rejected after ${Math.round(took)} ms`)
    assert.ok(took < 4500, `timed out after ${Math.round(took)} ms, want ~3 s`)
    // The template's deno kernelspec asks for message interrupts: SIGINT
    // would kill the kernel and lose the state.
    const next = await timed(t, 'next ts call', () => run(sbx, 'kept', { context: ctx }, 30_000))
    assert.equal(next.error, undefined, JSON.stringify(next.error))
    assert.equal(next.text, 'ts state')
    await sbx.removeCodeContext(ctx)
  })

  test('a crashed kernel reports an error and the next call works', { timeout: 180_000, skip: vmFullOnly() }, async (t) => {
    const ctx = await within(90_000, 'createCodeContext', () => sbx.createCodeContext({ requestTimeoutMs: 60_000 }))
    let outcome
    try {
      const ex = await timed(t, 'os._exit(1)', () => run(sbx, 'import os; os._exit(1)', { context: ctx }, 60_000))
      outcome = ex.error ? `execution.error ${ex.error.name}: ${ex.error.value}` : 'no error'
    } catch (err) {
      outcome = `rejected: ${err.name}: ${err.message}`
    }
    t.diagnostic(`crash: ${outcome}`)
    assert.notEqual(outcome, 'no error', 'the crash is reported')
    assert.doesNotMatch(outcome, /timed out after/, 'the crash is reported, not hung')
    const next = await timed(t, 'next call after the crash', () =>
      run(sbx, '6 * 7', { context: ctx, requestTimeoutMs: 60_000 }, 90_000))
    assert.equal(next.error, undefined, JSON.stringify(next.error))
    assert.equal(next.text, '42')
    await sbx.removeCodeContext(ctx)
  })
})
