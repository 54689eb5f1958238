// Custom templates (issue 10): the official SDK's Template.build against
// Moat, on both runtimes (on a microVM server RUN and COPY steps run in a
// container build sandbox; the built root filesystem becomes a microVM
// template). A template built fromTemplate with setEnvs / runCmd /
// setWorkdir / setUser gives its sandboxes that env, working directory and
// user and the files its commands made (run in a build sandbox, as "user"
// unless told otherwise); the build log (command output included) reaches
// onBuildLogs; a failing runCmd fails the build naming the step and its
// exit code and registers nothing; the template belongs to the building
// team (another team neither finds its alias nor starts it). copy: the
// SDK uploads the files to Moat's signed upload URL, and they land in the
// template with the owner and mode asked for. setStartCmd: each create
// starts the command and answers once the ready command exits 0 (a web
// server answers through Moat's proxy at once). fromDockerfile: the SDK
// turns a Dockerfile into steps; multi-line RUN, ENV and COPY apply.
//
// fromImage: this machine reaches no public registry, so the test builds
// and starts ./registry (an in-process go-containerregistry registry,
// with or without basic auth, serving a busybox image and a Debian image
// made from the base template's root filesystem) and builds from it with
// and without credentials. The Debian build installs a package with
// aptInstall from the Debian mirror and is registered as `e2e-custom`,
// which scripts/test.sh then runs the commands, files and isolation
// suites on (MOAT_E2E_TEMPLATE). Its rebuild is all cached layers; a
// rebuild with the last step changed reruns only that step.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'

import { Sandbox, Template, waitForFile, waitForPort } from 'e2b'

import { useServer, within, template, repoRoot, dataDir } from './harness.mjs'

const ctx = useServer()
const runtimes = (process.env.MOAT_E2E_RUNTIME || 'container').split(',')

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
  // The tag makes the step new in every run: its output is in this build's
  // log rather than a layer cached by an earlier run.
  tpl = tpl.runCmd(`echo hi > /tmp/x && echo "built by $(whoami) with A=$A in $(pwd)" # ${randomUUID()}`)
  tpl = tpl.setWorkdir('/tmp').setUser('root')
  tpl = tpl.runCmd(['mkdir -p /opt/made', 'echo root > /opt/made/by'])
  const built = await within(300_000, 'Template.build', () =>
    Template.build(tpl, { alias: name, cpuCount: 1, memoryMB: 512, onBuildLogs: (e) => logs.push(e) }),
  )
  t.after(() => deleteTemplate(built.templateId))
  assert.equal(built.alias, name)
  assert.ok(built.templateId && built.buildId, JSON.stringify(built))
  const text = logs.map((e) => String(e.message)).join('\n')
  assert.match(text, /FROM template /, text)
  assert.match(text, /ENV A 1 GREETING hello world/, text)
  assert.match(text, /built by user with A=1 in \/home\/user/, text)
  assert.match(text, /build finished/, text)
  for (const e of logs) assert.ok(e.timestamp instanceof Date && !Number.isNaN(e.timestamp.getTime()), String(e))

  assert.equal(await within(30_000, 'Template.exists', () => Template.exists(name)), true)

  const sbx = await within(120_000, 'Sandbox.create(alias)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  const r = await within(60_000, 'run', () => sbx.commands.run('echo "$A|$GREETING|$(pwd)|$(whoami)"'))
  assert.equal(r.stdout.trim(), '1|hello world|/tmp|root')
  const f = await within(60_000, 'files', () =>
    sbx.commands.run('cat /tmp/x /opt/made/by; stat -c %U /tmp/x /opt/made/by'),
  )
  assert.equal(f.stdout.trim(), 'hi\nroot\nuser\nroot')
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
      assert.match(String(err?.message), /step 2 \(RUN\): the command exited with code 1/)
      return true
    },
  )
  assert.match(logs.map((e) => String(e.message)).join('\n'), /about to fail/)
  assert.equal(await within(30_000, 'Template.exists', () => Template.exists(name)), false)
  await assert.rejects(
    within(60_000, 'create from the failed build', () => Sandbox.create(name, { timeoutMs: 60_000 })),
    (err) => /not found/i.test(String(err?.message)),
  )
})

