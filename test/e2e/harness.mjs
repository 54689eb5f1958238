// Shared harness for Moat's end-to-end suites, driven by the official
// `e2b` npm SDK (pinned in package.json) under Node's built-in test runner.
//
// Environment:
//   MOAT_BIN            path to the moat binary (default <repo>/bin/moat)
//   MOAT_E2E_DATA_DIR   data dir whose base template is already built
//                       (default /var/lib/moat-ci)
//   MOAT_E2E_API_URL    reuse an already running server instead of starting one
//   MOAT_E2E_API_KEY    API key for that server (required with MOAT_E2E_API_URL)
//   MOAT_E2E_TEMPLATE   template to create sandboxes from (default "base")
//   MOAT_E2E_WORKDIR    that template's default working directory (default /home/user)
//   MOAT_RUNC_ROOT      extra runc/crun state root for the leak check
//
// Each test file calls useServer() once at top level. It starts one
// `moat serve` on a free loopback port (or reuses the given server), creates
// an API key, exports E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY for the SDK,
// and stops the server in an after hook (SIGTERM, then SIGKILL).
//
// SDK timeouts do not bound a hung server (hazard H3 in
// shared/reference/e2b-js-sdk-behaviour.md), so every awaited SDK call that
// matters goes through within() and every test passes its own `timeout`.

