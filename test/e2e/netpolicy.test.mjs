// Per-sandbox egress policy (E2B's network.allowOut / denyOut,
// updateNetwork and allowPublicTraffic) through the official SDK, against
// a simulated internet: an uplink namespace on 198.18.50.0/24 (gateway .1,
// host .2) with two "internet" hosts 198.19.60.1 and .2 and a DNS server on
// 198.19.60.53 behind it, addresses of their own so this file never
// collides with hostnet.test.mjs. Probes use TCP, UDP and ICMP echo.
//
// It proves that:
//   - deny-all blocks TCP, UDP and ICMP; an allow list of one address
//     allows exactly it; updateNetwork switches within a second;
//   - root in the sandbox cannot get past the policy (netprobe/, a static
//     Go program run as root): it deletes every nftables table in its own
//     namespace, replaces its routes, adds an address, then sends TCP, UDP,
//     raw ICMP, a hand-built TCP SYN, raw IP protocol 253 and a
//     forged-source datagram; it rewrites /etc/resolv.conf and asks every
//     resolver it can name for a random name (DNS exfiltration). Judged by
//     what arrived, not by what the sandbox saw: the uplink namespace logs
//     every IPv4 frame it receives and every DNS query, and a sniffer on
//     all of the host's interfaces (except sandboxes' own veths) looks for
//     the random tags;
//   - allowPublicTraffic: false makes a sandbox's ports answer 403 without
//     the trafficAccessToken and 200 with it, by header and by host name
//     routing, while envd keeps working with its own token.
// Everything stays inside namespaces this file makes.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'

import { Sandbox } from 'e2b'

import { useServer, createSandbox, run, sleep, template, simulatedUplink, repoRoot, within, scope } from './harness.mjs'

useServer()

const NS = 'mtnp-uplink'
const HOST_IF = 'mtnp0'
const GW = '198.18.50.1'
const HOST = '198.18.50.2'
const NET1 = '198.19.60.1'
const NET2 = '198.19.60.2'
const DNS = '198.19.60.53'
const PORT = 18090
const UDP_PORT = 19990

let uplink = null
let captureDir = ''
let hostSniffer = null

// In the uplink namespace: TCP on PORT answers "hello"; UDP on UDP_PORT
// logs each datagram (udp.log); a DNS server on DNS:53 (UDP and TCP) logs
// each query's name and bytes (dns.log) and answers REFUSED; and a packet
// socket on eth0 logs every IPv4 frame that arrives (frames.log: protocol,
// source, destination, destination port, the probe tag it carries or -).
const listener = `
import socket, threading, sys, struct, os, re
d = sys.argv[1]
logs = {n: open(os.path.join(d, n), 'a', buffering=1) for n in ('udp.log', 'dns.log', 'frames.log')}
TAG = re.compile(rb'mtx[a-z0-9]{10}')
def tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', ${PORT})); s.listen(64)
    while True:
        c, _ = s.accept(); c.sendall(b'hello'); c.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', ${UDP_PORT}))
    while True:
        d, a = s.recvfrom(2048); logs['udp.log'].write(d.decode(errors='replace') + '\\n')
def qlog(q):
    i, labels = 12, []
    while i < len(q) and q[i]:
        labels.append(q[i+1:i+1+q[i]].decode(errors='replace')); i += 1 + q[i]
    logs['dns.log'].write('.'.join(labels).lower() + ' ' + q.hex() + '\\n')
    return q[:2] + b'\\x81\\x85' + bytes(8)
def dns_udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('${DNS}', 53))
    while True:
        q, a = s.recvfrom(4096); s.sendto(qlog(q), a)
def dns_tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('${DNS}', 53)); s.listen(16)
    while True:
        c, _ = s.accept(); c.settimeout(5)
        try:
            n = struct.unpack('!H', c.recv(2))[0]; q = b''
            while len(q) < n: q += c.recv(n - len(q))
            r = qlog(q); c.sendall(struct.pack('!H', len(r)) + r)
        except Exception: pass
        c.close()
def sniff():
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800)); s.bind(('eth0', 0))
    while True:
        f, a = s.recvfrom(65535)
        if a[2] == socket.PACKET_OUTGOING or len(f) < 34: continue
        ip = f[14:]; ihl = (ip[0] & 15) * 4; p = ip[9]
        dp = struct.unpack('!H', ip[ihl+2:ihl+4])[0] if p in (6, 17) and len(ip) >= ihl + 4 else 0
        m = TAG.search(f)
        logs['frames.log'].write('%d %s %s %d %s\\n' % (p, socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20]), dp, m.group().decode() if m else '-'))
for fn in (tcp, udp, dns_udp, dns_tcp, sniff):
    threading.Thread(target=fn, daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`