test('copy: the SDK uploads to Moat, the files land where E2B puts them', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  const dir = mkdtempSync(path.join(tmpdir(), 'moat-e2e-copy-'))
  const tag = randomUUID() // new content, new hash: the first upload really happens
  writeFileSync(path.join(dir, 'hello.txt'), `hello ${tag}\n`)
  mkdirSync(path.join(dir, 'app', 'lib'), { recursive: true })
  writeFileSync(path.join(dir, 'app', 'main.py'), 'print(1)\n')
  writeFileSync(path.join(dir, 'app', 'lib', 'util.py'), 'x = 1\n')
  writeFileSync(path.join(dir, 'app', 'notes.txt'), 'n\n')
  symlinkSync('/etc/hostname', path.join(dir, 'link'))
  const name = alias('copy')
  const logs = []
  // E2B's copy script, case by case: a directory's contents go into the
  // destination with or without a trailing slash; a file to the
  // destination, or into it when it ends in "/" or is a directory; a glob's
  // matches into the destination; a symlink as a symlink; an existing
  // directory keeps its owner.
  const build = () =>
    Template.build(
      Template({ fileContextPath: dir })
        .fromTemplate(template)
        .copy('hello.txt', '/home/user/hello.txt')
        .copy('app', '/opt/app', { mode: 0o600 })
        .copy('app', '/home/user/app/')
        .copy('app/*.py', '/home/user/py/')
        .copy('link', '/home/user/link')
        .setUser('root')
        .copy('hello.txt', '/etc/greetings/')
        .copy('hello.txt', '/usr/local')
        .copy('app/lib', '/usr/local/'),
      { alias: name, onBuildLogs: (e) => logs.push(e) },
    )
  const built = await within(300_000, 'Template.build copy', build)
  t.after(() => deleteTemplate(built.templateId))
  // The SDK got a signed URL from Moat and uploaded the tar there.
  assert.match(logs.map((e) => String(e.message)).join('\n'), /Uploaded 'hello.txt'/)
  // The files are where E2B puts them in a sandbox of every runtime the
  // server runs (a gvisor,vm server: in a gVisor sandbox and a microVM,
  // whose disk is made from the built tree).
  for (const rt of runtimes) {
    const sbx = await within(300_000, `Sandbox.create(copy) on ${rt}`, () =>
      Sandbox.create(name, { timeoutMs: 300_000, metadata: { 'moat.runtime': rt } }))
    t.after(() => sbx.kill().catch(() => {}))
    const r = await within(60_000, `check on ${rt}`, () =>
      sbx.commands.run(
        'cat /home/user/hello.txt /opt/app/main.py /opt/app/lib/util.py /etc/greetings/hello.txt; ' +
          'stat -c "%U %a %n" /home/user/hello.txt /opt/app/main.py /opt/app/lib/util.py /etc/greetings/hello.txt; ' +
          'cd /home/user && find app py -print | sort; readlink link; ' +
          'stat -c "%U %n" /usr/local /usr/local/hello.txt /usr/local/util.py',
      ),
    )
    assert.equal(
      r.stdout.trim(),
      [
        `hello ${tag}`, 'print(1)', 'x = 1', `hello ${tag}`,
        'user 644 /home/user/hello.txt', 'user 600 /opt/app/main.py', 'user 600 /opt/app/lib/util.py',
        'root 644 /etc/greetings/hello.txt',
        'app', 'app/lib', 'app/lib/util.py', 'app/main.py', 'app/notes.txt', 'py', 'py/main.py',
        '/etc/hostname',
        'root /usr/local', 'root /usr/local/hello.txt', 'root /usr/local/util.py',
      ].join('\n'),
      `the copied files in a sandbox on ${rt}`,
    )
    await sbx.kill()
  }
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

// startRegistry builds and starts ./registry with args (e.g. -user,
// -pass, -rootfs); it answers its address.
async function startRegistry(t, args = []) {
  const bin = path.join(mkdtempSync(path.join(tmpdir(), 'moat-e2e-registry-')), 'registry')
  execFileSync('go', ['build', '-o', bin, './test/e2e/registry'], { cwd: repoRoot, stdio: 'inherit' })
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] })
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
  const host = await startRegistry(t, ['-user', 'e2e', '-pass', 's3cret'])
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
  tpl = tpl.runCmd('echo "$FROM_IMAGE $A in $(pwd) as $(whoami)" > /tmp/note')
  const built = await within(300_000, 'Template.build fromImage', () => Template.build(tpl, { alias: name }))
  t.after(() => deleteTemplate(built.templateId))
  const sbx = await within(180_000, 'Sandbox.create(image)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  // The image's ENV and WORKDIR are the template's defaults.
  const r = await within(60_000, 'run', () => sbx.commands.run('echo "$FROM_IMAGE|$A|$(pwd)|$(whoami)"'))
  assert.equal(r.stdout.trim(), 'yes|1|/srv|user')
  assert.equal((await within(30_000, 'read note', () => sbx.files.read('/tmp/note'))).trim(), 'yes 1 in /srv as user')
})