import { spawn, execFile, execFileSync } from 'node:child_process'
import { appendFileSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { after, before } from 'node:test'

import { Sandbox } from 'e2b'

const execFileP = promisify(execFile)

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
export const moatBin = process.env.MOAT_BIN || path.join(repoRoot, 'bin', 'moat')
export const dataDir = process.env.MOAT_E2E_DATA_DIR || '/var/lib/moat-ci'
export const template = process.env.MOAT_E2E_TEMPLATE || 'base'
// MOAT_E2E_SCOPE (1-9) starts every server with `--scope N`: its host
// objects are named apart from the host scope's, so that scripts/test.sh
// can run a second lane of suites beside the first. scope holds the names
// the suites look for on the host (runtime.Backends.Scope,
// netpolicy.WithTestScope).
const scopeN = Number(process.env.MOAT_E2E_SCOPE || 0)
export const scope = scopeN
  ? { n: scopeN, table: `moats${scopeN}`, ifPrefix: `s${scopeN}`, stateDir: `/run/moat/s${scopeN}`, net16: `10.${210 + scopeN}` }
  : { n: 0, table: 'moat', ifPrefix: 'mh', stateDir: '/run/moat', net16: '10.200' }

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// within races a promise against a timer so that a hung server fails the
// test with a message instead of hanging the run.
export async function within(ms, what, promiseOrFn) {
  let timer
  const p = typeof promiseOrFn === 'function' ? promiseOrFn() : promiseOrFn
  try {
    return await Promise.race([
      p,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
      }),
    ])
  } finally {
    clearTimeout(timer)
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

export async function runMoat(args, { timeoutMs = 120_000 } = {}) {
  try {
    const { stdout, stderr } = await execFileP(moatBin, args, {
      timeout: timeoutMs,
      killSignal: 'SIGKILL',
      maxBuffer: 16 << 20,
    })
    return { stdout, stderr }
  } catch (err) {
    err.message = `moat ${args.join(' ')} failed: ${err.message}\nstdout: ${err.stdout ?? ''}\nstderr: ${err.stderr ?? ''}`
    throw err
  }
}

// MoatServer is one `moat serve` process owned by a test file.
export class MoatServer {
  constructor({ dataDir: dir = dataDir, extraArgs = [] } = {}) {
    this.dataDir = dir
    this.extraArgs = extraArgs // more `moat serve` flags
    this.proc = null
    this.port = 0
    this.url = ''
    this.apiKey = ''
    this.log = ''
    this.external = false
  }

  async start({ readyTimeoutMs = 120_000 } = {}) {
    if (!existsSync(moatBin)) {
      throw new Error(`moat binary not found at ${moatBin}; run \`make build\` or set MOAT_BIN`)
    }
    if (!this.port) this.port = await freePort()
    this.url = `http://127.0.0.1:${this.port}`
    const args = ['serve', '--addr', `127.0.0.1:${this.port}`, '--data-dir', this.dataDir]
    if (process.env.MOAT_E2E_RUNTIME) args.push('--runtime', process.env.MOAT_E2E_RUNTIME)
    if (scope.n) args.push('--scope', String(scope.n))
    args.push(...this.extraArgs)
    const proc = spawn(moatBin, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    this.proc = proc
    let ready = false
    // MOAT_E2E_LOG_DIR keeps every server's full log for post-mortems.
    const logFile = process.env.MOAT_E2E_LOG_DIR
      ? `${process.env.MOAT_E2E_LOG_DIR}/moat-serve-${this.port}-${proc.pid}.log`
      : null
    if (logFile) mkdirSync(process.env.MOAT_E2E_LOG_DIR, { recursive: true })
    const onData = (buf) => {
      const s = buf.toString()
      if (logFile) appendFileSync(logFile, s)
      this.log += s
      if (this.log.length > 1 << 20) this.log = this.log.slice(-(1 << 19))
      if (process.env.MOAT_E2E_VERBOSE) process.stderr.write(`[moat ${this.port}] ${s}`)
      if (s.includes('moat listening on')) ready = true
    }
    proc.stdout.on('data', onData)
    proc.stderr.on('data', onData)
    const exited = new Promise((resolve) => proc.once('exit', (code, sig) => resolve({ code, sig })))
    this.exited = exited
    let exitInfo = null
    exited.then((e) => {
      exitInfo = e
    })

    const deadline = Date.now() + readyTimeoutMs
    while (Date.now() < deadline) {
      if (exitInfo) {
        throw new Error(`moat serve exited early (code ${exitInfo.code}, signal ${exitInfo.sig}):\n${this.log}`)
      }
      if (ready || (await this.healthy())) {
        if (await this.healthy()) return this
      }
      await sleep(200)
    }
    await this.stop()
    throw new Error(`moat serve not ready after ${readyTimeoutMs} ms:\n${this.log}`)
  }

  async healthy() {
    try {
      const res = await fetch(`${this.url}/health`, { signal: AbortSignal.timeout(2000) })
      await res.arrayBuffer().catch(() => {})
      return res.status === 200
    } catch {
      return false
    }
  }

  async createApiKey() {
    const { stdout } = await runMoat(['apikey', 'create', '--data-dir', this.dataDir])
    const lines = stdout.trim().split('\n').map((l) => l.trim()).filter(Boolean)
    const key = lines.at(-1)
    if (!key) throw new Error('moat apikey create printed nothing')
    this.apiKey = key
    return key
  }

  // createTeamApiKey makes a key of another team (`moat apikey create
  // --team`) and returns it, leaving this.apiKey as it was.
  async createTeamApiKey(team) {
    return createApiKeyIn(this.dataDir, team)
  }

  get pid() {
    return this.proc?.pid
  }

  // waitForLog waits until the server's log matches want (a RegExp, or a
  // function of the log returning a truthy value) and returns the match.
  // The log is read from a pipe: a line the server wrote before it
  // answered a request can reach this process after the answer does.
  async waitForLog(want, { timeoutMs = 10_000 } = {}) {
    const test = typeof want === 'function' ? want : (log) => want.exec(log)
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const m = test(this.log)
      if (m) return m
      if (Date.now() > deadline) throw new Error(`the server log never matched ${want}:\n${this.log.slice(-3000)}`)
      await sleep(50)
    }
  }

  // kill9 simulates a crash: SIGKILL, no chance to clean up.
  async kill9() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode) return
    this.proc.kill('SIGKILL')
    await within(10_000, 'moat serve exit after SIGKILL', this.exited)
  }

  async stop({ graceMs = 15_000 } = {}) {
    const proc = this.proc
    if (!proc || proc.exitCode !== null || proc.signalCode) return
    proc.kill('SIGTERM')
    const done = await Promise.race([this.exited.then(() => true), sleep(graceMs).then(() => false)])
    if (!done) {
      proc.kill('SIGKILL')
      await Promise.race([this.exited, sleep(5000)])
    }
  }
}

