// Isolation between sandboxes and between a sandbox and the host, as the
// container runtime provides it: filesystems, processes, network, and
// resource exhaustion (rm -rf /, fork bomb, memory hog).
import { test, before } from 'node:test'
import { execFileSync } from 'node:child_process'
import assert from 'node:assert/strict'
import http from 'node:http'
import { randomUUID, createHash } from 'node:crypto'
import { writeFileSync, existsSync, rmSync, readFileSync, statSync, readdirSync, statfsSync, openSync, readSync, closeSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { useServer, createSandbox, within, sleep, run, hostPrimaryIPv4, moatBin, repoRoot, dataDir, simulatedUplink } from './harness.mjs'

const srv = useServer()
// On gVisor a sandbox's limits apply to its Sentry (gVisor's kernel, one
// host process): a fork bomb that reaches the pids limit, or a memory hog
// the memory limit, takes the whole sandbox down (the host and the other
// sandboxes are untouched), where a container or microVM only refuses the
// fork or kills the hog. docs/threat-model.md#gvisor.
const gvisor = process.env.MOAT_E2E_RUNTIME === 'gvisor'

let A, B
before(async () => {
  ;[A, B] = await Promise.all([createSandbox(null), createSandbox(null)])
}, { timeout: 240_000 })

// tcpProbe returns the shell snippet that prints CONNECTED if a TCP
// connection to host:port succeeds within 3 s, using bash only (no curl
// needed), followed by curl when the template has it.
function tcpProbe(host, port) {
  return (
    `timeout 4 bash -c 'exec 3<>/dev/tcp/${host}/${port} && echo CONNECTED' 2>/dev/null; ` +
    `command -v curl >/dev/null && curl -s -m 3 http://${host}:${port}/ 2>/dev/null; true`
  )
}

// addresses inside a sandbox: own IPv4s (from /proc/net/fib_trie, or
// `hostname -I` where the kernel has no fib_trie: gVisor) and the default
// gateway (from /proc/net/route), without needing iproute2.
async function sandboxNet(sbx) {
  const r = await run(sbx, 'cat /proc/net/fib_trie 2>/dev/null; echo ====; cat /proc/net/route; echo ====; hostname -I 2>/dev/null; true')
  const [trie, route, hostnameI = ''] = r.stdout.split('====')
  const own = new Set(trie.trim() ? [] : hostnameI.split(/\s+/).filter((a) => /^\d+\.\d+\.\d+\.\d+$/.test(a)))
  const lines = trie.split('\n')
  for (let i = 0; i < lines.length - 1; i++) {
    const m = lines[i].match(/\|--\s+(\d+\.\d+\.\d+\.\d+)/)
    if (m && /host LOCAL/.test(lines[i + 1]) && !m[1].startsWith('127.')) own.add(m[1])
  }
  let gateway = null
  for (const line of route.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/)
    if (f[1] === '00000000' && f[2] && f[2] !== '00000000') {
      const n = parseInt(f[2], 16)
      gateway = [n & 255, (n >> 8) & 255, (n >> 16) & 255, (n >>> 24) & 255].join('.')
    }
  }
  return { own: [...own], gateway }
}

function startHostServer(host, token) {
  return new Promise((resolve, reject) => {
    const s = http.createServer((req, res) => res.end(token))
    s.on('error', reject)
    s.listen(0, host, () => resolve(s))
  })
}

test('files: A\'s secret in /tmp is invisible to B', { timeout: 120_000 }, async () => {
  const secret = randomUUID()
  await within(30_000, 'write secret', () => A.files.write('/tmp/secret.txt', secret))
  assert.equal(await within(30_000, 'B exists', () => B.files.exists('/tmp/secret.txt')), false)
  const r = await run(B, `grep -rs ${secret} /tmp /home /root /var/tmp 2>/dev/null; ls /tmp`, { user: 'root' })
  assert.ok(!r.stdout.includes(secret), 'B finds A\'s secret')
})

