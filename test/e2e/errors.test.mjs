// Error answers through the official SDK: a sandbox ID that is not well
// formed is answered exactly like an unknown one, on every sandbox route of
// the API (404 → SandboxNotFoundError) and in the sandbox proxy (the 502
// "sandbox was not found" → SandboxNotFoundError / TimeoutError /
// isRunning false, as for an unknown ID); and the bodies of provoked
// failures name no host path, address or log tail.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'

import { Sandbox, SandboxNotFoundError, NotFoundError, TimeoutError } from 'e2b'

import { useServer, createSandbox, within, template } from './harness.mjs'

const ctx = useServer()

const unknown = 'inotthere0000000000000'
const malformed = ['../etc', '..%2F..%2Fetc', 'ABC', 'a_b', 'a-b-c', 'a.b', '%00', 'x'.repeat(300) + '!']

// leakRE matches what must never reach a client.
const leakRE = /\/var\/lib|\/run\/|\/tmp|moat-ci|\b10\.\d+\.\d+\.\d+|169\.254\.|fd6d:|127\.0\.0\.1|console|panic/i

async function api(method, path, body) {
  const res = await fetch(`${ctx.url}${path}`, {
    method,
    headers: { 'X-API-KEY': ctx.apiKey, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  })
  return { status: res.status, text: await res.text() }
}

const notFoundBody = (id) =>
  JSON.stringify({ code: 404, message: `Sandbox "${id}" doesn't exist or you don't have access to it` })

test('a malformed sandbox ID gets the unknown-ID 404 from every sandbox route', { timeout: 120_000 }, async () => {
  const routes = [
    ['GET', '/sandboxes/%s'], ['DELETE', '/sandboxes/%s'], ['POST', '/sandboxes/%s/timeout', { timeout: 10 }],
    ['POST', '/sandboxes/%s/refreshes', {}], ['POST', '/sandboxes/%s/pause', {}], ['POST', '/sandboxes/%s/resume', {}],
    ['POST', '/sandboxes/%s/connect', { timeout: 10 }], ['POST', '/v2/sandboxes/%s/connect', {}],
    ['GET', '/sandboxes/%s/metrics'], ['GET', '/sandboxes/%s/logs'], ['GET', '/v2/sandboxes/%s/logs'],
    ['POST', '/sandboxes/%s/snapshots', {}], ['POST', '/sandboxes/%s/fork', {}],
    ['PUT', '/sandboxes/%s/network', { allowOut: ['1.1.1.1'] }],
  ]
  for (const [method, pattern, body] of routes) {
    for (const id of [unknown, ...malformed]) {
      const r = await api(method, pattern.replace('%s', encodeURIComponent(id)), body)
      assert.equal(r.status, 404, `${method} ${pattern} ${id}: ${r.status} ${r.text}`)
      assert.equal(r.text.trim(), notFoundBody(id), `${method} ${pattern} ${id}`)
    }
  }
})

test('the SDK reads malformed IDs as SandboxNotFoundError, like unknown ones', { timeout: 120_000 }, async () => {
  for (const id of [unknown, ...malformed, '..']) {
    await assert.rejects(within(30_000, `connect ${id}`, () => Sandbox.connect(id)), SandboxNotFoundError, `connect ${id}`)
    await assert.rejects(within(30_000, `getInfo ${id}`, () => Sandbox.getInfo(id)), SandboxNotFoundError, `getInfo ${id}`)
    await assert.rejects(within(30_000, `setTimeout ${id}`, () => Sandbox.setTimeout(id, 10_000)), SandboxNotFoundError,
      `setTimeout ${id}`)
    await assert.rejects(within(30_000, `getMetrics ${id}`, () => Sandbox.getMetrics(id)), SandboxNotFoundError,
      `getMetrics ${id}`)
    assert.equal(await within(30_000, `kill ${id}`, () => Sandbox.kill(id)), false, `kill ${id}`)
  }
})

// hostRequest sends one request to the server with a Host header of the
// sandbox form "{port}-{id}.{domain}".
function hostRequest(host, path) {
  const u = new URL(ctx.url)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method: 'GET', headers: { Host: host } }, (res) => {
      let body = ''
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(30_000, () => req.destroy(new Error('timeout')))
    req.end()
  })
}