// On the host: every frame on any interface that carries a probe tag is
// logged (host.log: interface, tag). A tag anywhere but on the probing
// sandbox's own veth (where its packets arrive before the policy judges
// them) means a packet got past the policy: out of the host, into the
// uplink, to another sandbox or to a host service (loopback included).
const hostSnifferPy = `
import socket, re, sys
out = open(sys.argv[1], 'a', buffering=1)
TAG = re.compile(rb'mtx[a-z0-9]{10}')
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
print('ready', flush=True)
while True:
    f, a = s.recvfrom(65535)
    for m in TAG.finditer(f): out.write('%s %s\\n' % (a[0], m.group().decode()))
`

before(async () => {
  captureDir = mkdtempSync(path.join(os.tmpdir(), 'moat-netpolicy-'))
  // netprobe: built here, uploaded into sandboxes by the root tests.
  execFileSync('go', ['build', '-trimpath', '-o', path.join(captureDir, 'netprobe'), './test/e2e/netprobe'],
    { cwd: repoRoot, env: { ...process.env, CGO_ENABLED: '0' }, stdio: ['ignore', 'ignore', 'inherit'] })
  hostSniffer = spawn('python3', ['-c', hostSnifferPy, path.join(captureDir, 'host.log')], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise((resolve, reject) => {
    hostSniffer.stdout.once('data', resolve)
    hostSniffer.once('exit', (c) => reject(new Error(`host sniffer exited ${c}`)))
  })
  uplink = await simulatedUplink({
    ns: NS, hostIf: HOST_IF, host: HOST, gw: GW, internet: [NET1, NET2, DNS], route: '198.19.60.0/24',
    serverPy: listener, args: [captureDir],
  })
}, { timeout: 240_000 })

after(() => {
  hostSniffer?.kill('SIGKILL')
  uplink?.teardown()
  if (captureDir) rmSync(captureDir, { recursive: true, force: true })
})

// probe prints, for one address, "tcp:ok|fail icmp:ok|fail" and sends a
// tagged UDP datagram.
const prober = `
import socket, struct, sys, time
host, tag = sys.argv[1], sys.argv[2]
out = []
try:
    s = socket.create_connection((host, ${PORT}), timeout=2); out.append('tcp:' + ('ok' if s.recv(5) == b'hello' else 'bad'))
except Exception:
    out.append('tcp:fail')
echo = struct.pack('!BBHHH', 8, 0, 0xf7fe, 0, 1)  # checksum precomputed for id 0, seq 1
def ping():
    try:
        # A ping socket, where ping_group_range allows it (containers) ...
        i = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError:
        # ... else a raw socket (root in a microVM guest, whose
        # ping_group_range is Linux's default: nobody).
        r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); r.settimeout(2)
        r.sendto(echo, (host, 0))
        end = time.time() + 2
        while time.time() < end:
            d, a = r.recvfrom(256)
            if a[0] == host and d[(d[0] & 15) * 4] == 0:
                return True
        return False
    i.settimeout(2)
    i.sendto(echo, (host, 0))
    return i.recv(64)[0] == 0
try:
    out.append('icmp:' + ('ok' if ping() else 'bad'))
except Exception:
    out.append('icmp:fail')
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    u.sendto(tag.encode(), (host, ${UDP_PORT}))
print(' '.join(out))
`

let seq = 0
// reach returns { tcp, icmp, udp } booleans for the sandbox → host.
async function reach(sbx, host) {
  const tag = `np${Date.now()}-${seq++}`
  // As root: a microVM guest's ping_group_range is Linux's default (no
  // group), so the probe falls back to a raw socket, which needs root.
  const r = await run(sbx, `python3 /tmp/probe.py ${host} ${tag}`, { user: 'root' }, 60_000)
  assert.equal(r.exitCode, 0, `probe failed: ${r.stderr}`)
  await sleep(500)
  const udp = captured('udp.log').includes(tag)
  return { tcp: r.stdout.includes('tcp:ok'), icmp: r.stdout.includes('icmp:ok'), udp }
}

const OPEN = { tcp: true, icmp: true, udp: true }
const CLOSED = { tcp: false, icmp: false, udp: false }

async function prepared(t, opts) {
  const sbx = await createSandbox(t, opts)
  await sbx.files.write('/tmp/probe.py', prober)
  return sbx
}

// eventually retries a reach that must become true (first packets through a
// fresh NAT path can be slow on a loaded host).
async function reachEventually(sbx, host, want, ms = 5000) {
  let got
  for (const end = Date.now() + ms; ;) {
    got = await reach(sbx, host)
    if (JSON.stringify(got) === JSON.stringify(want) || Date.now() > end) return got
    await sleep(200)
  }
}

test('denyOut 0.0.0.0/0 blocks TCP, UDP and ICMP to the internet', { timeout: 300_000 }, async (t) => {
  const sbx = await prepared(t, { allowInternetAccess: true, network: { denyOut: ['0.0.0.0/0'] } })
  assert.deepEqual(await reach(sbx, NET1), CLOSED)
  assert.deepEqual(await reach(sbx, NET2), CLOSED)
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.deepEqual(info.network?.denyOut, ['0.0.0.0/0'])
})

test('allowOut one /32 with deny-all reaches exactly it', { timeout: 300_000 }, async (t) => {
  const sbx = await prepared(t, { network: { allowOut: [NET1], denyOut: ['0.0.0.0/0'] } })
  assert.deepEqual(await reachEventually(sbx, NET1, OPEN), OPEN)
  assert.deepEqual(await reach(sbx, NET2), CLOSED)
  assert.deepEqual(await reach(sbx, GW), CLOSED, 'the uplink gateway (a host network) stays blocked')
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.deepEqual(info.network?.allowOut, [`${NET1}/32`])
})

test('updateNetwork switches deny-all → allow → deny within a second', { timeout: 300_000 }, async (t) => {
  const sbx = await prepared(t, { allowInternetAccess: true, network: { denyOut: ['0.0.0.0/0'] } })
  assert.deepEqual(await reach(sbx, NET1), CLOSED)
  let start = Date.now()
  await sbx.updateNetwork({ allowOut: [NET1], denyOut: ['0.0.0.0/0'] })
  assert.ok(Date.now() - start < 1000, `update took ${Date.now() - start} ms`)
  assert.deepEqual(await reachEventually(sbx, NET1, OPEN, 1000), OPEN)
  assert.deepEqual(await reach(sbx, NET2), CLOSED)
  start = Date.now()
  await sbx.updateNetwork({ denyOut: ['0.0.0.0/0'] })
  assert.ok(Date.now() - start < 1000, `update took ${Date.now() - start} ms`)
  assert.deepEqual(await reach(sbx, NET1), CLOSED)
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(info.network?.allowOut, undefined)
  assert.deepEqual(info.network?.denyOut, ['0.0.0.0/0'])
})

test('a domain in allowOut without denyOut 0.0.0.0/0 is refused with a clear 400 (as on E2B)', { timeout: 120_000 }, async () => {
  await assert.rejects(
    Sandbox.create(template, { network: { allowOut: ['example.com'], denyOut: ['198.19.60.0/24'] } }),
    (err) => /allowed domains in allowOut/.test(err.message) && /0\.0\.0\.0\/0/.test(err.message),
  )
})

test('a malformed CIDR is refused with 400 naming it', { timeout: 120_000 }, async () => {
  await assert.rejects(
    Sandbox.create(template, { network: { denyOut: ['198.19.60.0/33'] } }),
    (err) => /198\.19\.60\.0\/33/.test(err.message) && /not a valid CIDR/.test(err.message),
  )
})

// ---------- root inside the sandbox against the policy ----------

// captured returns the lines of one of the capture logs (empty before the
// first line is written).
function captured(name) {
  const f = path.join(captureDir, name)
  return existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean) : []
}