test('processes: B cannot see A\'s processes', { timeout: 120_000 }, async () => {
  const marker = `9${Math.floor(Math.random() * 1e6)}`
  const h = await within(30_000, 'A sleep', () => A.commands.run(`sleep ${marker}`, { background: true }))
  try {
    const a = await run(A, 'ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr "\\0" " "')
    assert.ok(a.stdout.includes(`sleep ${marker}`), 'positive control: A sees its own sleep')
    const b = await run(B, 'ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr "\\0" " "', { user: 'root' })
    assert.ok(!b.stdout.includes(`sleep ${marker}`), `B sees A's process:\n${b.stdout}`)
    // And not from the PID namespace either: B's process count is small
    // (kernel threads, children of kthreadd in a microVM, do not count).
    const n = await run(B, 'ps -eo ppid=,pid= | awk \'$1 != 2 && $2 != 2\' | wc -l')
    assert.ok(Number(n.stdout.trim()) < 50, `B sees ${n.stdout.trim()} processes`)
  } finally {
    await h.kill().catch(() => {})
  }
})

test('a host file is invisible inside', { timeout: 120_000 }, async () => {
  const name = `moat-e2e-host-${randomUUID()}`
  const p = path.join(os.tmpdir(), name)
  writeFileSync(p, 'host secret')
  try {
    const r = await run(A, `cat ${p} 2>/dev/null; find / -xdev -name '${name}' 2>/dev/null | head`, { user: 'root' }, 120_000)
    assert.ok(!r.stdout.includes('host secret') && !r.stdout.includes(name), `host file visible:\n${r.stdout}`)
    assert.equal(await within(30_000, 'exists', () => A.files.exists(p)), false)
  } finally {
    rmSync(p, { force: true })
  }
})

test('network: cannot reach host loopback, host addresses, moat serve', { timeout: 180_000 }, async () => {
  const token = `tok-${randomUUID()}`
  const loop = await startHostServer('127.0.0.1', token)
  const any = await startHostServer('0.0.0.0', token)
  try {
    const { gateway, own } = await sandboxNet(A)
    assert.ok(own.length > 0 || gateway === null, 'sandbox has an address or no network at all')
    const hostIP = hostPrimaryIPv4()
    const moatPort = srv.external ? Number(new URL(srv.url).port || 80) : srv.server.port
    const targets = new Set(['127.0.0.1', 'localhost', gateway, hostIP].filter(Boolean))
    const probes = []
    for (const host of targets) {
      for (const [label, port] of [
        ['host loopback server', loop.address().port],
        ['host all-interfaces server', any.address().port],
        ['moat serve', moatPort],
      ]) probes.push({ label, host, port })
    }
    // Every probe at once, each into its own file: a dropped SYN costs its
    // timeout once, not once per target.
    const script = probes.map((p, i) => `( ${tcpProbe(p.host, p.port)} ) > /tmp/probe-${i} 2>&1 &`).join('\n') +
      `\nwait; for i in $(seq 0 ${probes.length - 1}); do echo "=== $i"; cat /tmp/probe-$i; done`
    const r = await run(A, script, {}, 60_000)
    const outs = r.stdout.split(/^=== \d+$/m).slice(1)
    assert.equal(outs.length, probes.length, `probe output: ${r.stdout.slice(0, 500)}`)
    const failures = []
    probes.forEach(({ label, host, port }, i) => {
      const out = outs[i]
      if (out.includes('CONNECTED') || out.includes(token) || out.includes('"code"')) {
        failures.push(`${label} reachable at ${host}:${port}: ${out.trim().slice(0, 200)}`)
      }
    })
    assert.deepEqual(failures, [], `sandbox reached the host (gateway ${gateway}, host ${hostIP}, own ${own})`)
  } finally {
    loop.close()
    any.close()
  }
})

test('network: A cannot reach B', { timeout: 180_000 }, async () => {
  const port = 18000 + Math.floor(Math.random() * 1000)
  const token = `b-${randomUUID()}`
  await within(30_000, 'B page', () => B.files.write('/tmp/www/index.html', token))
  const srvB = await within(30_000, 'B http server', () =>
    B.commands.run(`cd /tmp/www && exec python3 -m http.server ${port} --bind 0.0.0.0`, { background: true, timeoutMs: 0 }))
  try {
    const { own: bIPs } = await sandboxNet(B)
    let ok = false
    for (let i = 0; i < 50 && !ok; i++) {
      const self = await run(B, tcpProbe('127.0.0.1', port), {}, 30_000)
      ok = self.stdout.includes('CONNECTED')
      if (!ok) await sleep(200)
    }
    assert.ok(ok, 'positive control: B reaches its own server')
    assert.ok(bIPs.length > 0, 'B has an IPv4 address')
    for (const ip of bIPs) {
      const selfIP = await run(B, tcpProbe(ip, port), {}, 30_000)
      assert.ok(selfIP.stdout.includes('CONNECTED'), `positive control: B reaches ${ip}:${port}`)
      const r = await run(A, tcpProbe(ip, port), {}, 30_000)
      assert.ok(!r.stdout.includes('CONNECTED') && !r.stdout.includes(token), `A reached B at ${ip}:${port}`)
    }
  } finally {
    await srvB.kill().catch(() => {})
  }
})

