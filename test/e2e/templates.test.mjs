// Custom templates (issue 10): the official SDK's Template.build against
// Moat. A template built fromTemplate with setEnvs / runCmd / setWorkdir /
// setUser gives its sandboxes that env, working directory and user and
// the files its commands made (run in a build sandbox, as "user" unless
// told otherwise); the build log (command output included) reaches
// onBuildLogs; a failing runCmd fails the build naming the step and its
// exit code and registers nothing; the template belongs to the building
// team (another team neither finds its alias nor starts it). copy: the
// SDK uploads the files to Moat's signed upload URL, and they land in the
// template with the owner and mode asked for. setStartCmd: each create
// starts the command and answers once the ready command exits 0.
//
// With MOAT_E2E_RUNTIME=vm, runCmd, copy and setStartCmd are refused
// (501: they need the container runtime) and the tests check that
// instead.
//
// fromImage: this machine reaches no public registry, so the test builds
// and starts ./registry (an in-process go-containerregistry registry with
// basic auth serving a busybox image) and builds from it with and without
// credentials.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'

import { Sandbox, Template, waitForFile } from 'e2b'

import { useServer, within, template, repoRoot } from './harness.mjs'

const ctx = useServer()
const runSupported = (process.env.MOAT_E2E_RUNTIME || 'container') === 'container'

function alias(what) {
  return `e2e-${what}-${randomUUID().slice(0, 8)}`
}

// deleteTemplate removes a built template over the REST API (the SDK
// has no call for it).
async function deleteTemplate(templateId, apiKey = process.env.E2B_API_KEY) {
  const res = await fetch(`${process.env.E2B_API_URL}/templates/${templateId}`, {
    method: 'DELETE',
    headers: { 'X-API-KEY': apiKey },
  })
  return res.status
}

test('Template.build fromTemplate with env, runCmd, workdir and user', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  const name = alias('tpl')
  const logs = []
  let tpl = Template().fromTemplate(template).setEnvs({ A: '1', GREETING: 'hello world' })
  if (runSupported) {
    tpl = tpl.runCmd('echo hi > /tmp/x && echo "built by $(whoami) with A=$A in $(pwd)"')
  }
  tpl = tpl.setWorkdir('/tmp').setUser('root')
  if (runSupported) tpl = tpl.runCmd(['mkdir -p /opt/made', 'echo root > /opt/made/by'])
  const built = await within(300_000, 'Template.build', () =>
    Template.build(tpl, { alias: name, cpuCount: 1, memoryMB: 512, onBuildLogs: (e) => logs.push(e) }),
  )
  t.after(() => deleteTemplate(built.templateId))
  assert.equal(built.alias, name)
  assert.ok(built.templateId && built.buildId, JSON.stringify(built))
  const text = logs.map((e) => String(e.message)).join('\n')
  assert.match(text, /FROM template /, text)
  assert.match(text, /ENV A 1 GREETING hello world/, text)
  if (runSupported) assert.match(text, /built by user with A=1 in \/home\/user/, text)
  assert.match(text, /build finished/, text)
  for (const e of logs) assert.ok(e.timestamp instanceof Date && !Number.isNaN(e.timestamp.getTime()), String(e))

  assert.equal(await within(30_000, 'Template.exists', () => Template.exists(name)), true)

  const sbx = await within(120_000, 'Sandbox.create(alias)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  const r = await within(60_000, 'run', () => sbx.commands.run('echo "$A|$GREETING|$(pwd)|$(whoami)"'))
  assert.equal(r.stdout.trim(), '1|hello world|/tmp|root')
  if (runSupported) {
    const f = await within(60_000, 'files', () =>
      sbx.commands.run('cat /tmp/x /opt/made/by; stat -c %U /tmp/x /opt/made/by'),
    )
    assert.equal(f.stdout.trim(), 'hi\nroot\nuser\nroot')
  }
  // The create's own envs win over the template's.
  const sbx2 = await within(120_000, 'Sandbox.create(alias, envs)', () =>
    Sandbox.create(name, { envs: { A: 'mine' }, timeoutMs: 300_000 }),
  )
  t.after(() => sbx2.kill().catch(() => {}))
  const r2 = await within(60_000, 'run', () => sbx2.commands.run('echo "$A|$GREETING"'))
  assert.equal(r2.stdout.trim(), 'mine|hello world')

  // Another team: no such alias, no such template.
  if (!ctx.external) {
    const keyB = await ctx.server.createTeamApiKey('e2e-tpl-b')
    assert.equal(await within(30_000, 'exists as b', () => Template.exists(name, { apiKey: keyB })), false)
    await assert.rejects(
      within(60_000, 'create as b', () => Sandbox.create(name, { apiKey: keyB, timeoutMs: 60_000 })),
      (err) => /not found/i.test(String(err?.message)),
    )
    assert.equal(await deleteTemplate(built.templateId, keyB), 404)
  }
})

