// Per-sandbox egress policy (E2B's network.allowOut / denyOut and
// updateNetwork) through the official SDK, against a simulated internet:
// an uplink namespace on 198.18.50.0/24 (gateway .1, host .2) with two
// "internet" hosts 198.19.60.1 and 198.19.60.2 behind it, addresses of
// their own so this file never collides with hostnet.test.mjs. Probes use
// TCP, UDP and ICMP echo. Everything stays inside namespaces this file
// makes.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { Sandbox } from 'e2b'

import { useServer, createSandbox, run, sleep, template, simulatedUplink } from './harness.mjs'

useServer()

const NS = 'mtnp-uplink'
const HOST_IF = 'mtnp0'
const GW = '198.18.50.1'
const HOST = '198.18.50.2'
const NET1 = '198.19.60.1'
const NET2 = '198.19.60.2'
const PORT = 18090
const UDP_PORT = 19990

let uplink = null
let captureDir = ''

// TCP on PORT answers "hello"; UDP on UDP_PORT logs each datagram.
const listener = `
import socket, threading, sys
log = open(sys.argv[1], 'a', buffering=1)
def tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', ${PORT})); s.listen(64)
    while True:
        c, _ = s.accept(); c.sendall(b'hello'); c.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', ${UDP_PORT}))
    while True:
        d, a = s.recvfrom(2048); log.write(d.decode(errors='replace') + '\\n')
for fn in (tcp, udp):
    threading.Thread(target=fn, daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`

before(async () => {
  captureDir = mkdtempSync(path.join(os.tmpdir(), 'moat-netpolicy-'))
  uplink = await simulatedUplink({
    ns: NS, hostIf: HOST_IF, host: HOST, gw: GW, internet: [NET1, NET2], route: '198.19.60.0/24',
    serverPy: listener, args: [path.join(captureDir, 'udp.log')],
  })
}, { timeout: 60_000 })

after(() => {
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
  const udp = readFileSync(path.join(captureDir, 'udp.log'), 'utf8').split('\n').includes(tag)
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