// throughProxy requests port's root page of sandbox id through Moat's
// sandbox front door (the headers the SDKs use instead of a hostname).
async function throughProxy(id, port) {
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/`, {
    headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(port) },
  })
  return { status: res.status, body: await res.text() }
}

test('setStartCmd with waitForPort: the server answers through the proxy at once after create', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  const name = alias('web')
  const built = await within(300_000, 'Template.build web', () =>
    Template.build(
      Template()
        .fromTemplate(template)
        .setWorkdir('/home/user')
        .runCmd('echo "<h1>moat e2e</h1>" > /home/user/index.html')
        .setStartCmd('python3 -m http.server 8000', waitForPort(8000)),
      { alias: name },
    ),
  )
  t.after(() => deleteTemplate(built.templateId))
  const sbx = await within(180_000, 'Sandbox.create(web)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  const r = await throughProxy(sbx.sandboxId, 8000)
  assert.equal(r.status, 200, r.body)
  assert.match(r.body, /moat e2e/)
})

// The Debian image: the base template's root filesystem pushed as an OCI
// image, as a user's own registry would serve theirs.
const debianRootfs = path.join(dataDir, 'templates', 'base', 'rootfs')

// buildLog joins the messages a build sent to onBuildLogs.
const buildLog = (logs) => logs.map((e) => String(e.message)).join('\n')

test('fromImage + aptInstall + copy + envs + workdir + user + runCmd; rebuilds reuse cached layers', { timeout: 1_200_000 }, async (t) => {
  await ctx.ready
  if (!existsSync(debianRootfs)) {
    t.skip(`needs the base template's rootfs at ${debianRootfs} for the Debian test image`)
    return
  }
  const host = await startRegistry(t, ['-user', 'e2e', '-pass', 's3cret', '-rootfs', debianRootfs])
  const dir = mkdtempSync(path.join(tmpdir(), 'moat-e2e-custom-'))
  mkdirSync(path.join(dir, 'app'), { recursive: true })
  writeFileSync(path.join(dir, 'app', 'main.py'), 'import os\nprint("mode", os.environ["APP_MODE"])\n')
  const steps = (last) =>
    Template({ fileContextPath: dir })
      .fromImage(`${host}/test/debian:12`, { username: 'e2e', password: 's3cret' })
      .aptInstall(['jq'])
      .copy('app', '/opt/app')
      .setEnvs({ APP_MODE: 'e2e' })
      .setWorkdir('/opt/app')
      .setUser('user')
      .runCmd(last)
  const lastStep = 'python3 main.py > /home/user/out.txt && echo "ran as $(whoami) in $(pwd)"'
  // e2e-custom stays: scripts/test.sh runs the commands, files and
  // isolation suites on it next.
  const build = async (tpl, name) => {
    const logs = []
    const start = Date.now()
    const built = await within(900_000, `Template.build ${name}`, () =>
      Template.build(tpl, { alias: name, onBuildLogs: (e) => logs.push(e) }),
    )
    return { built, text: buildLog(logs), ms: Date.now() - start }
  }
  const first = await build(steps(lastStep), 'e2e-custom')
  // The first build of this run either ran the steps or (a second
  // runtime's run on the same data dir) found them all cached.
  assert.match(first.text, /apt-get install|CACHED.*apt-get/, first.text)
  const sbx = await within(180_000, 'Sandbox.create(e2e-custom)', () => Sandbox.create('e2e-custom', { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  const r = await within(60_000, 'check', () =>
    sbx.commands.run('jq -n --arg m "$APP_MODE" \'{mode:$m}\' -c; cat /home/user/out.txt; whoami; pwd; stat -c %U /opt/app/main.py'),
  )
  assert.equal(r.stdout.trim(), '{"mode":"e2e"}\nmode e2e\nuser\n/opt/app\nuser')

  // The same template again: every step is a cached layer.
  const again = await build(steps(lastStep), 'e2e-custom')
  for (const step of ['apt-get install', 'COPY app', 'python3 main.py']) {
    assert.match(again.text, new RegExp(`CACHED.*${step}`), again.text)
  }
  // The last step changed: the earlier layers are reused, it runs.
  const changedName = alias('custom-changed')
  const mark = `changed-step-ran-${randomUUID().slice(0, 8)}` // new in every run: never cached
  const changed = await build(steps(`${lastStep} && echo ${mark}`), changedName)
  t.after(() => deleteTemplate(changed.built.templateId))
  assert.match(changed.text, /CACHED.*apt-get install/, changed.text)
  assert.match(changed.text, /CACHED.*COPY app/, changed.text)
  assert.doesNotMatch(changed.text, new RegExp(`CACHED.*${mark}`), changed.text)
  assert.match(changed.text, new RegExp(`\n${mark}`), changed.text)
  console.log(`# template builds: first ${first.ms} ms, cached rebuild ${again.ms} ms, last step changed ${changed.ms} ms`)
})

test('Template.fromDockerfile: multi-line RUN, ENV and COPY', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  if (!existsSync('/usr/bin/busybox')) {
    t.skip('needs /usr/bin/busybox for the test image (apt-get install busybox-static)')
    return
  }
  const host = await startRegistry(t) // no credentials: FROM pulls anonymously
  const dir = mkdtempSync(path.join(tmpdir(), 'moat-e2e-dockerfile-'))
  writeFileSync(path.join(dir, 'hello.txt'), 'hi from the context\n')
  const dockerfile = [
    `FROM ${host}/test/busybox:1`,
    // The SDK splits ENV on whitespace before it sees quotes (E2B's
    // parser), so the values have no spaces.
    'ENV GREETING=hello-docker \\',
    '    OTHER=2',
    'COPY hello.txt /opt/hello.txt',
    'RUN mkdir -p /opt/made && \\',
    '    echo "$GREETING" > /opt/made/greeting && \\',
    '    cat /opt/hello.txt >> /opt/made/greeting',
    'WORKDIR /opt/made',
    '',
  ].join('\n')
  const name = alias('dockerfile')
  const logs = []
  const built = await within(300_000, 'Template.build fromDockerfile', () =>
    Template.build(Template({ fileContextPath: dir }).fromDockerfile(dockerfile), {
      alias: name,
      onBuildLogs: (e) => logs.push(e),
    }),
  )
  t.after(() => deleteTemplate(built.templateId))
  const sbx = await within(180_000, 'Sandbox.create(dockerfile)', () => Sandbox.create(name, { timeoutMs: 300_000 }))
  t.after(() => sbx.kill().catch(() => {}))
  const r = await within(60_000, 'check', () => sbx.commands.run('cat greeting; echo "$OTHER|$(pwd)|$(whoami)"'))
  assert.equal(r.stdout.trim(), 'hello-docker\nhi from the context\n2|/opt/made|user')
})