test('a failing runCmd fails the build naming the step; nothing is registered', { timeout: 300_000 }, async () => {
  await ctx.ready
  const name = alias('run')
  const logs = []
  await assert.rejects(
    within(240_000, 'Template.build runCmd false', () =>
      Template.build(Template().fromTemplate(template).setEnvs({ A: '1' }).runCmd('echo about to fail; false'), {
        alias: name,
        onBuildLogs: (e) => logs.push(e),
      }),
    ),
    (err) => {
      if (runSupported) {
        assert.match(String(err?.message), /step 2 \(RUN\): the command exited with code 1/)
      } else {
        assert.match(String(err?.message), /step 2 \(RUN\)/)
        assert.match(String(err?.message), /container runtime/)
      }
      return true
    },
  )
  if (runSupported) assert.match(logs.map((e) => String(e.message)).join('\n'), /about to fail/)
  assert.equal(await within(30_000, 'Template.exists', () => Template.exists(name)), false)
  await assert.rejects(
    within(60_000, 'create from the failed build', () => Sandbox.create(name, { timeoutMs: 60_000 })),
    (err) => /not found/i.test(String(err?.message)),
  )
})

test('copy: the SDK uploads to Moat, the files land in the template', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  const dir = mkdtempSync(path.join(tmpdir(), 'moat-e2e-copy-'))
  const tag = randomUUID() // new content, new hash: the first upload really happens
  writeFileSync(path.join(dir, 'hello.txt'), `hello ${tag}\n`)
  mkdirSync(path.join(dir, 'app', 'lib'), { recursive: true })
  writeFileSync(path.join(dir, 'app', 'main.py'), 'print(1)\n')
  writeFileSync(path.join(dir, 'app', 'lib', 'util.py'), 'x = 1\n')
  const name = alias('copy')
  const logs = []
  const build = () =>
    Template.build(
      Template({ fileContextPath: dir })
        .fromTemplate(template)
        .copy('hello.txt', '/home/user/hello.txt')
        .copy('app', '/opt/app', { mode: 0o600 })
        .setUser('root')
        .copy('hello.txt', '/etc/greetings/'),
      { alias: name, onBuildLogs: (e) => logs.push(e) },
    )
  if (!runSupported) {
    await assert.rejects(within(120_000, 'Template.build copy', build), /step 1 \(COPY\).*container runtime/)
    return
  }
  const built = await within(300_000, 'Template.build copy', build)
  t.after(() => deleteTemplate(built.templateId))
  // The SDK got a signed URL from Moat and uploaded the tar there.
  assert.match(logs.map((e) => String(e.message)).join('\n'), /Uploaded 'hello.txt'/)
  const sbx = await within(120_000, 'Sandbox.create(copy)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  const r = await within(60_000, 'check', () =>
    sbx.commands.run(
      'cat /home/user/hello.txt /opt/app/main.py /opt/app/lib/util.py /etc/greetings/hello.txt; ' +
        'stat -c "%U %a %n" /home/user/hello.txt /opt/app/main.py /opt/app/lib/util.py /etc/greetings/hello.txt',
    ),
  )
  assert.equal(
    r.stdout.trim(),
    [
      `hello ${tag}`, 'print(1)', 'x = 1', `hello ${tag}`,
      'user 644 /home/user/hello.txt', 'user 600 /opt/app/main.py', 'user 600 /opt/app/lib/util.py',
      'root 644 /etc/greetings/hello.txt',
    ].join('\n'),
  )
  // A second build of the same files: the SDK finds them present.
  logs.length = 0
  await within(300_000, 'Template.build copy again', build)
  assert.match(logs.map((e) => String(e.message)).join('\n'), /Skipping upload of 'hello.txt', already cached/)
})