// createApiKeyIn makes an API key of team in the data dir dir (the key is
// printed on the last line of stdout).
export async function createApiKeyIn(dir, team) {
  const args = ['apikey', 'create', '--data-dir', dir]
  if (team) args.push('--team', team)
  const { stdout } = await runMoat(args)
  const key = stdout.trim().split('\n').map((l) => l.trim()).filter(Boolean).at(-1)
  if (!key) throw new Error('moat apikey create printed nothing')
  return key
}

export function exportSdkEnv(url, apiKey) {
  const origin = url.replace(/\/+$/, '')
  process.env.E2B_API_URL = origin
  process.env.E2B_SANDBOX_URL = origin
  process.env.E2B_API_KEY = apiKey
  // The volume content API (Volume#readFile etc.) is served by moat too.
  process.env.E2B_VOLUME_API_URL = origin
  // Never let a developer's E2B_DOMAIN / E2B_DEBUG leak into the run.
  delete process.env.E2B_DEBUG
}

// useServer registers before/after hooks at the file level and returns an
// object filled in once the server is up.
// Node 20 runs file-level before/after hooks concurrently, so anything that
// needs the server (createSandbox) awaits serverReady rather than hook order,
// and sandboxes created outside a test (t = null) are killed by useServer's
// own after hook before it stops the server.
let serverReady = null
const fileSandboxes = new Set()

export function useServer() {
  const ctx = { server: null, url: '', apiKey: '', external: false, dataDir }
  let resolveReady, rejectReady
  ctx.ready = new Promise((res, rej) => { resolveReady = res; rejectReady = rej })
  ctx.ready.catch(() => {})
  serverReady = ctx.ready
  before(async () => {
   try {
    if (process.env.MOAT_E2E_API_URL) {
      if (!process.env.MOAT_E2E_API_KEY) throw new Error('MOAT_E2E_API_URL needs MOAT_E2E_API_KEY')
      ctx.external = true
      ctx.url = process.env.MOAT_E2E_API_URL.replace(/\/+$/, '')
      ctx.apiKey = process.env.MOAT_E2E_API_KEY
    } else {
      const srv = new MoatServer()
      ctx.server = srv
      await srv.start()
      await srv.createApiKey()
      ctx.url = srv.url
      ctx.apiKey = srv.apiKey
    }
    exportSdkEnv(ctx.url, ctx.apiKey)
    resolveReady(ctx)
   } catch (err) {
    rejectReady(err)
    throw err
   }
  }, { timeout: 180_000 })
  after(async () => {
    await Promise.all([...fileSandboxes].map((id) => killQuietly(id)))
    fileSandboxes.clear()
    await ctx.server?.stop()
  }, { timeout: 120_000 })
  return ctx
}

// createSandbox creates a sandbox and registers its kill on the test context,
// so a failing test does not leak it. Sandboxes get a bounded lifetime too.
export async function createSandbox(t, opts = {}, { withinMs = 120_000 } = {}) {
  if (serverReady) await serverReady
  const sbx = await within(withinMs, 'Sandbox.create', () =>
    Sandbox.create(template, { timeoutMs: 600_000, ...opts }),
  )
  if (t?.after) t.after(() => killQuietly(sbx.sandboxId))
  else fileSandboxes.add(sbx.sandboxId)
  return sbx
}

export async function killQuietly(id) {
  try {
    return await within(30_000, `kill ${id}`, () => Sandbox.kill(id))
  } catch {
    return false
  }
}

// run runs a foreground command and never throws on a non-zero exit.
export async function run(sbx, cmd, opts = {}, ms = 90_000) {
  try {
    return await within(ms, `commands.run(${JSON.stringify(cmd).slice(0, 80)})`, () =>
      sbx.commands.run(cmd, { timeoutMs: ms, ...opts }),
    )
  } catch (err) {
    if (err && typeof err.exitCode === 'number' && err.name === 'CommandExitError') {
      return { exitCode: err.exitCode, stdout: err.stdout, stderr: err.stderr, error: err.error }
    }
    throw err
  }
}

// ---------- host-side leak check ----------

async function sh(cmd, args) {
  try {
    const { stdout } = await execFileP(cmd, args, { timeout: 20_000, maxBuffer: 16 << 20 })
    return stdout
  } catch (err) {
    return err.stdout || ''
  }
}

