// Secrets (issue 16) through the official SDK's Secret class: create,
// update (a new version), getInfo by ID or name, list, exists, destroy;
// values are write-only (in no response body, not in the server's log, not
// in the clear in the database); bad input is a 4xx JSON {code,message}
// with nothing written; another team's secret is not found; network.rules
// are validated (malformed, unknown secret, a domain allowOut does not
// reach: 400). Header injection itself is inject.test.mjs.
// Runtime-independent: scripts/test.sh runs it in the container loop only.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { existsSync, readFileSync, statSync } from 'node:fs'
import path from 'node:path'

import { Sandbox, Secret, SecretNotFoundError } from 'e2b'

import { useServer, within, template } from './harness.mjs'

const ctx = useServer()
const tag = randomUUID().slice(0, 8)
const value1 = `s3cr3t-one-${randomUUID()}`
const value2 = `s3cr3t-two-${randomUUID()}`
const bodies = [] // every raw response body of this file

async function api(method, p, body, apiKey = ctx.apiKey) {
  const res = await fetch(`${ctx.url}${p}`, {
    method,
    headers: { 'X-API-KEY': apiKey, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  })
  const text = await res.text()
  bodies.push(text)
  return { status: res.status, text, json: text ? JSON.parse(text) : undefined }
}

// assertError checks a 4xx/5xx answer is E2B's JSON {code, message}.
function assertError(r, status, re, what) {
  assert.equal(r.status, status, `${what}: ${r.status} ${r.text}`)
  assert.equal(r.json.code, status, what)
  assert.match(r.json.message, re, what)
}

async function names(apiKey = ctx.apiKey) {
  const out = []
  const pager = Secret.list({ apiKey, limit: 2 })
  while (pager.hasNext) out.push(...(await within(30_000, 'Secret.list', () => pager.nextItems())).map((s) => s.name))
  return out
}

test('create, update, getInfo, list, exists, destroy', { timeout: 60_000 }, async () => {
  await ctx.ready
  const name = `E2E-Sec-${tag}`
  const canon = name.toLowerCase()
  const created = await Secret.create(name, value1, { metadata: { env: 'e2e' } })
  assert.match(created.secretId, /^sec_/)
  assert.equal(created.name, canon)
  assert.equal(created.version, 1)
  assert.deepEqual(created.metadata, { env: 'e2e' })
  assert.ok(created.createdAt instanceof Date && !Number.isNaN(created.createdAt.getTime()))

  const updated = await Secret.update(canon, value2)
  assert.equal(updated.version, 2)
  assert.equal(updated.secretId, created.secretId)
  assert.deepEqual(updated.metadata, { env: 'e2e' }, 'an update without metadata keeps it')
  assert.ok(updated.updatedAt >= created.updatedAt)

  for (const key of [created.secretId, canon, name]) {
    const info = await Secret.getInfo(key)
    assert.equal(info.secretId, created.secretId, key)
    assert.equal(info.version, 2, key)
  }
  assert.ok((await names()).includes(canon), 'list (pages of 2) shows it')
  assert.equal(await Secret.exists(created.secretId), true)
  assert.equal(await Secret.exists(`nope-${tag}`), false)

  assert.equal(await Secret.destroy(name), true)
  assert.equal(await Secret.destroy(created.secretId), false)
  assert.equal(await Secret.exists(canon), false)
  await assert.rejects(Secret.getInfo(canon), SecretNotFoundError)
  await assert.rejects(Secret.update(canon, 'x'), SecretNotFoundError)
  assert.ok(!(await names()).includes(canon))
})

test('bad input is a 4xx {code,message} and writes nothing', { timeout: 60_000 }, async () => {
  await ctx.ready
  const name = `dup-${tag}`
  assert.equal((await api('POST', '/secrets', { name, value: 'v' })).status, 201)
  const cases = [
    [{ name, value: 'v' }, 409, /already exists/],
    [{ name: name.toUpperCase(), value: 'v' }, 409, /already exists/],
    [{ name: `bad name ${tag}`, value: 'v' }, 400, /invalid secret name/],
    [{ name: `sec_${tag}`, value: 'v' }, 400, /reserved/],
    [{ name: '', value: 'v' }, 400, /invalid secret name/],
    [{ name: `empty-${tag}`, value: '' }, 400, /must not be empty/],
    [{ name: `big-${tag}`, value: 'Q'.repeat(64 * 1024 + 1) }, 400, /limit is 65536/],
    [{ name: `md-${tag}`, value: 'v', metadata: { k: 'x'.repeat(1025) } }, 400, /metadata/],
    [{ name: `type-${tag}`, value: 5 }, 400, /value/],
  ]
  for (const [body, status, re] of cases) {
    assertError(await api('POST', '/secrets', body), status, re, JSON.stringify(body).slice(0, 80))
  }
  assertError(await api('POST', `/secrets/${name}`, { value: '' }), 400, /must not be empty/, 'empty update')
  assertError(await api('GET', '/secrets?limit=0'), 400, /limit/, 'limit 0')
  const listed = await names()
  for (const n of ['bad', 'empty', 'big', 'md', 'type']) assert.ok(!listed.includes(`${n}-${tag}`), n)
  assert.equal((await Secret.getInfo(name)).version, 1, 'a refused update adds no version')
  await assert.rejects(Secret.create(name, 'v'), (err) => err.name !== 'SecretNotFoundError' && /already exists/.test(err.message))
  assert.equal(await Secret.destroy(name), true)
})

test('another team\'s secret is not found', { timeout: 60_000 }, async (t) => {
  await ctx.ready
  if (ctx.external) {
    t.skip('needs the server\'s data dir to create team keys')
    return
  }
  const keyB = await ctx.server.createTeamApiKey('e2e-secrets-b')
  const name = `team-${tag}`
  const a = await Secret.create(name, value1)
  t.after(() => Secret.destroy(a.secretId).catch(() => {}))
  const opts = { apiKey: keyB }
  for (const key of [a.secretId, name]) {
    await assert.rejects(Secret.getInfo(key, opts), SecretNotFoundError, key)
    assert.equal(await Secret.exists(key, opts), false, key)
    await assert.rejects(Secret.update(key, 'stolen', opts), SecretNotFoundError, key)
    assert.equal(await Secret.destroy(key, opts), false, key)
  }
  assert.ok(!(await names(keyB)).includes(name))
  // b may use the same name: names are per team
  const b = await Secret.create(name, value2, opts)
  assert.notEqual(b.secretId, a.secretId)
  assert.equal(await Secret.destroy(b.secretId, opts), true)
  assert.equal((await Secret.getInfo(a.secretId)).version, 1, 'a\'s secret untouched')
})

test('network.rules: validated, unknown secrets 400, rules outside allowOut 400', { timeout: 60_000 }, async (t) => {
  await ctx.ready
  const name = `rule-${tag}`
  const s = await Secret.create(name, value1)
  t.after(() => Secret.destroy(s.secretId).catch(() => {}))
  const rules = (domain, header) => ({ [domain]: [{ transform: { headers: { Authorization: header } } }] })
  const cases = [
    [rules('api.example.com', `Bearer ${Secret.fill(`missing-${tag}`)}`), 400, /secret "missing-.*" not found/],
    [rules('bad domain', 'x'), 400, /invalid domain/],
    [rules('api.example.com', 'a\r\nb'), 400, /CR, LF/],
    [rules('api.example.com', '${e2b.identity.tokens.aws}'), 400, /not supported/],
    [rules('*.example.com', `Bearer ${Secret.fill(name)}`), 400, /"\*\.example\.com" is not reachable/],
  ]
  for (const [r, status, re] of cases) {
    for (const p of ['/sandboxes', '/v2/sandboxes']) {
      assertError(await api('POST', p, { templateID: template, network: { rules: r } }), status, re, `${p} ${JSON.stringify(r)}`)
    }
  }
  // the SDK surfaces the refusal
  await assert.rejects(
    within(30_000, 'Sandbox.create with rules', () =>
      Sandbox.create(template, { network: { rules: rules('api.example.com', `Bearer ${Secret.fill(name)}`) } })),
    /is not reachable/,
  )
})

test('values appear in no response, not in the log, not in the clear on disk', { timeout: 60_000 }, async (t) => {
  await ctx.ready
  // this file's earlier tests sent value1/value2; gather every answer now
  const s = await Secret.create(`leak-${tag}`, value1)
  await Secret.update(s.secretId, value2)
  for (const p of ['/secrets', `/secrets/${s.secretId}`, `/secrets/leak-${tag}`]) await api('GET', p)
  await api('POST', `/secrets/${s.secretId}`, { value: value1 })
  await Secret.destroy(s.secretId)
  for (const b of bodies) {
    assert.ok(!b.includes(value1) && !b.includes(value2), `a response carries a value: ${b.slice(0, 200)}`)
  }
  if (ctx.external) {
    t.skip('log and data dir checks need a local server')
    return
  }
  assert.ok(!ctx.server.log.includes(value1) && !ctx.server.log.includes(value2), 'the server log carries a value')
  const dir = ctx.server.dataDir
  const key = path.join(dir, 'secrets.key')
  assert.equal(statSync(key).mode & 0o777, 0o600, 'secrets.key mode')
  // a live secret's value is stored only encrypted
  const live = await Secret.create(`disk-${tag}`, value1)
  t.after(() => Secret.destroy(live.secretId).catch(() => {}))
  for (const f of ['moat.db', 'moat.db-wal']) {
    const p = path.join(dir, f)
    if (existsSync(p)) assert.ok(!readFileSync(p).includes(value1), `${f} holds a value in the clear`)
  }
})
