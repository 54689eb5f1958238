// Lifecycle events and webhooks (E2B's events API, docs/sandbox/
// lifecycle-events-api and lifecycle-events-webhooks): a sandbox driven
// through the official SDK (create, setTimeout, updateNetwork, pause,
// connect, kill) shows up in both events routes in order, a webhook
// receiver gets every event signed as E2B's docs verify it, and another
// team sees none of it. (A receiver that is down for 30 s across a server
// restart: internal/app's TestWebhooksSurviveOutageAndRestart.)
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import crypto from 'node:crypto'

import { Sandbox } from 'e2b'

import { useServer, within, template, sleep } from './harness.mjs'

// Webhook receivers of this file run on loopback, which a server refuses
// unless the operator allows it (the server inherits this environment).
process.env.MOAT_WEBHOOK_ALLOW_CIDR = '127.0.0.1/32'
const ctx = useServer()

const TYPES = ['created', 'killed', 'updated', 'paused', 'resumed', 'checkpointed'].map((t) => `sandbox.lifecycle.${t}`)

// E2B's documented check of a delivery, as its docs write it.
function verifyWebhookSignature(secret, payload, payloadSignature) {
  const expectedSignatureRaw = crypto.createHash('sha256').update(secret + payload).digest('base64')
  const expectedSignature = expectedSignatureRaw.replace(/=+$/, '')
  return expectedSignature == payloadSignature
}

async function api(method, path, body, apiKey = ctx.apiKey) {
  const res = await within(30_000, `${method} ${path}`, () =>
    fetch(ctx.url + path, {
      method,
      headers: { 'X-API-Key': apiKey, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  )
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : null }
}

const short = (evs) => evs.map((e) => e.type.replace('sandbox.lifecycle.', ''))

// receiver is a webhook endpoint on loopback that keeps each delivery and
// whether its signature verified.
async function receiver(t, secret) {
  const got = []
  const srv = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      got.push({ ok: verifyWebhookSignature(secret, body, req.headers['e2b-signature']), headers: req.headers, event: JSON.parse(body) })
      res.writeHead(200).end()
    })
  })
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve))
  t.after(() => srv.close())
  return { url: `http://127.0.0.1:${srv.address().port}/hook`, got }
}

test('a sandbox\'s life is listed by the events API and delivered, signed, to a webhook', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  if (ctx.external) {
    t.skip('needs a server started with --webhook-allow-cidr for its loopback receiver (not with MOAT_E2E_API_URL)')
    return
  }
  const secret = crypto.randomUUID()
  const recv = await receiver(t, secret)
  const hook = await api('POST', '/events/webhooks', { name: 'e2e', url: recv.url, enabled: true, events: TYPES, signatureSecret: secret })
  assert.equal(hook.status, 201, JSON.stringify(hook.body))
  assert.equal(hook.body.signatureSecret, undefined, 'the secret is never returned')
  t.after(() => api('DELETE', `/events/webhooks/${hook.body.id}`))

  const sbx = await within(120_000, 'Sandbox.create', () => Sandbox.create(template, { metadata: { suite: 'events' }, timeoutMs: 300_000 }))
  const id = sbx.sandboxId
  await within(30_000, 'setTimeout', () => sbx.setTimeout(600_000))
  await within(30_000, 'updateNetwork', () => sbx.updateNetwork({ denyOut: ['0.0.0.0/0'] }))
  await within(120_000, 'pause', () => sbx.pause())
  await within(120_000, 'Sandbox.connect (resume)', () => Sandbox.connect(id))
  await within(60_000, 'kill', () => sbx.kill())
  const life = ['created', 'updated', 'updated', 'paused', 'resumed', 'killed']

  const mine = await api('GET', `/events/sandboxes/${id}?orderAsc=true`)
  assert.equal(mine.status, 200)
  assert.deepEqual(short(mine.body), life, 'GET /events/sandboxes/{id}')
  const killed = mine.body.at(-1)
  assert.equal(killed.sandboxId, id)
  assert.equal(killed.eventData.kill_reason, 'request')
  assert.deepEqual(killed.eventData.sandbox_metadata, { suite: 'events' })
  assert.notEqual(mine.body[0].sandboxExecutionId, killed.sandboxExecutionId, 'a resume starts a new execution')
  const team = await api('GET', '/events/sandboxes?limit=100')
  assert.deepEqual(short(team.body.filter((e) => e.sandboxId === id)), [...life].reverse(), 'GET /events/sandboxes, newest first')
  const kills = await api('GET', '/events/sandboxes?types=sandbox.lifecycle.killed&limit=100')
  assert.ok(kills.body.length >= 1 && kills.body.every((e) => e.type === 'sandbox.lifecycle.killed'))

  // Deliveries arrive after the operations, never holding them up.
  for (let i = 0; i < 300 && recv.got.filter((d) => d.event.sandboxId === id).length < life.length; i++) await sleep(100)
  const delivered = recv.got.filter((d) => d.event.sandboxId === id)
  assert.deepEqual(short(delivered.map((d) => d.event)), life, 'deliveries')
  assert.ok(delivered.every((d) => d.ok), 'every e2b-signature verifies')
  assert.ok(delivered.every((d) => d.headers['e2b-webhook-id'] === hook.body.id && d.headers['e2b-signature-version'] === 'v1'))
  assert.equal(new Set(delivered.map((d) => d.headers['e2b-delivery-id'])).size, delivered.length, 'one delivery ID each')
  assert.deepEqual(delivered.map((d) => d.event.id), mine.body.map((e) => e.id), 'the API lists what was delivered')

  // Another team: no events, no webhooks.
  const other = await ctx.server.createTeamApiKey('e2e-events-other')
  for (const path of [`/events/sandboxes/${id}`, '/events/sandboxes', '/events/webhooks']) {
    const r = await api('GET', path, undefined, other)
    assert.equal(r.status, 200, path)
    assert.deepEqual(r.body, [], `another team's ${path}`)
  }
  assert.equal((await api('GET', `/events/webhooks/${hook.body.id}`, undefined, other)).status, 404)
})

test('bad webhooks and event queries get 400 naming the problem', { timeout: 60_000 }, async () => {
  await ctx.ready
  for (const [body, word] of [
    [{ url: 'https://hooks.example.com/x', events: TYPES }, 'signatureSecret'],
    [{ url: 'https://hooks.example.com/x', events: ['sandbox.lifecycle.exploded'], signatureSecret: 's' }, 'exploded'],
    [{ url: 'http://169.254.169.254/latest', events: TYPES, signatureSecret: 's' }, '169.254.169.254'],
  ]) {
    const r = await api('POST', '/events/webhooks', body)
    assert.equal(r.status, 400, JSON.stringify(r.body))
    assert.equal(r.body.code, 400)
    assert.match(r.body.message, new RegExp(word.replace(/\./g, '\\.')))
  }
  for (const q of ['limit=0', 'limit=101', 'offset=-1', 'types=nope']) {
    assert.equal((await api('GET', `/events/sandboxes?${q}`)).status, 400, q)
  }
})