// Host files that must survive a sandbox's rm -rf / (catches rw bind mounts).
function hostFingerprint() {
  const files = ['/etc/resolv.conf', '/etc/hosts', '/etc/hostname', '/etc/passwd', moatBin, path.join(repoRoot, 'bin', 'envd')]
  const out = {}
  for (const f of files) {
    try {
      const st = statSync(f)
      out[f] = `${st.size}`
    } catch {
      out[f] = 'missing'
    }
  }
  try {
    out[srv.dataDir + '/templates'] = String(readdirSync(path.join(srv.dataDir, 'templates')).length)
  } catch {}
  return out
}

test('rm -rf / in one sandbox leaves the host, the server and other sandboxes working', { timeout: 300_000 }, async (t) => {
  const victim = await createSandbox(t)
  const marker = path.join(os.tmpdir(), `moat-e2e-rm-${randomUUID()}`)
  writeFileSync(marker, 'still here')
  const before = hostFingerprint()
  try {
    await within(30_000, 'B marker', () => B.files.write('/tmp/b-marker', 'b'))
    await run(victim, 'timeout 120 rm -rf / --no-preserve-root 2>/dev/null; echo rc=$?', { user: 'root' }, 150_000).catch((e) => e)
    assert.equal(readFileSync(marker, 'utf8'), 'still here')
    assert.deepEqual(hostFingerprint(), before, 'host files changed')
    assert.equal(await within(30_000, 'health', () => fetch(`${srv.url}/health`).then((r) => r.status)), 200)
    const r = await run(B, 'cat /tmp/b-marker; echo ok')
    assert.equal(r.stdout, 'bok\n')
    // The template is intact: a fresh sandbox works.
    const fresh = await createSandbox(t)
    const f = await run(fresh, 'ls /usr/bin/env && python3 -c "print(6*7)"')
    assert.equal(f.exitCode, 0, f.stderr)
    assert.match(f.stdout, /42/)
  } finally {
    rmSync(marker, { force: true })
  }
})

// pidsLimit reports the pids cgroup limit the sandbox runs under, looking
// from inside (cgroup v2 or v1 with a cgroup namespace) and from the host.
async function pidsLimit(sbx) {
  const r = await run(sbx, 'cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max 2>/dev/null', { user: 'root' })
  const inside = r.stdout.split('\n').map((s) => s.trim()).filter(Boolean)
  const numeric = inside.filter((v) => /^\d+$/.test(v)).map(Number)
  if (numeric.length) return Math.min(...numeric)
  const hostHits = []
  const walk = (dir, depth) => {
    if (depth > 6) return
    let es
    try { es = readdirSync(dir, { withFileTypes: true }) } catch { return }
    for (const e of es) {
      if (!e.isDirectory()) continue
      const p = path.join(dir, e.name)
      if (e.name.includes(sbx.sandboxId) && existsSync(path.join(p, 'pids.max'))) hostHits.push(p)
      walk(p, depth + 1)
    }
  }
  walk('/sys/fs/cgroup', 0)
  for (const p of hostHits) {
    const v = readFileSync(path.join(p, 'pids.max'), 'utf8').trim()
    if (/^\d+$/.test(v)) numeric.push(Number(v))
  }
  return numeric.length ? Math.min(...numeric) : null
}

