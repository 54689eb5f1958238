// The web console (/console) in a real browser: Debian's chromium driven by
// playwright-core. Log in with the key (a wrong one is refused), see a
// sandbox appear, its CPU/memory chart, a terminal that runs `echo hi`, the
// sandbox's log with the terminal's shell started, a template's build log,
// and kill the sandbox from the UI.
//
// Screenshots go to $MOAT_E2E_LOG_DIR/console (else $TMPDIR/moat-console).
// CHROMIUM overrides the browser (default /usr/bin/chromium).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdirSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { chromium } from 'playwright-core'
import { randomUUID } from 'node:crypto'
import { Sandbox, Template } from 'e2b'

import { useServer, createSandbox, within, template } from './harness.mjs'

const ctx = useServer()
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium'
const shots = path.join(process.env.MOAT_E2E_LOG_DIR || path.join(os.tmpdir(), 'moat-console'), 'console')
let browser

before(async () => {
  if (!existsSync(chromiumPath)) throw new Error(`no browser at ${chromiumPath}: apt-get install -y chromium (scripts/setup.sh)`)
  mkdirSync(shots, { recursive: true })
  browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox', '--disable-gpu'] })
})
after(async () => {
  await browser?.close()
})

async function newPage(t) {
  await ctx.ready
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } })
  t.after(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(30_000)
  const errors = []
  page.on('pageerror', (e) => errors.push(e.message))
  page.on('dialog', (d) => d.accept()) // the kill confirmation
  await page.goto(`${ctx.url}/console/`)
  return { page, errors }
}

async function login(page, key) {
  await page.fill('#api-key', key)
  await page.click('button[type=submit]')
}

test('console: a wrong key is refused with a clear message', { timeout: 60_000 }, async (t) => {
  const { page } = await newPage(t)
  await login(page, 'e2b_not_a_key')
  const msg = page.locator('#login-error')
  await msg.filter({ hasText: 'API key refused' }).waitFor()
  assert.match(await msg.textContent(), /^API key refused: .+/)
  assert.equal(await page.locator('#nav').isHidden(), true, 'no navigation without a key')
  await login(page, '')
  assert.equal(await page.locator('#sandboxes').count(), 0, 'an empty key does not log in')
})