function runcRoots() {
  const roots = new Set(['/run/moat/runc', '/run/moat/crun', '/run/moat/container', '/run/runc', '/run/crun'])
  if (process.env.MOAT_RUNC_ROOT) roots.add(process.env.MOAT_RUNC_ROOT)
  for (const dir of new Set(['/run/moat', scope.stateDir])) {
    try {
      for (const d of readdirSync(dir)) {
        const p = path.join(dir, d)
        if (statSync(p).isDirectory() && !/^s\d$/.test(d)) roots.add(p)
      }
    } catch {}
  }
  return [...roots].filter((r) => existsSync(r))
}

function findCgroupDirs(ids) {
  const hits = []
  const base = '/sys/fs/cgroup'
  // Walk at most 5 levels; cgroup trees are small on a test host.
  const walk = (dir, depth) => {
    if (depth > 5) return
    let entries
    try {
      entries = readdirSync(dir, { withFileTypes: true })
    } catch {
      return
    }
    for (const e of entries) {
      if (!e.isDirectory()) continue
      const p = path.join(dir, e.name)
      if (ids.some((id) => e.name.includes(id))) hits.push(p)
      walk(p, depth + 1)
    }
  }
  walk(base, 0)
  return hits
}

// leftovers returns host resources still named after any of the sandbox IDs.
export async function leftovers(ids, { dir = dataDir } = {}) {
  ids = ids.filter(Boolean)
  if (ids.length === 0) return []
  const out = []
  for (const root of runcRoots()) {
    for (const bin of /\/(runsc|gvisor)$/.test(root) ? ['runsc'] : ['runc', 'crun']) {
      const list = await sh(bin, ['--root', root, 'list'])
      for (const id of ids) {
        for (const line of list.split('\n')) {
          if (line.includes(id)) out.push(`${bin} --root ${root}: ${line.trim()}`)
        }
      }
    }
  }
  const mountinfo = readFileSync('/proc/self/mountinfo', 'utf8')
  for (const line of mountinfo.split('\n')) {
    for (const id of ids) if (line.includes(id)) out.push(`mount: ${line}`)
  }
  const netns = await sh('ip', ['netns', 'list'])
  for (const line of netns.split('\n')) {
    for (const id of ids) if (line.includes(id)) out.push(`netns: ${line.trim()}`)
  }
  // Interface names are at most 15 bytes, so they carry an ID prefix only.
  const links = await sh('ip', ['-o', 'link', 'show'])
  for (const line of links.split('\n')) {
    const name = (line.split(':')[1] || '').trim().split('@')[0]
    for (const id of ids) if (name && name.includes(id.slice(0, 6))) out.push(`link: ${name}`)
  }
  for (const p of findCgroupDirs(ids)) out.push(`cgroup: ${p}`)
  // Loop devices carry a container sandbox's disk image (its path has the ID).
  for (const dev of existsSync('/sys/block') ? readdirSync('/sys/block').filter((d) => d.startsWith('loop')) : []) {
    let backing = ''
    try { backing = readFileSync(`/sys/block/${dev}/loop/backing_file`, 'utf8') } catch { continue }
    for (const id of ids) if (backing.includes(id)) out.push(`loop: ${dev} ${backing.trim()}`)
  }
  for (const id of ids) {
    for (const p of [path.join(dir, 'sandboxes', id), path.join(dir, 'gvisor', 'sandboxes', id), path.join(dir, 'vm', 'sandboxes', id)]) {
      if (existsSync(p)) out.push(`dir: ${p}`)
    }
  }
  const ps = await sh('ps', ['-eo', 'pid,args'])
  for (const line of ps.split('\n')) {
    for (const id of ids) if (line.includes(id)) out.push(`process: ${line.trim()}`)
  }
  return [...new Set(out)]
}

// assertNoLeaks polls until nothing named after the IDs remains (teardown
// may be asynchronous) and throws with the list otherwise.
export async function assertNoLeaks(ids, { waitMs = 20_000, dir = dataDir } = {}) {
  const deadline = Date.now() + waitMs
  let left = []
  do {
    left = await leftovers(ids, { dir })
    if (left.length === 0) return
    await sleep(1000)
  } while (Date.now() < deadline)
  throw new Error(`host resources left behind for ${ids.join(', ')}:\n  ${left.join('\n  ')}`)
}

export function hostPrimaryIPv4() {
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs || []) {
      if (a.family === 'IPv4' && !a.internal) return a.address
    }
  }
  return null
}