// newTag is a random probe tag: what the sniffers look for.
const newTag = () => `mtx${randomBytes(8).toString('hex').slice(0, 10)}`
const hex = (s) => Buffer.from(s).toString('hex')

// withRootProbe uploads netprobe into sbx and returns a function running
// it as root that parses its JSON answer.
async function withRootProbe(sbx) {
  await within(120_000, 'upload netprobe', sbx.files.write('/tmp/netprobe', readFileSync(path.join(captureDir, 'netprobe'))))
  const r = await run(sbx, 'chmod 755 /tmp/netprobe', { user: 'root' })
  assert.equal(r.exitCode, 0, r.stderr)
  return async (...args) => {
    const out = await run(sbx, `/tmp/netprobe ${args.join(' ')}`, { user: 'root' }, 120_000)
    assert.equal(out.exitCode, 0, `netprobe ${args[0]}: ${out.stderr}`)
    return JSON.parse(out.stdout)
  }
}

// arrivals runs fn (probes from sbx) and returns what reached the
// simulated internet and the host's interfaces meanwhile: new uplink frames
// (all of them, and those carrying tag), host frames carrying tag outside
// sbx's own veth (netpolicy names it mh, or the scope's prefix, + the ID's
// first 12 characters),
// UDP and DNS log lines naming tag.
async function arrivals(sbx, tag, fn) {
  const ownVeth = `${scope.ifPrefix}${sbx.sandboxId.slice(0, 12)}`
  const from = { frames: captured('frames.log').length }
  const result = await fn()
  await sleep(1500) // let stragglers land in the logs
  const frames = captured('frames.log').slice(from.frames)
  return {
    result,
    frames,
    tagged: frames.filter((l) => l.includes(tag)),
    host: captured('host.log').filter((l) => l.includes(tag) && !l.startsWith(`${ownVeth} `)),
    ownVeth: captured('host.log').filter((l) => l.includes(tag) && l.startsWith(`${ownVeth} `)).length,
    udp: captured('udp.log').filter((l) => l.includes(tag)),
    dns: captured('dns.log').filter((l) => l.includes(tag) || l.includes(hex(tag))),
  }
}