// The SDK sends a Dockerfile's FROM as fromImage. A name that is a
// template of the team is that template (Docker uses a local image before
// it pulls), and E2B's own base images stand in as the built-ins when no
// registry serves them (none does here).
test('Template.fromDockerfile: FROM a template and FROM e2bdev/base build through the SDK', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  for (const from of [template, 'e2bdev/base:latest']) {
    const name = alias('from')
    const logs = []
    const built = await within(300_000, `Template.build FROM ${from}`, () =>
      Template.build(Template().fromDockerfile(`FROM ${from}\nRUN echo "from ${from}" > /home/user/from.txt\n`), {
        alias: name,
        onBuildLogs: (e) => logs.push(e),
      }),
    )
    t.after(() => deleteTemplate(built.templateId))
    const text = logs.map((e) => String(e.message)).join('\n')
    if (from.startsWith('e2bdev/')) assert.match(text, /the built-in template base stands in/, text)
    // Template.getTags: E2B's implicit "default" tag on this build.
    const tags = await within(30_000, 'Template.getTags', () => Template.getTags(built.templateId))
    assert.deepEqual(tags.map((g) => [g.tag, g.buildId]), [['default', built.buildId]])
    const sbx = await within(180_000, `Sandbox.create(FROM ${from})`, () => Sandbox.create(name, { timeoutMs: 120_000 }))
    t.after(() => sbx.kill().catch(() => {}))
    const r = await within(60_000, 'check', () => sbx.commands.run('cat /home/user/from.txt'))
    assert.equal(r.stdout.trim(), `from ${from}`)
  }
})
