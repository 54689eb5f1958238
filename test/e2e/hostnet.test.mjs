// The host's own network, seen from a sandbox with internet access, through
// the official SDK: a simulated uplink (a network namespace on TEST-NET
// addresses, outside every fixed private range) stands in for the
// operator's LAN and its gateway, with a simulated internet address behind
// the gateway, in IPv4 and IPv6 (the documentation prefix 2001:db8::/32).
// A sandbox must reach the internet address over both and nothing on the
// host's directly connected networks; an egress policy covers IPv6 too
// (denyOut 0.0.0.0/0 denies it, allowOut opens exactly the IPv6 CIDRs it
// names); packets with forged source addresses (IPv4, IPv6) and forged ARP
// and NDP claims never leave the host.
//
// The uplink is made after `moat serve` started, so the server must follow
// address changes. Everything here stays inside namespaces this file makes.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { useServer, createSandbox, killQuietly, run, sleep, simulatedUplink, scope } from './harness.mjs'

useServer()

const NS = 'mte2e-uplink'
const HOST_IF = 'mtup0'
const GW = '203.0.113.1' // the "gateway": a neighbour on the host's connected net
const HOST = '203.0.113.2'
const INTERNET = '198.51.100.1' // beyond the gateway
const GW6 = '2001:db8:1::1'
const HOST6 = '2001:db8:1::2'
const INTERNET6 = '2001:db8:2::1'
const PORT = 18080
const UDP_PORT = 19999

let uplink = null
let captureDir = ''
const ip = (...args) => uplink.ip(...args)

// The listener in the uplink namespace: TCP on PORT on every address (it
// answers "hello"), and a UDP receiver on UDP_PORT (IPv4 and IPv6) that
// records each datagram's payload and source address.
const listener = `
import socket, threading, sys
log = open(sys.argv[1], 'a', buffering=1)
def tcp(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, ${PORT})); s.listen(64)
    while True:
        c, _ = s.accept(); c.sendall(b'hello'); c.close()
def udp(fam, addr):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if fam == socket.AF_INET6: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, ${UDP_PORT}))
    while True:
        d, a = s.recvfrom(2048); log.write(d.decode(errors='replace') + ' from ' + a[0] + '\\n')
for f, a in ((socket.AF_INET, '0.0.0.0'), (socket.AF_INET6, '::')):
    for fn in (tcp, udp):
        threading.Thread(target=fn, args=(f, a), daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`

before(async () => {
  captureDir = mkdtempSync(path.join(os.tmpdir(), 'moat-hostnet-'))
  uplink = await simulatedUplink({
    ns: NS, hostIf: HOST_IF, host: HOST, gw: GW, neighbours: ['203.0.113.3'], internet: [INTERNET],
    route: '198.51.100.0/24', v6: { host: HOST6, gw: GW6, internet: [INTERNET6], route: '2001:db8:2::/48' },
    serverPy: listener, args: [path.join(captureDir, 'udp.log')],
  })
}, { timeout: 60_000 })

after(() => {
  uplink?.teardown()
  if (captureDir) rmSync(captureDir, { recursive: true, force: true })
})

// connects returns whether a TCP connection from the sandbox to host:port
// gets "hello" within 3 s (a few tries, for addresses that must work).
async function connects(sbx, host, tries = 1) {
  const py = `import socket,sys
try:
    s=socket.create_connection((sys.argv[1], ${PORT}), timeout=3); print(s.recv(5).decode())
except Exception as e: print('fail', type(e).__name__)`
  let out = ''
  for (let i = 0; i < tries; i++) {
    const r = await run(sbx, `python3 -c "${py}" ${host}`, {}, 60_000)
    out = r.stdout.trim()
    if (out === 'hello') return true
    if (i + 1 < tries) await sleep(1000)
  }
  return false
}

test('internet access reaches the internet, not the host\'s own networks', { timeout: 300_000 }, async (t) => {
  const sbx = await createSandbox(t, { allowInternetAccess: true })
  assert.equal(await connects(sbx, INTERNET, 5), true, 'the simulated internet beyond the gateway is reachable')
  for (const addr of [GW, '203.0.113.3', HOST]) {
    assert.equal(await connects(sbx, addr), false, `${addr} on the host's connected network must be unreachable`)
  }
  assert.equal(await connects(sbx, INTERNET6, 5), true, 'the simulated IPv6 internet beyond the gateway is reachable')
  for (const addr of [GW6, HOST6]) {
    assert.equal(await connects(sbx, addr), false, `${addr} on the host's connected IPv6 network must be unreachable`)
  }
  // Every IPv6 object of the sandbox goes with it: the host side's address
  // (the sandbox's gateway) and its nftables elements.
  const hostIf = `${scope.ifPrefix}${sbx.sandboxId.slice(0, 12)}`
  const gw6 = JSON.parse(ip('-6', '-j', 'addr', 'show', 'dev', hostIf) || '[]').flatMap((l) => l.addr_info.map((a) => a.local))
  assert.ok(gw6.length === 1 && gw6[0].startsWith('fd6d:6f61:7400:'), `${hostIf} IPv6 addresses: ${gw6}`)
  await killQuietly(sbx.sandboxId)
  let left = ''
  for (let i = 0; i < 20; i++) {
    const table = execFileSync('nft', ['list', 'table', 'inet', scope.table]).toString()
    const addrs = ip('-6', '-o', 'addr', 'show')
    left = [table.includes(hostIf) && `nftables elements of ${hostIf}`, addrs.includes(gw6[0]) && `address ${gw6[0]}`].filter(Boolean).join(', ')
    if (!left) break
    await sleep(500)
  }
  assert.equal(left, '', 'IPv6 objects left after kill')
})