test('a fork bomb leaves the host and another sandbox working', { timeout: 300_000 }, async (t) => {
  const victim = await createSandbox(t)
  const limit = await pidsLimit(victim)
  // Refuse to run a fork bomb without a pids limit: on a shared host it
  // would exhaust the host's PIDs (pid_max), which is the failure itself.
  assert.ok(limit !== null && limit < 32768, `no pids limit on the sandbox (found ${limit}); not running the fork bomb`)
  // The bomb ends when this file appears (written through envd, which
  // needs no fork): `timeout` alone does not end it, as bomb processes
  // forked while it signals its process group survive.
  const stop = '/tmp/stop-bomb'
  const bomb = await within(30_000, 'start bomb', () =>
    victim.commands.run(`timeout -s KILL 60 bash -c ':(){ [ -e ${stop} ] && exit; :|:& };:'`, { background: true, timeoutMs: 0 }))
  try {
    await sleep(5000)
    // envd must outlive the bomb: concurrent writes and commands make it
    // start threads while its sandbox sits at the pids limit (a Go
    // program that cannot start a thread dies, and envd with it). The
    // commands themselves may fail to fork; that is the bomb's effect.
    for (let round = 0; round < 3; round++) {
      const hammer = []
      for (let j = 0; j < 16; j++) hammer.push(victim.files.write(`/tmp/hammer${j}`, 'y'.repeat(65536)).catch(() => {}))
      for (let j = 0; j < 8; j++) hammer.push(victim.commands.run('true', { timeoutMs: 20_000 }).catch(() => {}))
      await within(60_000, 'requests to the bombed sandbox', () => Promise.all(hammer))
    }
    const t0 = Date.now()
    const r = await run(B, 'echo alive', {}, 60_000)
    assert.equal(r.stdout, 'alive\n')
    assert.ok(Date.now() - t0 < 30_000, `other sandbox slow under fork bomb: ${Date.now() - t0} ms`)
    assert.equal(await within(30_000, 'health', () => fetch(`${srv.url}/health`).then((x) => x.status)), 200)
    const { execFileSync } = await import('node:child_process')
    assert.equal(execFileSync('echo', ['host-ok']).toString(), 'host-ok\n')
  } finally {
    await bomb.kill().catch(() => {})
    await victim.files.write(stop, '').catch(() => {})
    // Once the bomb is over the victim itself works again: envd survived it.
    if (!gvisor) {
      const deadline = Date.now() + 60_000
      let out = ''
      while (Date.now() < deadline && out !== 'survived\n') {
        out = await run(victim, 'echo survived', {}, 20_000).then((x) => x.stdout, (e) => String(e))
        if (out !== 'survived\n') await sleep(1000)
      }
      assert.equal(out, 'survived\n', 'the bombed sandbox does not answer after its bomb ended')
    }
    // Killing the sandbox must reap every bomb process. On gVisor the
    // bomb may already have taken its sandbox down (gone: kill is false).
    const killed = await within(60_000, 'kill victim', () => victim.kill())
    if (gvisor && !killed) t.diagnostic('gVisor: the fork bomb took its own sandbox down')
    else assert.equal(killed, true)
  }
})

test('a memory hog is killed inside its own sandbox only', { timeout: 300_000 }, async (t) => {
  const victim = await createSandbox(t)
  if (gvisor) return memoryHogOnGVisor(t, victim)
  const r = await run(victim,
    'python3 -c "x = bytearray(b\'\\x01\') * (2 * 1024 ** 3); print(len(x))"; echo "rc=$?"', {}, 180_000)
  const rc = Number((r.stdout.match(/rc=(\d+)/) || [])[1])
  assert.ok(!r.stdout.includes(String(2 * 1024 ** 3)), `2 GiB allocation succeeded: no memory limit (${r.stdout.trim()})`)
  assert.ok(rc !== 0, `hog exited ${rc}`)
  // 137 = SIGKILL (OOM killer); MemoryError exits 1. Both are acceptable.
  assert.ok([137, 1].includes(rc), `unexpected exit code ${rc}`)
  const after1 = await run(victim, 'echo still-here', {}, 60_000)
  assert.equal(after1.stdout, 'still-here\n', 'the hog\'s sandbox still answers')
  const after2 = await run(B, 'echo b-here', {}, 60_000)
  assert.equal(after2.stdout, 'b-here\n')
})

// memoryHogOnGVisor: the host's OOM killer ends the victim's Sentry, so the
// sandbox goes away as a whole (its in-flight command would only fail when
// its TCP connection times out, so it runs in the background here), while
// the other sandbox and the server keep working.
async function memoryHogOnGVisor(t, victim) {
  await within(30_000, 'start hog', () => victim.commands.run(
    'python3 -c "x = bytearray(b\'\\x01\') * (2 * 1024 ** 3); print(len(x))"', { background: true, timeoutMs: 0 }))
  let gone = false
  for (let i = 0; i < 60 && !gone; i++) {
    await sleep(1000)
    gone = !(await within(30_000, 'victim running', () => victim.isRunning().catch(() => false)))
  }
  assert.ok(gone, 'gVisor: a 2 GiB allocation over a 512 MiB limit ends the sandbox')
  t.diagnostic('gVisor: the memory hog took its own sandbox down')
  const after2 = await run(B, 'echo b-here', {}, 60_000)
  assert.equal(after2.stdout, 'b-here\n')
  assert.equal(await within(30_000, 'health', () => fetch(`${srv.url}/health`).then((x) => x.status)), 200)
}

