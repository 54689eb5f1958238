// envd process service through sandbox.commands: foreground and background
// commands, output, exit codes, env vars, cwd, users, stdin, kill, connect,
// large output and list.
import { test, before } from 'node:test'
import assert from 'node:assert/strict'

import { CommandExitError } from 'e2b'

import { useServer, createSandbox, within, sleep, run } from './harness.mjs'

useServer()

let sbx
before(async () => {
  sbx = await createSandbox(null, { envs: { MOAT_SBX_VAR: 'from-create', SHARED: 'sandbox' } })
}, { timeout: 180_000 })

test('foreground stdout, stderr and exit code 0', { timeout: 120_000 }, async () => {
  const r = await within(60_000, 'run', () => sbx.commands.run('echo out; echo err 1>&2'))
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  assert.equal(r.error, undefined)
})

test('non-zero exit throws CommandExitError with exitCode and stderr', { timeout: 120_000 }, async () => {
  await assert.rejects(
    within(60_000, 'run exit 3', () => sbx.commands.run('echo partial; echo boom 1>&2; exit 3')),
    (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err?.constructor?.name}: ${err?.message}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'boom\n')
      assert.equal(err.stdout, 'partial\n')
      return true
    },
  )
  const r = await run(sbx, 'false')
  assert.equal(r.exitCode, 1)
})

test('callbacks receive output chunks', { timeout: 120_000 }, async () => {
  let out = ''
  let err = ''
  await within(60_000, 'run with callbacks', () =>
    sbx.commands.run('for i in 1 2 3; do echo o$i; echo e$i 1>&2; done', {
      onStdout: (d) => { out += d },
      onStderr: (d) => { err += d },
    }),
  )
  assert.equal(out, 'o1\no2\no3\n')
  assert.equal(err, 'e1\ne2\ne3\n')
})

test('env vars: per-command and from Sandbox.create', { timeout: 120_000 }, async () => {
  const r = await within(60_000, 'run env', () =>
    sbx.commands.run('echo "$MOAT_SBX_VAR|$MOAT_CMD_VAR|$SHARED"', { envs: { MOAT_CMD_VAR: 'per-cmd', SHARED: 'command' } }),
  )
  assert.equal(r.stdout.trim(), 'from-create|per-cmd|command')
  const r2 = await within(60_000, 'run env again', () => sbx.commands.run('echo "$MOAT_SBX_VAR|${MOAT_CMD_VAR:-unset}"'))
  assert.equal(r2.stdout.trim(), 'from-create|unset', 'per-command envs do not persist')
})

test('cwd', { timeout: 120_000 }, async () => {
  assert.equal((await within(60_000, 'pwd /tmp', () => sbx.commands.run('pwd', { cwd: '/tmp' }))).stdout.trim(), '/tmp')
  // A template's WORKDIR is its sandboxes' default (MOAT_E2E_WORKDIR names it).
  const workdir = process.env.MOAT_E2E_WORKDIR || '/home/user'
  assert.equal((await within(60_000, 'pwd default', () => sbx.commands.run('pwd'))).stdout.trim(), workdir)
  const bad = await run(sbx, 'pwd', { cwd: '/does/not/exist' }).catch((e) => e)
  assert.ok(bad instanceof Error || bad.exitCode !== 0, 'a missing cwd is an error')
})

test('user: default user is "user", root on request', { timeout: 120_000 }, async () => {
  assert.equal((await within(60_000, 'whoami', () => sbx.commands.run('whoami'))).stdout.trim(), 'user')
  assert.equal((await within(60_000, 'whoami root', () => sbx.commands.run('whoami', { user: 'root' }))).stdout.trim(), 'root')
  assert.equal((await within(60_000, 'whoami user', () => sbx.commands.run('whoami', { user: 'user' }))).stdout.trim(), 'user')
  assert.equal((await within(60_000, 'HOME root', () => sbx.commands.run('echo $HOME', { user: 'root' }))).stdout.trim(), '/root')
  // The login shell's /etc/profile picks PATH by effective uid (Moat's
  // templates ask bash's EUID instead of forking id -u: same result).
  const rootPath = (await run(sbx, 'echo $PATH', { user: 'root' })).stdout.trim().split(':')
  const userPath = (await run(sbx, 'echo $PATH')).stdout.trim().split(':')
  assert.ok(rootPath.includes('/usr/sbin'), `root's PATH ${rootPath}`)
  assert.ok(userPath.includes('/usr/bin') && !userPath.includes('/usr/sbin'), `user's PATH ${userPath}`)
})