test('egress policy covers IPv6: denyOut 0.0.0.0/0 denies it, allowOut opens exactly the IPv6 CIDRs it names', { timeout: 300_000 }, async (t) => {
  const denied = await createSandbox(t, { allowInternetAccess: true, network: { denyOut: ['0.0.0.0/0'] } })
  assert.equal(await connects(denied, INTERNET6), false, 'deny-all must deny IPv6 too')
  const allowed = await createSandbox(t, { allowInternetAccess: true, network: { denyOut: ['0.0.0.0/0'], allowOut: [`${INTERNET6}/128`] } })
  assert.equal(await connects(allowed, INTERNET6, 5), true, 'an allowed IPv6 /128 is reachable under deny-all')
  assert.equal(await connects(allowed, INTERNET), false, 'an IPv6 allowOut opens no IPv4')
  assert.equal(await connects(allowed, GW6), false, 'allowOut never opens the host\'s IPv6 network')
  await allowed.updateNetwork({ denyOut: ['0.0.0.0/0'], allowOut: [INTERNET] })
  assert.equal(await connects(allowed, INTERNET6), false, 'updateNetwork closes IPv6 again')
  assert.equal(await connects(allowed, INTERNET, 5), true, 'and opens the IPv4 it names')
})

// sendSpoofed makes the sandbox send UDP datagrams to the simulated
// internet with a forged source (raw IPv4 and IPv6 sockets; root), and one
// honest datagram through an ordinary socket. Prints what it could do.
const spoofer = `
import socket, struct, sys
tag = sys.argv[1]
def csum(b):
    if len(b) % 2: b += b'\\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
def v4(src, dst, payload):
    udp = struct.pack('!HHHH', 40000, ${UDP_PORT}, 8 + len(payload), 0) + payload
    hdr = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return hdr[:10] + struct.pack('!H', csum(hdr)) + hdr[12:] + udp
try:
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    for src in ('203.0.113.99', '198.51.100.1', '${scope.net16}.0.6'):
        for _ in range(3):
            r.sendto(v4(src, '${INTERNET}', (tag + '-forged-' + src).encode()), ('${INTERNET}', 0))
    print('raw4 sent')
except OSError as e:
    print('raw4 refused', e.errno)
try:
    r6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
    payload = (tag + '-forged6').encode()
    udp = struct.pack('!HHHH', 40000, ${UDP_PORT}, 8 + len(payload), 0) + payload
    hdr = struct.pack('!IHBB16s16s', 0x60000000, len(udp), 17, 64,
        socket.inet_pton(socket.AF_INET6, '2001:db8:1::99'), socket.inet_pton(socket.AF_INET6, '${INTERNET6}'))
    for _ in range(3):
        r6.sendto(hdr + udp, ('${INTERNET6}', 0))
    print('raw6 sent')
except OSError as e:
    print('raw6', 'refused', e.errno)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
for _ in range(3):
    s.sendto((tag + '-honest').encode(), ('${INTERNET}', ${UDP_PORT}))
    s6.sendto((tag + '-honest6').encode(), ('${INTERNET6}', ${UDP_PORT}))
print('honest sent')
`