// A guest kernel panic (microVM) kills only that sandbox, which the API then
// reports as gone; in a container /proc/sysrq-trigger is read-only, so the
// same attempt fails and the sandbox keeps running.
test('echo c > /proc/sysrq-trigger kills at most its own sandbox', { timeout: 300_000 }, async (t) => {
  const victim = await createSandbox(t)
  const { Sandbox } = await import('e2b')
  const crash = await within(30_000, 'start crash', () =>
    victim.commands.run('sleep 0.5; echo c > /proc/sysrq-trigger; echo rc=$?', { user: 'root', background: true }),
  )
  let gone = false
  // A container or gVisor sandbox refuses the write: once the command has
  // answered, one look at the API is enough. A microVM's panic takes it
  // away within the 30 s.
  const vm = process.env.MOAT_E2E_RUNTIME === 'vm'
  const result = vm ? null : await within(30_000, 'crash result', () => crash.wait().catch((e) => e))
  const deadline = Date.now() + (vm ? 30_000 : 0)
  do {
    await sleep(1000)
    try {
      await within(10_000, 'getInfo', () => Sandbox.getInfo(victim.sandboxId))
    } catch (err) {
      if (err?.name !== 'SandboxNotFoundError') throw err
      gone = true
    }
  } while (Date.now() < deadline && !gone)
  if (vm) {
    assert.ok(gone, 'a VM whose kernel panicked is still listed after 30 s')
    assert.equal(await within(20_000, 'isRunning', () => victim.isRunning()), false)
  } else {
    assert.ok(!gone, 'the container disappeared after writing to /proc/sysrq-trigger')
    assert.match(String(result.stdout ?? ''), /rc=[1-9]/, 'sysrq write succeeded inside a container')
    const still = await run(victim, 'echo still-here', {}, 60_000)
    assert.equal(still.stdout, 'still-here\n')
  }
  const other = await run(B, 'echo b-here', {}, 60_000)
  assert.equal(other.stdout, 'b-here\n', 'the neighbour stopped answering')
})

// A microVM runs its own kernel; a container shares the host's.
test('kernel: a microVM has its own, a container shares the host\'s', { timeout: 120_000 }, async () => {
  const r = await run(A, 'uname -r')
  const same = r.stdout.trim() === os.release()
  if (gvisor) { // gVisor's kernel answers, not the host's
    assert.ok(!same, `gVisor sandbox reports the host kernel ${r.stdout.trim()}`)
    assert.match((await run(A, 'dmesg', { user: 'root' })).stdout, /gVisor/)
    return
  }
  if (process.env.MOAT_E2E_RUNTIME !== 'vm') {
    assert.ok(same, `container reports kernel ${r.stdout.trim()}, host ${os.release()}`)
    return
  }
  assert.ok(!same, `guest kernel ${r.stdout.trim()} is the host's`)
  // No host devices: the guest's only disk is its virtio disk, there is no
  // PCI bus to pass anything through, and no KVM device.
  const d = await run(A, 'ls /sys/class/block; echo ===; ls /sys/bus/pci/devices 2>/dev/null | wc -l; ls /dev/kvm 2>/dev/null', { user: 'root' })
  const [blocks, rest] = d.stdout.split('===')
  for (const b of blocks.split(/\s+/).filter(Boolean)) {
    assert.match(b, /^(vd[a-z]+\d*|loop\d+|ram\d+|zram\d+)$/, `unexpected block device in the guest: ${b}`)
  }
  const [pci, ...devs] = rest.trim().split('\n')
  assert.equal(pci.trim(), '0', 'the guest sees PCI devices')
  assert.deepEqual(devs.filter(Boolean), [], 'host devices visible in the guest')
})