test('the proxy answers a malformed ID like an unknown one', { timeout: 180_000 }, async (t) => {
  const live = await createSandbox(t)
  const { envdVersion } = await within(30_000, 'getInfo', () => live.getInfo())
  for (const id of [unknown, ...malformed]) {
    // What the SDK does with a sandbox object for that ID: every call goes
    // through the proxy with E2b-Sandbox-Id.
    const sbx = new Sandbox({ sandboxId: id, envdVersion })
    await assert.rejects(within(30_000, `commands.run ${id}`, () => sbx.commands.run('true')), SandboxNotFoundError,
      `commands.run ${id}`)
    await assert.rejects(within(30_000, `files.read ${id}`, () => sbx.files.read('/etc/hostname')),
      (err) => err instanceof TimeoutError || err instanceof NotFoundError, `files.read ${id}`)
    assert.equal(await within(30_000, `isRunning ${id}`, () => sbx.isRunning()), false, `isRunning ${id}`)
  }
  // Host routing: the same 502 body for an unknown and a malformed ID.
  for (const id of [unknown, 'bad_id', 'BAD']) {
    const r = await hostRequest(`49983-${id}.moat.localhost`, '/health')
    assert.equal(r.status, 502, `host ${id}: ${r.status} ${r.body}`)
    assert.deepEqual(JSON.parse(r.body), { code: 502, message: 'The sandbox was not found', sandboxId: id })
  }
  // The live sandbox still answers: nothing above reached it.
  assert.equal((await within(60_000, 'run on live', () => live.commands.run('echo ok'))).stdout.trim(), 'ok')
})

test('error bodies of provoked failures name no host path, address or log tail', { timeout: 240_000 }, async (t) => {
  const bodies = []
  const keep = (what, r) => {
    assert.ok(r.status >= 400, `${what}: status ${r.status} ${r.text}`)
    bodies.push([what, r.text])
  }
  keep('unknown template', await api('POST', '/v2/sandboxes', { templateID: 'nope', timeout: 60 }))
  keep('escaping template', await api('POST', '/v2/sandboxes', { templateID: '../../../etc', timeout: 60 }))
  keep('bad env name', await api('POST', '/v2/sandboxes', { templateID: template, timeout: 60, envVars: { 'A=B': 'c' } }))
  keep('timeout too long', await api('POST', '/v2/sandboxes', { templateID: template, timeout: 10_000_000 }))
  keep('bad body', await api('POST', '/v2/sandboxes', '{"templateID":'))
  keep('bad network', await api('POST', '/v2/sandboxes', { templateID: template, network: { denyOut: ['192.168.0.0/33'] } }))
  keep('malformed ID', await api('GET', '/sandboxes/..%2F..%2Fetc'))
  keep('unknown route', await api('GET', '/v3/nothing'))

  const sbx = await createSandbox(t)
  const envd = async (what, path, init = {}) => {
    const res = await fetch(`${ctx.url}${path}`, {
      ...init,
      headers: {
        'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983',
        ...(sbx.envdAccessToken ? { 'X-Access-Token': sbx.envdAccessToken } : {}), ...(init.headers ?? {}),
      },
      signal: AbortSignal.timeout(30_000),
    })
    keep(what, { status: res.status, text: await res.text() })
  }
  await envd('download of a missing file', '/files?path=/nonexistent/f')
  await envd('download of a directory', '/files?path=/etc')
  await envd('upload under a file', '/files?path=/dev/null/x', {
    method: 'POST', body: 'x', headers: { 'Content-Type': 'application/octet-stream' },
  })
  await envd('upload as an unknown user', '/files?path=/x&username=nobody-here', {
    method: 'POST', body: 'x', headers: { 'Content-Type': 'application/octet-stream' },
  })
  await envd('closed port', '/', { headers: { 'E2b-Sandbox-Port': '1' } })
  for (const [what, err] of [
    ['SDK read of a missing file', await sbx.files.read('/nonexistent/f').catch((e) => e)],
    ['SDK write under a file', await sbx.files.write('/dev/null/x', 'x').catch((e) => e)],
  ]) {
    assert.ok(err instanceof Error, `${what}: no error`)
    bodies.push([what, err.message])
  }
  for (const [what, text] of bodies) {
    t.diagnostic(`${what}: ${text.trim()}`)
    assert.doesNotMatch(text, leakRE, `${what} leaks: ${text}`)
  }
})