test('packets with forged sources never leave the host', { timeout: 300_000 }, async (t) => {
  const sbx = await createSandbox(t, { allowInternetAccess: true })
  const tag = `t${Date.now()}`
  await sbx.files.write('/tmp/spoof.py', spoofer)
  const r = await run(sbx, `python3 /tmp/spoof.py ${tag}`, { user: 'root' }, 90_000)
  assert.equal(r.exitCode, 0, `spoofer failed: ${r.stderr}`)
  assert.match(r.stdout, /honest sent/)
  // The honest datagrams arrive (masqueraded): proof the capture works.
  let seen = ''
  for (let i = 0; i < 20 && !(seen.includes(`${tag}-honest `) && seen.includes(`${tag}-honest6`)); i++) {
    await sleep(500)
    seen = readFileSync(path.join(captureDir, 'udp.log'), 'utf8')
  }
  await sleep(1000)
  seen = readFileSync(path.join(captureDir, 'udp.log'), 'utf8')
  assert.match(seen, new RegExp(`${tag}-honest from ${HOST.replaceAll('.', '\\.')}`), `honest datagram not seen:\n${seen}`)
  assert.match(seen, new RegExp(`${tag}-honest6 from ${HOST6}\n`), `honest IPv6 datagram not seen (masqueraded to ${HOST6}):\n${seen}`)
  const forged = seen.split('\n').filter((l) => l.startsWith(`${tag}-forged`))
  assert.deepEqual(forged, [], `forged datagrams reached the uplink (sandbox said: ${r.stdout.trim()})`)
})

test('forged ARP and NDP claims do not change the host\'s neighbour tables', { timeout: 300_000 }, async (t) => {
  const victim = await createSandbox(t, { allowInternetAccess: true })
  const attacker = await createSandbox(t, { allowInternetAccess: true })
  // The victim's address as the host sees it: the source of its connection.
  const v = await run(victim, `python3 -c "import socket; s=socket.socket(); s.connect(('${INTERNET}', ${PORT})); print(s.getsockname()[0])"`)
  const victimAddr = v.stdout.trim()
  assert.match(victimAddr, /^\d+\.\d+\.\d+\.\d+$/, `victim address: ${v.stdout} ${v.stderr}`)
  const arp = `
import socket, struct
try:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(('eth0', 0))
    mac = s.getsockname()[4]
    print('mac', mac.hex(':'))
    for target in ('${victimAddr}', '${HOST}', '${GW}'):
        t = socket.inet_aton(target)
        pkt = b'\\xff' * 6 + mac + b'\\x08\\x06' + struct.pack('!HHBBH', 1, 0x0800, 6, 4, 2) + mac + t + b'\\xff' * 6 + t
        for _ in range(5): s.send(pkt)
    print('arp sent')
    # NDP: unsolicited neighbour advertisements (override) for the uplink's
    # IPv6 addresses, to all nodes, with a correct ICMPv6 checksum.
    def csum(b):
        if len(b) % 2: b += b'\\0'
        x = sum(struct.unpack('!%dH' % (len(b) // 2), b)); x = (x >> 16) + (x & 0xffff); x += x >> 16
        return ~x & 0xffff
    src = socket.inet_pton(socket.AF_INET6, 'fe80::5054:ff:fe00:99')
    dst = socket.inet_pton(socket.AF_INET6, 'ff02::1')
    for target in ('${GW6}', '2001:db8:1::2'):
        body = struct.pack('!BBHI', 136, 0, 0, 0x20000000) + socket.inet_pton(socket.AF_INET6, target) + struct.pack('!BB', 2, 1) + mac
        c = csum(src + dst + struct.pack('!I', len(body)) + b'\\0\\0\\0\\x3a' + body)
        body = body[:2] + struct.pack('!H', c) + body[4:]
        frame = b'\\x33\\x33\\x00\\x00\\x00\\x01' + mac + b'\\x86\\xdd' + struct.pack('!IHBB', 0x60000000, len(body), 58, 255) + src + dst + body
        for _ in range(5): s.send(frame)
    print('ndp sent')
except OSError as e:
    print('arp refused', e.errno)
`
  await attacker.files.write('/tmp/arp.py', arp)
  const r = await run(attacker, 'python3 /tmp/arp.py', { user: 'root' })
  assert.equal(r.exitCode, 0, r.stderr)
  await sleep(1000)
  const mac = (r.stdout.match(/^mac (\S+)/m) || [])[1]
  // No host neighbour entry for a claimed address may point at the attacker.
  for (const addr of [victimAddr, HOST, GW]) {
    const entries = JSON.parse(ip('-j', 'neigh', 'show', 'to', addr) || '[]')
    for (const e of entries) {
      assert.ok(!mac || e.lladdr !== mac, `host neighbour ${addr} now at the attacker's ${mac} (${e.dev}); sandbox said ${r.stdout.trim()}`)
    }
  }
  for (const addr of [GW6, '2001:db8:1::2']) {
    const entries = JSON.parse(ip('-6', '-j', 'neigh', 'show', 'to', addr) || '[]')
    for (const e of entries) {
      assert.ok(!mac || e.lladdr !== mac, `host IPv6 neighbour ${addr} now at the attacker's ${mac} (${e.dev}); sandbox said ${r.stdout.trim()}`)
    }
  }
  // The victim still works.
  assert.equal(await connects(victim, INTERNET, 5), true, 'the victim keeps its network')
})