function assertNothingArrived(got, what) {
  const msg = `${what}: ${JSON.stringify({ ...got, frames: got.frames.slice(0, 20) }, null, 1)}`
  assert.deepEqual(got.frames, [], `frames reached the uplink namespace during ${msg}`)
  assert.deepEqual(got.host, [], `a tagged packet left through a host interface during ${msg}`)
  assert.deepEqual(got.udp, [], msg)
  assert.deepEqual(got.dns, [], msg)
}

test('root in a deny-all sandbox cannot lift the policy: nftables flushed, own routes and address, raw and forged packets', { timeout: 400_000 }, async (t) => {
  const sbx = await createSandbox(t, { allowInternetAccess: true, network: { denyOut: ['0.0.0.0/0'] } })
  const netprobe = await withRootProbe(sbx)
  // The VM guest's kernel lets root do all of it, a container refuses the
  // netlink writes (no CAP_NET_ADMIN); neither may matter.
  const took = await netprobe('takeover', `${scope.net16}.255.254`)
  t.diagnostic(`takeover: ${JSON.stringify(took)}`)
  const tag = newTag()
  const got = await arrivals(sbx, tag, () => netprobe('send', hex(tag), PORT, UDP_PORT, NET1, NET2))
  t.diagnostic(`send: ${JSON.stringify(got.result)}`)
  for (const h of [NET1, NET2]) {
    assert.match(got.result[`tcp ${h}`], /^error/, `TCP to ${h} connected`)
    for (const k of ['icmp', 'syn']) assert.notEqual(got.result[`${k} ${h}`], 'reply', `${k} to ${h} answered`)
  }
  assertNothingArrived(got, 'the probes')
  assert.ok(got.ownVeth > 0, 'the host sniffer saw the probes on the sandbox\'s own veth')
  // Control: the sandbox still works, an update still applies after all
  // that, and the sniffers do see what passes (NET1, now allowed).
  await sbx.updateNetwork({ allowOut: [NET1], denyOut: ['0.0.0.0/0'] })
  const tag2 = newTag()
  const got2 = await arrivals(sbx, tag2, () => netprobe('send', hex(tag2), PORT, UDP_PORT, NET1, NET2))
  assert.match(got2.result[`tcp ${NET1}`], /^connected/, JSON.stringify(got2.result))
  assert.match(got2.result[`tcp ${NET2}`], /^error/)
  assert.ok(got2.tagged.some((l) => l.split(' ')[2] === NET1), `no tagged frame to NET1: ${got2.frames}`)
  assert.ok(got2.tagged.every((l) => l.split(' ')[2] === NET1), `a tagged frame to NET2: ${got2.tagged}`)
  assert.ok(got2.host.some((l) => l.startsWith(`${HOST_IF} `)), `the host sniffer missed the tag on ${HOST_IF}`)
})