// Root inside a container sandbox is root of its own user namespace only:
// outside it is an unprivileged host ID, a different one per sandbox, and
// the sandbox's processes show up on the host under that ID.
test('users: root inside a container is an unprivileged host ID of its own', { timeout: 120_000 }, async () => {
  if (process.env.MOAT_E2E_RUNTIME === 'vm') return // a guest kernel has its own IDs
  if (gvisor) return gvisorHostIDs()
  const maps = await Promise.all([A, B].map(async (s) => {
    const r = await run(s, 'id -u; cat /proc/self/uid_map', { user: 'root' })
    const [uid, map] = r.stdout.trim().split('\n')
    assert.equal(uid, '0')
    const [inside, host, size] = map.trim().split(/\s+/).map(Number)
    assert.equal(inside, 0)
    assert.ok(host >= 2 ** 30 && size === 65536, `uid_map ${map}`)
    return host
  }))
  assert.notEqual(maps[0], maps[1], 'two sandboxes share host IDs')
  // The host sees A's sleep under A's host ID, not root.
  const tag = `moat-uid-${randomUUID()}`
  await run(A, `bash -c 'exec -a ${tag} sleep 60' >/dev/null 2>&1 &`, { user: 'root' })
  let owner
  for (const deadline = Date.now() + 10_000; owner === undefined && Date.now() < deadline; await sleep(200)) {
    for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
      try {
        if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith(tag)) {
          owner = Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)[1])
        }
      } catch { /* gone meanwhile */ }
    }
  }
  assert.equal(owner, maps[0], 'root inside runs as the sandbox\'s host ID')
})

// gvisorHostIDs: a gVisor sandbox's processes are tasks of its Sentry, whose
// user namespace is its own (uid_map "0 0 4294967295" inside); on the host
// the Sentry (runsc-sandbox) and its gofer run as the sandbox's own
// unprivileged ID range, a different one per sandbox.
async function gvisorHostIDs() {
  const hostUIDs = (id) => readdirSync('/proc').filter((p) => /^\d+$/.test(p)).flatMap((pid) => {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      if (!/^runsc-(sandbox|gofer)/.test(cmd) || !cmd.includes(`/${id}`)) return []
      return [Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)[1])]
    } catch { return [] }
  })
  const [a, b] = [A, B].map((s) => hostUIDs(s.sandboxId))
  assert.equal(a.length, 2, `runsc-sandbox and runsc-gofer of ${A.sandboxId}: uids ${a}`)
  for (const uid of [...a, ...b]) assert.ok(uid >= 2 ** 30, `a gVisor process runs as host uid ${uid}`)
  assert.notEqual(a[0], b[0], 'two gVisor sandboxes share host IDs')
  assert.equal((await run(A, 'id -u', { user: 'root' })).stdout, '0\n')
}

// Root may serve on port 80 in every runtime. In a container, root's
// CAP_NET_BIND_SERVICE does not count in the host-owned network namespace, so
// the namespace lets every account bind ports below 1024 (as Docker does).
test('network: root (and in a container every account) can serve on port 80', { timeout: 120_000 }, async () => {
  const bind = (port) => `python3 -c "import socket; s=socket.socket(); s.bind(('0.0.0.0', ${port})); print('bound')"`
  assert.equal((await run(A, bind(80), { user: 'root' })).stdout, 'bound\n')
  if (process.env.MOAT_E2E_RUNTIME !== 'vm') {
    assert.equal((await run(A, bind(81), { user: 'user' })).stdout, 'bound\n')
  }
})

// Filling the disk stops at the sandbox's own quota (a container's writable
// layer is a filesystem of its own; a microVM has its own disk) and leaves
// the host's disk alone.
test('disk: a sandbox cannot fill the host\'s disk', { timeout: 180_000 }, async () => {
  const free = () => { const s = statfsSync(dataDir); return s.bavail * s.bsize }
  const before = free()
  const fill = await run(A, 'dd if=/dev/zero of=/home/user/fill bs=1M count=100 2>&1 | tail -1; sync; stat -c %s /home/user/fill', { user: 'user' })
  assert.match(fill.stdout, /^104857600$/m, `100 MiB did not fit: ${fill.stdout}`)
  const big = await run(A, 'fallocate -l 64G /home/user/big; df -m / | tail -1', { user: 'user' })
  assert.match(big.stdout + big.stderr, /No space left/, `a 64 GiB file fit: ${big.stdout}`)
  const lost = before - free()
  assert.ok(lost < 1024 * 2 ** 20, `the host's disk lost ${Math.round(lost / 2 ** 20)} MiB`)
  assert.equal((await run(A, 'rm -f /home/user/big /home/user/fill; echo ok', { user: 'user' })).stdout, 'ok\n')
})