test('setStartCmd: every create starts it and answers once the ready command succeeds', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  const name = alias('start')
  const build = () =>
    Template.build(
      Template()
        .fromTemplate(template)
        .setEnvs({ WHO: 'started' })
        .setStartCmd('sleep 2; echo "$WHO by $(whoami)" > /tmp/ready-file; exec sleep infinity', waitForFile('/tmp/ready-file')),
      { alias: name },
    )
  if (!runSupported) {
    await assert.rejects(within(120_000, 'Template.build setStartCmd', build), /startCmd.*container runtime/)
    return
  }
  const built = await within(300_000, 'Template.build setStartCmd', build)
  t.after(() => deleteTemplate(built.templateId))
  const start = Date.now()
  const sbx = await within(180_000, 'Sandbox.create(start)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  assert.ok(Date.now() - start >= 2000, 'create answered before the ready command could succeed')
  const r = await within(60_000, 'check', () => sbx.commands.run('cat /tmp/ready-file; pgrep -x sleep >/dev/null && echo running'))
  assert.equal(r.stdout.trim(), 'started by user\nrunning')
})

test('unknown bases are refused', { timeout: 300_000 }, async () => {
  await ctx.ready
  await assert.rejects(
    within(120_000, 'Template.build unknown base', () =>
      Template.build(Template().fromTemplate('no-such-template-' + randomUUID().slice(0, 8)), { alias: alias('nobase') }),
    ),
    /not found/,
  )
})

// startRegistry builds and starts ./registry; it answers its address.
async function startRegistry(t, user, pass) {
  const bin = path.join(mkdtempSync(path.join(tmpdir(), 'moat-e2e-registry-')), 'registry')
  execFileSync('go', ['build', '-o', bin, './test/e2e/registry'], { cwd: repoRoot, stdio: 'inherit' })
  const proc = spawn(bin, ['-user', user, '-pass', pass], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.after(() => proc.kill('SIGKILL'))
  return within(
    60_000,
    'registry ready',
    new Promise((resolve, reject) => {
      let out = ''
      proc.stdout.on('data', (d) => {
        out += d
        const m = /ready (\S+)/.exec(out)
        if (m) resolve(m[1])
      })
      proc.on('exit', (code) => reject(new Error(`registry exited with ${code}`)))
    }),
  )
}

test('fromImage with registry credentials (and runCmd in the image)', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  if (!existsSync('/usr/bin/busybox')) {
    t.skip('needs /usr/bin/busybox for the test image (apt-get install busybox-static)')
    return
  }
  const host = await startRegistry(t, 'e2e', 's3cret')
  const ref = `${host}/test/busybox:1`
  // Without credentials the registry refuses: the build fails, naming it.
  await assert.rejects(
    within(120_000, 'Template.build fromImage anonymous', () =>
      Template.build(Template().fromImage(ref), { alias: alias('img-anon') }),
    ),
    /authentication/,
  )
  const name = alias('img')
  let tpl = Template().fromImage(ref, { username: 'e2e', password: 's3cret' }).setEnvs({ A: '1' })
  if (runSupported) tpl = tpl.runCmd('echo "$FROM_IMAGE $A in $(pwd) as $(whoami)" > /tmp/note')
  const built = await within(300_000, 'Template.build fromImage', () => Template.build(tpl, { alias: name }))
  t.after(() => deleteTemplate(built.templateId))
  const sbx = await within(180_000, 'Sandbox.create(image)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  // The image's ENV and WORKDIR are the template's defaults.
  const r = await within(60_000, 'run', () => sbx.commands.run('echo "$FROM_IMAGE|$A|$(pwd)|$(whoami)"'))
  assert.equal(r.stdout.trim(), 'yes|1|/srv|user')
  if (runSupported) {
    assert.equal((await within(30_000, 'read note', () => sbx.files.read('/tmp/note'))).trim(), 'yes 1 in /srv as user')
  }
})