test('console: list, chart, terminal, build log, kill', { timeout: 540_000 }, async (t) => {
  const sbx = await createSandbox(t)
  const id = sbx.sandboxId
  const { page, errors } = await newPage(t)
  await login(page, ctx.apiKey)

  const row = page.locator(`#sandboxes tr[data-id="${id}"]`)
  await row.waitFor()
  assert.equal(await row.locator('td.state').textContent(), 'running')
  await page.screenshot({ path: path.join(shots, '1-sandboxes.png') })

  await row.locator('a').click()
  await page.waitForFunction(() => Number(document.querySelector('svg.chart')?.dataset.points) >= 2, null, { timeout: 60_000 })
  const pts = await page.locator('svg.chart polyline.cpu').getAttribute('points')
  assert.ok(pts.split(' ').length >= 2, `cpu line ${pts}`)
  await page.screenshot({ path: path.join(shots, '2-sandbox-chart.png') })

  await page.click('#open-terminal')
  await page.locator('#terminal-status').filter({ hasText: 'connected' }).waitFor()
  await page.locator('#terminal .xterm-helper-textarea').focus()
  await page.keyboard.type('echo hi')
  await page.keyboard.press('Enter')
  // The screen shows the typed line (`... echo hi`) and then a line `hi`.
  await page.waitForFunction(() =>
    [...document.querySelectorAll('#terminal .xterm-rows > div')].some((r) => r.textContent.trim() === 'hi'))
  await page.screenshot({ path: path.join(shots, '3-terminal-echo-hi.png') })
  // Its network policy (the default: internet access, nothing else).
  await page.locator('#sandbox-network', { hasText: 'internet access' }).waitFor()
  // The sandbox's log shows envd starting the terminal's shell (a PTY).
  await page.locator('#sandbox-log').filter({ hasText: /process started .*pty=true/ }).waitFor({ timeout: 30_000 })

  // A template built through the SDK: its build and the build's log,
  // with the RUN step's output.
  const alias = `e2e-console-${randomUUID().slice(0, 8)}`
  const built = await within(300_000, 'Template.build', () =>
    Template.build(Template().fromTemplate(template).runCmd('echo built-for-the-console'), { alias }))
  t.after(() => fetch(`${process.env.E2B_API_URL}/templates/${built.templateId}`, {
    method: 'DELETE', headers: { 'X-API-KEY': process.env.E2B_API_KEY },
  }))
  await page.click('nav a[href="#/templates"]')
  await page.locator('#templates tbody tr a', { hasText: built.templateId }).click()
  await page.locator('#builds tbody tr a', { hasText: built.buildId }).click()
  await page.locator('#build-log pre.log', { hasText: 'built-for-the-console' }).waitFor()
  await page.screenshot({ path: path.join(shots, '4-template-build.png') })

  // The events feed has the sandbox's creation; volumes and secrets load.
  await page.click('nav a[href="#/events"]')
  await page.locator('#events tbody tr', { hasText: id }).first().waitFor()
  for (const p of ['volumes', 'secrets']) {
    await page.click(`nav a[href="#/${p}"]`)
    await page.locator(`main h2:text-is("${p[0].toUpperCase() + p.slice(1)}") ~ :is(table, p.muted:text-is("none"))`).waitFor()
  }

  await page.click('nav a[href="#/"]')
  await row.waitFor()
  await row.locator('button.kill').click()
  await row.waitFor({ state: 'detached' })
  const alive = await within(30_000, 'Sandbox.list', async () => {
    const p = Sandbox.list()
    const items = await p.nextItems()
    return items.some((s) => s.sandboxId === id)
  })
  assert.equal(alive, false, 'the sandbox killed from the UI is gone')
  assert.deepEqual(errors, [], 'no page errors')
})

test('console: API keys of the team: create (shown once), list masked, delete; not the console\'s own', { timeout: 120_000 }, async (t) => {
  const { page, errors } = await newPage(t)
  await login(page, ctx.apiKey)
  await page.locator('#nav').waitFor()
  await page.click('nav a[href="#/api-keys"]')
  await page.fill('#new-key-name', 'console-e2e')
  await page.click('form.inline button[type=submit]')
  const value = (await page.locator('#new-key-value').textContent()).trim()
  assert.match(value, /^e2b_[0-9a-f]{40}$/)
  const row = page.locator('#api-keys tbody tr', { hasText: 'console-e2e' })
  await row.waitFor()
  assert.equal((await page.content()).includes(value), true, 'the value is shown once, right after the create')
  assert.match(await row.locator('td').nth(1).textContent(), new RegExp(`^e2b_${value.slice(4, 10)}…${value.slice(-4)}$`))
  // The new key works against the API; deleted from the console, it no longer does.
  const get = (key) => fetch(`${ctx.url}/v2/sandboxes`, { headers: { 'X-API-KEY': key } }).then((r) => r.status)
  assert.equal(await get(value), 200)
  await row.locator('button.kill').click()
  await row.waitFor({ state: 'detached' })
  assert.equal(await get(value), 401)
  // The key the console runs with refuses to delete itself.
  const mine = page.locator('#api-keys tbody tr', { hasText: `e2b_${ctx.apiKey.slice(4, 10)}…` }).first()
  await mine.locator('button.kill').click()
  await page.locator('#new-key.error', { hasText: 'the one this request is made with' }).waitFor()
  await page.screenshot({ path: path.join(shots, '5-api-keys.png') })
  assert.deepEqual(errors, [], 'no page errors')
})