// The cloud metadata address (169.254.169.254) stands behind a simulated
// gateway here, as on a cloud host: the host reaches it, a sandbox with
// internet access must not (link-local is one of the fixed blocked ranges).
test('network: the metadata address is unreachable even where the host reaches it', { timeout: 180_000 }, async (t) => {
  const meta = '169.254.169.254'
  const uplink = await simulatedUplink({
    ns: 'mte2e-meta', hostIf: 'mtmeta0', host: '198.18.77.2', gw: '198.18.77.1', internet: [meta],
    route: `${meta}/32`,
    serverPy: `
import http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'metadata')
    def log_message(self, *a): pass
socketserver.TCPServer.allow_reuse_address = True
s = socketserver.TCPServer(('0.0.0.0', 80), H)
print('ready', flush=True)
s.serve_forever()
`,
  })
  t.after(() => uplink.teardown())
  const fromHost = execFileSync('curl', ['-s', '--noproxy', '*', '-m', '5', `http://${meta}/`]).toString()
  assert.equal(fromHost, 'metadata', 'the host itself reaches the simulated metadata service')
  const r = await run(A, tcpProbe(meta, 80), {}, 60_000)
  assert.doesNotMatch(r.stdout, /CONNECTED|metadata/, `a sandbox reached ${meta}`)
})

// /proc, /sys and device escapes, as root inside: writes that would change
// the host (core_pattern runs a program as host root on a crash; THP and
// the hostname are host-wide) change nothing the host sees; no block
// device a sandbox can make or open reads the host's disk; /dev/mem and
// /dev/kmem give nothing. A microVM may change its own kernel's settings.
test('/proc, /sys and device escapes change nothing on the host', { timeout: 180_000 }, async (t) => {
  const read = (p) => readFileSync(p, 'utf8')
  const before = {
    core: read('/proc/sys/kernel/core_pattern'),
    host: read('/proc/sys/kernel/hostname'),
    thp: existsSync('/sys/kernel/mm/transparent_hugepage/enabled') ? read('/sys/kernel/mm/transparent_hugepage/enabled') : '',
  }
  const root = execFileSync('findmnt', ['-no', 'SOURCE', '/']).toString().trim().replace(/\[.*\]$/, '')
  const rdev = statSync(root).rdev
  const [maj, min] = [Math.floor(rdev / 256) & 0xfff, (rdev & 0xff) | ((rdev >> 12) & 0xfff00)]
  // Some hosts (this CI's) do not let even root read their disk: then
  // only the settings are compared.
  let hostSector = null
  try {
    const fd = openSync(root, 'r')
    const buf = Buffer.alloc(4096)
    readSync(fd, buf, 0, 4096, 0)
    closeSync(fd)
    hostSector = createHash('sha256').update(buf).digest('hex')
  } catch (err) {
    t.diagnostic(`the host cannot read ${root} itself (${err.code}): disk contents not compared`)
  }
  const attempt = [
    "echo '|/tmp/pwn %p' > /proc/sys/kernel/core_pattern",
    'echo pwned-host > /proc/sys/kernel/hostname',
    'echo always > /sys/kernel/mm/transparent_hugepage/enabled',
    `mknod /tmp/hostdisk b ${maj} ${min}; head -c 4096 /tmp/hostdisk | sha256sum`,
    'for d in /dev/vda /dev/sda /dev/nvme0n1 /dev/xvda; do [ -b $d ] && head -c 4096 $d | sha256sum; done',
    'head -c 16 /dev/mem | od -An -tx1; head -c 16 /dev/kmem | od -An -tx1',
  ].map((c) => `(${c}) 2>&1; true`).join('; ')
  const r = await run(A, attempt, { user: 'root' }, 60_000)
  assert.equal(read('/proc/sys/kernel/core_pattern'), before.core, 'host core_pattern changed')
  assert.equal(read('/proc/sys/kernel/hostname'), before.host, 'host hostname changed')
  if (before.thp) assert.equal(read('/sys/kernel/mm/transparent_hugepage/enabled'), before.thp, 'host THP setting changed')
  if (hostSector) assert.ok(!r.stdout.includes(hostSector), `a sandbox read the host disk's first 4 KiB (${root})`)
  // The other sandbox still has its own settings.
  const b = await run(B, 'cat /proc/sys/kernel/hostname', {}, 30_000)
  assert.notEqual(b.stdout.trim(), 'pwned-host')
})