test('background command: wait, stdout, stderr, exit code', { timeout: 120_000 }, async () => {
  let streamed = ''
  const h = await within(30_000, 'start background', () =>
    sbx.commands.run('echo start; sleep 1; echo bg-err 1>&2; echo done; exit 7', {
      background: true,
      onStdout: (d) => { streamed += d },
    }),
  )
  assert.ok(h.pid > 0, `pid ${h.pid}`)
  await assert.rejects(within(30_000, 'wait', () => h.wait()), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err?.constructor?.name}: ${err?.message}`)
    assert.equal(err.exitCode, 7)
    assert.equal(err.stdout, 'start\ndone\n')
    assert.equal(err.stderr, 'bg-err\n')
    return true
  })
  assert.equal(streamed, 'start\ndone\n')
  assert.equal(h.exitCode, 7)
})

test('kill a background process', { timeout: 120_000 }, async () => {
  const h = await within(30_000, 'start sleep', () => sbx.commands.run('sleep 600', { background: true }))
  const listed = await within(30_000, 'list', () => sbx.commands.list())
  assert.ok(listed.some((p) => p.pid === h.pid), 'running process is listed')
  assert.equal(await within(30_000, 'kill', () => h.kill()), true)
  const res = await within(30_000, 'wait after kill', () => h.wait()).catch((e) => e)
  assert.ok(res instanceof CommandExitError || res.exitCode !== 0, 'killed process does not exit 0')
  // The kill is reported before envd has reaped the process: poll the list.
  let after
  for (const deadline = Date.now() + 10_000; ; await sleep(50)) {
    after = await within(30_000, 'list after kill', () => sbx.commands.list())
    if (!after.some((p) => p.pid === h.pid) || Date.now() > deadline) break
  }
  assert.ok(!after.some((p) => p.pid === h.pid), 'killed process is no longer listed')
  assert.equal(await within(30_000, 'kill again', () => sbx.commands.kill(h.pid)), false, 'kill of a gone pid is false')
})

test('sendStdin to a background cat', { timeout: 120_000 }, async () => {
  let out = ''
  const h = await within(30_000, 'start cat', () =>
    sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => { out += d } }),
  )
  await within(30_000, 'sendStdin 1', () => sbx.commands.sendStdin(h.pid, 'hello\n'))
  await within(30_000, 'sendStdin 2', () => h.sendStdin(new TextEncoder().encode('world\n')))
  const deadline = Date.now() + 15_000
  while (!out.includes('world') && Date.now() < deadline) await sleep(100)
  assert.equal(out, 'hello\nworld\n')
  await within(30_000, 'closeStdin', () => h.closeStdin())
  const r = await within(30_000, 'wait cat', () => h.wait())
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\nworld\n')
})

test('connect to a running background process', { timeout: 120_000 }, async () => {
  const h = await within(30_000, 'start ticker', () =>
    sbx.commands.run('for i in $(seq 1 6); do echo tick$i; sleep 0.5; done', { background: true }),
  )
  await sleep(700)
  await within(10_000, 'disconnect', () => h.disconnect())
  let seen = ''
  const h2 = await within(30_000, 'connect', () => sbx.commands.connect(h.pid, { onStdout: (d) => { seen += d } }))
  assert.equal(h2.pid, h.pid)
  const r = await within(30_000, 'wait connected', () => h2.wait())
  assert.equal(r.exitCode, 0)
  assert.match(seen, /tick6/, 'connected handle sees later output')
})

test('300 kB of output arrives complete', { timeout: 180_000 }, async () => {
  // 3000 lines of 100 bytes each (99 chars + newline) = 300,000 bytes.
  const r = await within(120_000, 'big output', () =>
    sbx.commands.run("python3 -c \"import sys\nfor i in range(3000): sys.stdout.write(('%05d' % i) + 'x' * 94 + '\\n')\"", { timeoutMs: 120_000 }),
  )
  assert.equal(r.stdout.length, 300_000)
  const lines = r.stdout.split('\n')
  assert.equal(lines.length, 3001)
  for (let i = 0; i < 3000; i++) assert.equal(lines[i].slice(0, 5), String(i).padStart(5, '0'))
  // The same with bash only, in case python3 output differs.
  const r2 = await within(120_000, 'big output head', () =>
    sbx.commands.run('head -c 307200 /dev/zero | tr "\\0" "a"', { timeoutMs: 120_000 }),
  )
  assert.equal(r2.stdout.length, 307_200)
})

test('commands.list shows cmd, args and pid', { timeout: 120_000 }, async () => {
  const h = await within(30_000, 'start sleep', () => sbx.commands.run('sleep 123', { background: true }))
  const list = await within(30_000, 'list', () => sbx.commands.list())
  const p = list.find((x) => x.pid === h.pid)
  assert.ok(p, `pid ${h.pid} in ${JSON.stringify(list)}`)
  assert.equal(p.cmd, '/bin/bash')
  assert.ok(p.args.join(' ').includes('sleep 123'), JSON.stringify(p.args))
  await within(30_000, 'kill', () => sbx.commands.kill(h.pid))
})