// ---------- a simulated uplink and internet in a network namespace ----------

const ipCmd = (...args) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString()
const ipQuiet = (...args) => { try { ipCmd(...args) } catch {} }

// simulatedUplink builds, on this host, a network namespace `ns` linked to
// the host by a veth (`hostIf` on the host, eth0 inside): the host gets
// `host`/24 and the namespace `gw`/24 plus `neighbours`; `internet`
// addresses live on the namespace's lo behind a host route `route` via the
// gateway (never the default route). IPv6 likewise when `v6` is given
// ({ host, gw, internet, route }). It then runs `python3 -c serverPy ...args`
// inside the namespace and waits for its first line of output. Returns
// { ip, teardown }; teardown is also safe to call before building.
// Nothing here reaches beyond the namespace.
export async function simulatedUplink({ ns, hostIf, host, gw, neighbours = [], internet = [], route, v6, serverPy, args = [] }) {
  let servers = null
  const teardown = () => {
    servers?.kill('SIGKILL')
    ipQuiet('route', 'del', route)
    if (v6) ipQuiet('-6', 'route', 'del', v6.route)
    ipQuiet('link', 'del', hostIf)
    ipQuiet('netns', 'del', ns)
  }
  teardown()
  ipCmd('netns', 'add', ns)
  ipCmd('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns)
  ipCmd('addr', 'add', `${host}/24`, 'dev', hostIf)
  if (v6) ipCmd('-6', 'addr', 'add', `${v6.host}/64`, 'dev', hostIf, 'nodad')
  ipCmd('link', 'set', hostIf, 'up')
  const inNs = (...a) => ipCmd('netns', 'exec', ns, 'ip', ...a)
  inNs('link', 'set', 'lo', 'up')
  for (const a of [gw, ...neighbours]) inNs('addr', 'add', `${a}/24`, 'dev', 'eth0')
  for (const a of internet) inNs('addr', 'add', `${a}/32`, 'dev', 'lo')
  if (v6) {
    inNs('-6', 'addr', 'add', `${v6.gw}/64`, 'dev', 'eth0', 'nodad')
    for (const a of v6.internet) inNs('-6', 'addr', 'add', `${a}/128`, 'dev', 'lo')
  }
  inNs('link', 'set', 'eth0', 'up')
  ipCmd('route', 'add', route, 'via', gw)
  if (v6) ipCmd('-6', 'route', 'add', v6.route, 'via', v6.gw)
  servers = spawn('ip', ['netns', 'exec', ns, 'python3', '-c', serverPy, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise((resolve, reject) => {
    servers.stdout.once('data', resolve)
    servers.once('exit', (c) => reject(new Error(`servers in ${ns} exited ${c}`)))
  })
  await sleep(2000) // the server's host network watcher sees the uplink
  return { ip: ipCmd, teardown }
}

// zoneDnsPy is Python for a simulated internet's server script: an
// authoritative answer from a zone {name: IPv4} (NXDOMAIN for names it
// lacks, A records only), and a UDP server of it on ip:53. onQuery(name,
// q), when given, sees every query first.
export const zoneDnsPy = `
import socket, struct
def dns_answer(q, zone, on_query=None):
    i, labels = 12, []
    while q[i]:
        labels.append(q[i+1:i+1+q[i]].decode()); i += 1 + q[i]
    qtype = struct.unpack('!H', q[i+1:i+3])[0]
    name = '.'.join(labels).lower()
    if on_query: on_query(name, q)
    question = q[12:i+5]
    addr = zone.get(name)
    if addr is None:
        return q[:2] + b'\\x81\\x83' + b'\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00' + question
    ans = b''
    if qtype == 1:
        ans = b'\\xc0\\x0c\\x00\\x01\\x00\\x01' + struct.pack('!IH', 300, 4) + socket.inet_aton(addr)
    return q[:2] + b'\\x81\\x80' + struct.pack('!HHHH', 1, 1 if ans else 0, 0, 0) + question + ans
def dns_udp_server(ip, zone, on_query=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((ip, 53))
    while True:
        q, a = s.recvfrom(4096)
        try: s.sendto(dns_answer(q, zone, on_query), a)
        except Exception: pass
`