test('DNS exfiltration under plain deny-all: a random name reaches no resolver, however root asks', { timeout: 400_000 }, async (t) => {
  const sbx = await createSandbox(t, { allowInternetAccess: true, network: { denyOut: ['0.0.0.0/0'] } })
  const netprobe = await withRootProbe(sbx)
  const tag = newTag()
  const got = await arrivals(sbx, tag, () => netprobe('dns', hex(`${tag}.exfil.test`), DNS, NET1))
  t.diagnostic(`dns: ${JSON.stringify(got.result)}`)
  for (const [k, v] of Object.entries(got.result)) {
    assert.doesNotMatch(v, /^rcode=|^answer/, `${k} answered: ${v}`)
  }
  assertNothingArrived(got, 'the lookups')
  assert.ok(got.ownVeth > 0, 'the host sniffer saw the lookups on the sandbox\'s own veth')
  assert.ok(Object.keys(got.result).length >= 8, 'the probe asked its own, the simulated and public resolvers')
  // Control: with the DNS server's address allowed, the same kind of query
  // does reach it and its log.
  await sbx.updateNetwork({ allowOut: [DNS], denyOut: ['0.0.0.0/0'] })
  const tag2 = newTag()
  const got2 = await arrivals(sbx, tag2, () => netprobe('ask', hex(`${tag2}.exfil.test`), DNS))
  assert.match(got2.result[`udp ${DNS}`], /^rcode=5/, JSON.stringify(got2.result))
  assert.ok(got2.dns.length > 0 && got2.host.length > 0, 'the DNS log and the host sniffer saw the allowed query')
})

// ---------- allowPublicTraffic ----------

// portRequest sends GET / to the sandbox's port through Moat's proxy, routed
// by the E2b-Sandbox-* headers (byHost false) or by the host name
// sbx.getHost(port) (byHost true), with extra headers.
function portRequest(sbx, port, { byHost = false, headers = {} } = {}) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  const route = byHost ? { host: sbx.getHost(port) } : { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port) }
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: '/', headers: { ...route, ...headers } }, (res) => {
      let body = ''
      res.on('data', (c) => { body += c })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.setTimeout(20_000, () => req.destroy(new Error('request timed out')))
    req.on('error', reject)
    req.end()
  })
}

// serveHTTP starts python3 -m http.server on port in sbx and waits until
// the sandbox itself gets an answer from it.
async function serveHTTP(sbx, port) {
  await sbx.commands.run(`cd /tmp && python3 -m http.server ${port}`, { background: true })
  for (const end = Date.now() + 60_000; Date.now() < end; await sleep(500)) {
    const r = await run(sbx, `python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${port}/')"`)
    if (r.exitCode === 0) return
  }
  assert.fail(`http.server on ${port} never answered inside the sandbox`)
}

test('allowPublicTraffic: false needs the traffic token on exposed ports; envd keeps its own token', { timeout: 300_000 }, async (t) => {
  const sbx = await createSandbox(t, { network: { allowPublicTraffic: false } })
  assert.ok(sbx.trafficAccessToken, 'create returned a trafficAccessToken')
  await serveHTTP(sbx, 8000)
  const token = { 'e2b-traffic-access-token': sbx.trafficAccessToken }
  for (const byHost of [false, true]) {
    const how = byHost ? 'by host name' : 'by header'
    assert.equal((await portRequest(sbx, 8000, { byHost })).status, 403, `no token, ${how}`)
    assert.equal((await portRequest(sbx, 8000, { byHost, headers: { 'e2b-traffic-access-token': 'wrong' } })).status, 403, `wrong token, ${how}`)
    const ok = await portRequest(sbx, 8000, { byHost, headers: token })
    assert.equal(ok.status, 200, `token, ${how}: ${ok.body.slice(0, 200)}`)
    assert.match(ok.body, /Directory listing/)
  }
  // envd traffic (commands, files) goes on with the envd token alone.
  assert.equal((await run(sbx, 'echo envd-ok')).stdout.trim(), 'envd-ok')
  await sbx.files.write('/tmp/x.txt', 'files-ok')
  assert.equal(await sbx.files.read('/tmp/x.txt'), 'files-ok')
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(info.network?.allowPublicTraffic, false)
})

test('allowPublicTraffic default (true): exposed ports answer without a token', { timeout: 300_000 }, async (t) => {
  const sbx = await createSandbox(t, {})
  await serveHTTP(sbx, 8000)
  for (const byHost of [false, true]) {
    const r = await portRequest(sbx, 8000, { byHost })
    assert.equal(r.status, 200, `${byHost ? 'by host name' : 'by header'}: ${r.body.slice(0, 200)}`)
  }
})
