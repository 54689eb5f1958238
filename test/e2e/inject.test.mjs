// Header injection at egress (issue 16): network.rules with
// ${e2b.secrets.NAME} placeholders through the official SDK, against a
// simulated internet: an uplink namespace on 198.18.94.0/24 (gateway .1,
// host .2) with an HTTPS server on 198.19.95.10 (api.inject.test) and
// .11 (other.inject.test) whose certificate comes from a test CA of this
// file (handed to `moat serve` as MOAT_EGRESS_UPSTREAM_CA), a plain HTTP
// server on .10:80, and a DNS server on 198.19.95.53 (MOAT_DNS_UPSTREAM).
// The HTTPS server records every request's headers to a file this test
// reads on the host, and answers with the SHA-256 of the Authorization
// header it got, never the header itself. Addresses and names (mtij-*)
// are this file's own; nothing leaves the namespaces it makes.
//
// It proves that the upstream gets the secret's real value from curl and
// Python (and Node when the template has it) while the value is nowhere in
// the sandbox: not in any process's environment, not in its filesystem,
// not in the memory of the Python process that made a request, and not in
// the packets on the sandbox's interface (captured with an AF_PACKET raw
// socket as root inside the sandbox where the runtime allows it, a microVM,
// and always on the host side of the sandbox's veth). The scans inside the
// sandbox never learn the value: they look for its public prefix and
// compare the SHA-256 of each candidate (a planted decoy proves each scan
// finds what is there). It also proves that a domain without rules is not
// intercepted (the sandbox sees the upstream's own certificate), that
// plain HTTP to a rule domain is 403, that a deleted secret fails with 502
// naming it, that updateNetwork installs the CA in a running sandbox and
// replaces rules live on a kept-alive connection, that rules survive
// pause/resume and a server restart, and that bad rules are a 4xx with
// nothing applied.
//
// MOAT_E2E_BENCH=1 also measures HTTPS request latency through the proxy
// with an injected header (intercepted) and without (spliced), medians and
// their ratio (scripts/test.sh sets it for the container runtime).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createHash, randomBytes, randomUUID, X509Certificate } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { Sandbox, Secret } from 'e2b'

import { useServer, createSandbox, run, sleep, within, template, simulatedUplink, zoneDnsPy, scope } from './harness.mjs'

const NS = 'mtij-uplink'
const HOST_IF = 'mtij0'
const GW = '198.18.94.1'
const HOST = '198.18.94.2'
const WEB = '198.19.95.10'
const WEB2 = '198.19.95.11'
const DNS = '198.19.95.53'
const API = 'api.inject.test'
const OTHER = 'other.inject.test'
const BADCERT = 'api.badcert.test' // served with the inject.test certificate: Moat must not verify it
const ZONE = { [API]: WEB, [OTHER]: WEB2, [BADCERT]: WEB }

// The test CA and the upstream's certificate exist before the server
// starts (it reads MOAT_EGRESS_UPSTREAM_CA once, at start).
const dir = mkdtempSync(path.join(os.tmpdir(), 'moat-inject-'))
const openssl = (...args) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] })
openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=moat inject test CA',
  '-keyout', path.join(dir, 'ca.key'), '-out', path.join(dir, 'ca.pem'))
writeFileSync(path.join(dir, 'ext.cnf'), 'subjectAltName=DNS:inject.test,DNS:*.inject.test\nextendedKeyUsage=serverAuth\n')
openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=inject.test', '-keyout', path.join(dir, 'key.pem'),
  '-out', path.join(dir, 'req.csr'))
openssl('x509', '-req', '-in', path.join(dir, 'req.csr'), '-CA', path.join(dir, 'ca.pem'), '-CAkey', path.join(dir, 'ca.key'),
  '-CAcreateserial', '-days', '2', '-extfile', path.join(dir, 'ext.cnf'), '-out', path.join(dir, 'cert.pem'))
const upstreamFingerprint = new X509Certificate(readFileSync(path.join(dir, 'cert.pem'))).fingerprint256.replaceAll(':', '').toLowerCase()

if (!process.env.MOAT_E2E_API_URL) {
  process.env.MOAT_DNS_UPSTREAM = DNS
  process.env.MOAT_EGRESS_UPSTREAM_CA = path.join(dir, 'ca.pem')
}
const ctx = useServer()

// One process in the uplink namespace: HTTPS on :443 (both addresses),
// HTTP on :80, DNS on :53. Every request is logged as a JSON line with its
// headers; the answer carries only the SHA-256 of its Authorization.
const serverPy = `
import http.server, socketserver, ssl, json, hashlib, sys, os, threading, socket, struct
d = sys.argv[1]
zone = json.loads(sys.argv[2])
dns_ip = sys.argv[3]
rlog = open(os.path.join(d, 'requests.log'), 'a', buffering=1)
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # head and body are two writes
    def log_message(self, *a): pass
    def any(self):
        n = int(self.headers.get('Content-Length') or 0)
        if n: self.rfile.read(n)
        rec = {'scheme': self.server.scheme, 'local': self.connection.getsockname()[0], 'peer': self.client_address[1],
               'method': self.command, 'path': self.path, 'headers': [[k, v] for k, v in self.headers.items()]}
        with lock: rlog.write(json.dumps(rec) + '\\n')
        out = ('auth-sha256=%s\\n' % hashlib.sha256(self.headers.get('Authorization', '').encode()).hexdigest()).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = any
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    def handle_error(self, request, client_address): pass  # a client refusing the test CA is expected
def https():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, 'cert.pem'), os.path.join(d, 'key.pem'))
    s = S(('0.0.0.0', 443), H); s.scheme = 'https'
    s.socket = ctx.wrap_socket(s.socket, server_side=True, do_handshake_on_connect=False)
    s.serve_forever()
def plain():
    s = S(('0.0.0.0', 80), H); s.scheme = 'http'; s.serve_forever()
${zoneDnsPy}
def dns(): dns_udp_server(dns_ip, zone)
for fn in (https, plain, dns):
    threading.Thread(target=fn, daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`

let uplink = null
before(async () => {
  uplink = await simulatedUplink({
    ns: NS, hostIf: HOST_IF, host: HOST, gw: GW, internet: [WEB, WEB2, DNS], route: '198.19.95.0/24',
    serverPy, args: [dir, JSON.stringify(ZONE), DNS],
  })
}, { timeout: 60_000 })

after(() => {
  uplink?.teardown()
  rmSync(dir, { recursive: true, force: true })
})

// requests returns the requests the upstream logged whose path starts
// with prefix.
function requests(prefix) {
  const f = path.join(dir, 'requests.log')
  if (!existsSync(f)) return []
  return readFileSync(f, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
    .filter((r) => r.path.startsWith(prefix))
}
const header = (req, name) => req.headers.filter(([k]) => k.toLowerCase() === name.toLowerCase()).map(([, v]) => v)
const sha256 = (s) => createHash('sha256').update(s).digest('hex')

const tag = randomUUID().slice(0, 8)
// Secret values share a public prefix, so a scan inside the sandbox can
// find candidates without knowing the value (it compares their hashes).
const PREFIX = 'moatinj-'
const newValue = () => PREFIX + randomBytes(16).toString('hex')

async function newSecret(t, name, value) {
  const s = await within(30_000, 'Secret.create', () => Secret.create(name, value))
  t.after(() => Secret.destroy(s.secretId).catch(() => {}))
  return s
}

const bearer = (secret) => ({ [API]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(secret)}` } } }] })
const policy = (rules, allowOut = [API, OTHER]) => ({ allowOut, denyOut: ['0.0.0.0/0'], ...(rules ? { rules } : {}) })

// The probes inside the sandbox (python3 from Debian's template).
//   get URL [HEADER VALUE]   GET URL (urllib, verified), print status and body
//   requests URL             the same with requests, if installed ("absent" otherwise)
//   cert HOST IP             the SHA-256 of the certificate HOST:443 at IP shows (not verified)
//   keepalive HOST           four GETs on one kept-alive connection, each after /tmp/go<i> appears
//   fs | environ             scan the filesystem (all but /proc, /sys) or every /proc/*/environ
//   memtest URL              a child python GETs URL with DECOY in its environment and waits;
//                            this process then scans the child's /proc/<pid>/mem and environ
//   cap IFACE FILE STOPFILE  AF_PACKET capture of IFACE into FILE until STOPFILE exists
//   scanfile FILE            scan one file
//   bench N                  N rounds of one new HTTPS connection + GET to each host, and N GETs
//                            on one kept-alive connection per host; JSON of the times in ms
// Scans print JSON {target: [...], decoy: [...]}: where a candidate
// hashing to TARGET / DECOY (argv of the scan) was found.
const probePy = `
import hashlib, http.client, json, os, socket, ssl, subprocess, sys, time, urllib.request
PREFIX = ${JSON.stringify(PREFIX)}.encode()
N = len(PREFIX) + 32
op = sys.argv[1]
hashes = json.loads(os.environ.get('SCAN_HASHES', '{}'))
def scan(buf, found, where):
    i = buf.find(PREFIX)
    while i >= 0:
        h = hashlib.sha256(buf[i:i+N]).hexdigest()
        for name, want in hashes.items():
            if h == want and where not in found[name]: found[name].append(where)
        i = buf.find(PREFIX, i + 1)
def scan_stream(f, found, where, limit=1 << 40):
    tail, read = b'', 0
    while read < limit:
        b = f.read(min(4 << 20, limit - read))
        if not b: break
        read += len(b)
        scan(tail + b, found, where)
        tail = b[-(N - 1):]
def new_found(): return {k: [] for k in hashes}
def scan_mem(pid, found):
    regions = 0
    with open('/proc/%d/maps' % pid) as maps, open('/proc/%d/mem' % pid, 'rb', 0) as mem:
        for line in maps:
            f = line.split()
            if 'r' not in f[1] or (len(f) > 5 and f[5] in ('[vvar]', '[vsyscall]', '[vvar_vclock]')): continue
            lo, hi = (int(x, 16) for x in f[0].split('-'))
            try:
                mem.seek(lo); scan_stream(mem, found, 'mem:%s' % (f[5] if len(f) > 5 else hex(lo)), hi - lo); regions += 1
            except (OSError, ValueError, OverflowError): pass
    return regions
def tls_ctx(verify):
    c = ssl.create_default_context()
    if not verify: c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
    return c
try:
    if op == 'get':
        req = urllib.request.Request(sys.argv[2])
        if len(sys.argv) > 4: req.add_header(sys.argv[3], sys.argv[4])
        try:
            r = urllib.request.urlopen(req, timeout=20); print(r.status, r.read().decode().strip())
        except urllib.error.HTTPError as e:
            print(e.code, e.read().decode().strip())
    elif op == 'requests':
        try: import requests
        except ImportError: print('absent'); sys.exit(0)
        r = requests.get(sys.argv[2], timeout=20); print(r.status_code, r.text.strip())
    elif op == 'cert':
        ip = socket.gethostbyname(sys.argv[2])  # through Moat's resolver, as any client would
        s = tls_ctx(False).wrap_socket(socket.create_connection((ip, 443), timeout=10), server_hostname=sys.argv[2])
        print(ip, hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest())
    elif op == 'keepalive':
        c = http.client.HTTPSConnection(sys.argv[2], timeout=20, context=tls_ctx(True))
        first = None
        for i in range(1, 5):
            while not os.path.exists('/tmp/go%d' % i): time.sleep(0.05)
            try:
                c.request('GET', '/keepalive/%d' % i, headers={'X-Rule': 'sandbox'})
                r = c.getresponse(); body = r.read().decode().strip()
                if first is None: first = c.sock
                print(i, r.status, 'same-connection' if c.sock is first else 'new-connection', body, flush=True)
            except Exception as e:
                print(i, 'fail', type(e).__name__, flush=True); c.close(); break
            finally:
                open('/tmp/done%d' % i, 'w').close()
    elif op == 'fs':
        found, files = new_found(), 0
        for root, dirs, names in os.walk('/'):
            if root == '/': dirs[:] = [x for x in dirs if x not in ('proc', 'sys')]
            for n in names:
                p = os.path.join(root, n)
                try:
                    if not os.path.isfile(p) or os.path.islink(p): continue
                    with open(p, 'rb') as f: scan_stream(f, found, p); files += 1
                except OSError: pass
        found['files'] = files; print(json.dumps(found))
    elif op == 'environ':
        found, read, unreadable = new_found(), [], []
        for pid in os.listdir('/proc'):
            if not pid.isdigit() or int(pid) == os.getpid(): continue
            try:
                with open('/proc/%s/environ' % pid, 'rb') as f: scan(f.read(), found, 'environ:%s' % pid)
                read.append(int(pid))
            except FileNotFoundError: pass
            except OSError as e: unreadable.append(int(pid))
        found['read'] = read; found['unreadable'] = unreadable; print(json.dumps(found))
    elif op == 'memtest':
        env = dict(os.environ, DECOY=os.environ['DECOY_VALUE'])
        del env['DECOY_VALUE']
        child = subprocess.Popen([sys.executable, '-c', 'import urllib.request,sys,time\\nr=urllib.request.urlopen(sys.argv[1],timeout=20)\\nprint(r.status,r.read().decode().strip(),flush=True)\\ntime.sleep(120)', sys.argv[2]],
                                 stdout=subprocess.PIPE, env=env)
        line = child.stdout.readline().decode().strip()
        found = new_found()
        regions = scan_mem(child.pid, found)
        with open('/proc/%d/environ' % child.pid, 'rb') as f: scan(f.read(), found, 'environ')
        child.kill(); child.wait()
        found['response'] = line; found['regions'] = regions; print(json.dumps(found))
    elif op == 'cap':
        try:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
            s.bind((sys.argv[2], 0))
        except PermissionError as e:
            print('unavailable', e, flush=True); sys.exit(0)
        s.settimeout(0.2)
        out = open(sys.argv[3], 'wb')
        print('capturing', flush=True)
        frames = 0
        while not os.path.exists(sys.argv[4]):
            try: out.write(s.recv(65536)); frames += 1
            except socket.timeout: pass
        out.close(); print('frames', frames, flush=True)
    elif op == 'scanfile':
        found = new_found()
        with open(sys.argv[2], 'rb') as f: scan_stream(f, found, sys.argv[2])
        print(json.dumps(found))
    elif op == 'bench':
        n = int(sys.argv[2]); res = {}
        def once(host, conn=None):
            t = time.perf_counter()
            c = conn or http.client.HTTPSConnection(host, timeout=20, context=tls_ctx(False))
            c.request('GET', '/bench'); r = c.getresponse(); r.read()
            assert r.status == 200, r.status
            if conn is None: c.close()
            return (time.perf_counter() - t) * 1000
        for host in (${JSON.stringify(API)}, ${JSON.stringify(OTHER)}):
            res[host] = {'new': [], 'kept': []}
        for i in range(n):
            for host in (${JSON.stringify([API, OTHER])} if i % 2 == 0 else ${JSON.stringify([OTHER, API])}):
                res[host]['new'].append(once(host))
        for host in res:
            c = http.client.HTTPSConnection(host, timeout=20, context=tls_ctx(False))
            once(host, c)
            res[host]['kept'] = [once(host, c) for _ in range(n)]
            c.close()
        print(json.dumps(res))
except Exception as e:
    print('fail', type(e).__name__, e)
`

async function prepared(t, opts) {
  const sbx = await createSandbox(t, opts)
  await within(30_000, 'write probe', () => sbx.files.write('/tmp/p.py', probePy))
  return sbx
}

async function probe(sbx, args, { user = 'user', envs, ms = 120_000 } = {}) {
  const r = await run(sbx, `python3 /tmp/p.py ${args}`, { user, envs }, ms)
  assert.equal(r.exitCode, 0, `probe ${args} failed: ${r.stdout} ${r.stderr}`)
  assert.ok(!r.stdout.startsWith('fail'), `probe ${args}: ${r.stdout}`)
  return r.stdout.trim()
}

const authLine = (value) => `200 auth-sha256=${sha256(`Bearer ${value}`)}`

test('a rule injects the secret: curl and Python reach the upstream with the real value', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  const name = `inj-k-${tag}`
  const value = newValue()
  await newSecret(t, name, value)
  const sbx = await prepared(t, { network: policy(bearer(name)) })
  const p = `/e2e-${tag}/basic`

  // curl, with an Authorization of its own that the rule replaces.
  const curl = await run(sbx, `curl -sS -H 'Authorization: sandbox-own' https://${API}${p}/curl`)
  assert.equal(curl.exitCode, 0, curl.stderr)
  assert.equal(curl.stdout.trim(), `auth-sha256=${sha256(`Bearer ${value}`)}`)
  assert.equal(await probe(sbx, `get https://${API}${p}/urllib`), authLine(value))
  const viaRequests = await probe(sbx, `requests https://${API}${p}/requests`)
  if (viaRequests === 'absent') t.diagnostic('python3-requests is not in the template: skipped')
  else assert.equal(viaRequests, authLine(value))
  const node = await run(sbx, 'command -v node')
  if (node.exitCode === 0) {
    const js = `fetch('https://${API}${p}/node').then(r => r.text()).then(b => console.log(b.trim()))`
    const r = await run(sbx, `node -e "${js}"`)
    assert.equal(r.stdout.trim(), `auth-sha256=${sha256(`Bearer ${value}`)}`, r.stderr)
  } else {
    t.diagnostic('node is not in the template: skipped')
  }
  const seen = requests(p)
  assert.ok(seen.length >= 2, `upstream saw ${seen.length} requests`)
  for (const r of seen) {
    assert.deepEqual(header(r, 'Authorization'), [`Bearer ${value}`], `${r.path}: the upstream got the value, once`)
    assert.equal(r.scheme, 'https')
  }
  // The CA the sandbox trusts is Moat's, installed where the libraries look.
  const ca = await run(sbx, 'openssl x509 -noout -subject -in /usr/local/share/ca-certificates/moat-egress-ca.crt; echo "$SSL_CERT_FILE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS"')
  assert.match(ca.stdout, /Moat egress CA/)
  assert.match(ca.stdout, /\/etc\/ssl\/certs\/ca-certificates.crt \/etc\/ssl\/certs\/ca-certificates.crt \/usr\/local\/share\/ca-certificates\/moat-egress-ca.crt/)
  // GET /sandboxes/{id} reports the rules with their placeholder.
  const info = await within(30_000, 'getInfo', () => sbx.getInfo())
  assert.deepEqual(info.network?.rules, bearer(name))
})

test('Python requests (Debian\'s python3-requests in code-interpreter-v1) gets the value upstream too', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  const name = `inj-req-${tag}`
  const value = newValue()
  await newSecret(t, name, value)
  let sbx
  try {
    sbx = await within(180_000, 'Sandbox.create code-interpreter-v1', () =>
      Sandbox.create('code-interpreter-v1', { timeoutMs: 600_000, network: policy(bearer(name)) }))
  } catch (err) {
    if (/not found/i.test(err.message)) {
      t.skip('no code-interpreter-v1 template in this data dir')
      return
    }
    throw err
  }
  t.after(() => Sandbox.kill(sbx.sandboxId).catch(() => {}))
  await within(30_000, 'write probe', () => sbx.files.write('/tmp/p.py', probePy))
  const p = `/e2e-${tag}/requests`
  assert.equal(await probe(sbx, `requests https://${API}${p}/requests`), authLine(value))
  assert.deepEqual(requests(p).map((r) => header(r, 'Authorization')), [[`Bearer ${value}`]])
})

// hostLink is the host side of the sandbox's veth (mh, or the scope's
// prefix, + the ID's start).
function hostLink(id) {
  const links = execFileSync('ip', ['-o', 'link', 'show']).toString().split('\n')
    .map((l) => (l.split(':')[1] || '').trim().split('@')[0])
  return links.find((n) => n.startsWith(scope.ifPrefix) && id.startsWith(n.slice(scope.ifPrefix.length)))
}

// sandboxEnvironsOnHost returns the environment of every host process in
// the sandbox's PID namespace (that of the process whose environment names
// it, envd), or [] when its processes are not host processes (microVMs).
function sandboxEnvironsOnHost(id) {
  const procs = []
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      procs.push({ pid, environ: readFileSync(`/proc/${pid}/environ`), ns: readlinkSync(`/proc/${pid}/ns/pid`) })
    } catch {}
  }
  const envd = procs.find((p) => p.environ.includes(Buffer.from(`MOAT_SANDBOX_ID=${id}\0`)))
  return envd ? procs.filter((p) => p.ns === envd.ns) : []
}

const hostCapPy = `
import socket, sys, os
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.bind((sys.argv[1], 0)); s.settimeout(0.2)
out = open(sys.argv[2], 'wb'); print('capturing', flush=True)
while not os.path.exists(sys.argv[3]):
    try: out.write(s.recv(65536))
    except socket.timeout: pass
out.close()
`

test('the value is nowhere in the sandbox: environ, filesystem, the requester\'s memory, packets', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  const name = `inj-scan-${tag}`
  const value = newValue()
  const decoy = newValue()
  await newSecret(t, name, value)
  const sbx = await prepared(t, { network: policy(bearer(name)) })
  const hashes = JSON.stringify({ target: sha256(value), decoy: sha256(decoy) })
  const envs = { SCAN_HASHES: hashes }
  const p = `/e2e-${tag}/scan`

  // Captures: inside the sandbox as root (AF_PACKET; a container's root may
  // not open one: its netns belongs to the host), and on the host side of
  // its veth, during every request of this test.
  const capIn = await within(30_000, 'capture start', () => sbx.commands.run(
    'python3 /tmp/p.py cap eth0 /tmp/cap.bin /tmp/cap.stop', { user: 'root', background: true, envs }))
  const link = hostLink(sbx.sandboxId)
  assert.ok(link, 'the sandbox has a host-side veth')
  const hostCap = path.join(dir, `cap-${sbx.sandboxId}.bin`)
  const stop = path.join(dir, `cap-${sbx.sandboxId}.stop`)
  const cap = spawn('python3', ['-c', hostCapPy, link, hostCap, stop], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.after(() => cap.kill('SIGKILL'))
  await within(10_000, 'host capture ready', new Promise((resolve) => cap.stdout.once('data', resolve)))
  await sleep(500)

  // The planted decoy: in a file, and in a process's environment.
  await sbx.files.write('/tmp/decoy.txt', `x${decoy}x`)
  await within(30_000, 'decoy process', () => sbx.commands.run('sleep 600', { background: true, envs: { DECOY: decoy } }))

  const curl = await run(sbx, `curl -sS https://${API}${p}/curl`)
  assert.equal(curl.stdout.trim(), `auth-sha256=${sha256(`Bearer ${value}`)}`, curl.stderr)
  const mem = JSON.parse(await probe(sbx, `memtest https://${API}${p}/mem`, { user: 'root', envs: { ...envs, DECOY_VALUE: decoy } }))
  assert.equal(mem.response, authLine(value), 'the memory-scanned requester got its answer')
  assert.ok(mem.regions > 10, `scanned ${mem.regions} memory regions`)
  assert.deepEqual(mem.target, [], `the value is in the requester's memory: ${mem.target}`)
  assert.ok(mem.decoy.includes('environ') && mem.decoy.some((w) => w.startsWith('mem:')),
    `the memory scan finds the decoy in the requester's environment and memory: ${mem.decoy}`)
  assert.equal(requests(p).length, 2)
  for (const r of requests(p)) assert.deepEqual(header(r, 'Authorization'), [`Bearer ${value}`])

  // Stop both captures and search them.
  await run(sbx, 'touch /tmp/cap.stop', { user: 'root' })
  writeFileSync(stop, '')
  await within(10_000, 'host capture stop', new Promise((resolve) => (cap.exitCode !== null ? resolve() : cap.once('exit', resolve))))
  const captured = readFileSync(hostCap)
  assert.ok(captured.length > 4096, `host-side capture holds ${captured.length} bytes`)
  assert.ok(!captured.includes(Buffer.from(value)), 'the value crossed the sandbox\'s interface (host-side capture)')
  assert.ok(captured.includes(Buffer.from(API)), 'the capture saw the requests (their SNI)')
  const capOut = await within(30_000, 'capture end', () => capIn.wait().catch((e) => e))
  if (capOut.stdout.startsWith('unavailable')) {
    t.diagnostic(`in-sandbox capture unavailable on this runtime (${capOut.stdout.trim()}); the host-side capture covers it`)
  } else {
    assert.match(capOut.stdout, /capturing\nframes \d+/)
    t.diagnostic(`in-sandbox AF_PACKET capture: ${capOut.stdout.trim().split('\n').at(-1)}; host side ${captured.length} bytes`)
    const inCap = JSON.parse(await probe(sbx, 'scanfile /tmp/cap.bin', { user: 'root', envs }))
    assert.deepEqual(inCap.target, [], 'the value is in the in-sandbox capture')
  }

  // Every process's environment, read by root and by user inside (a
  // container's root lacks CAP_SYS_PTRACE and reads only its own uid's; its
  // envd is not dumpable), and, where the sandbox's processes are host
  // processes (containers), from the host too.
  const envScans = []
  for (const user of ['root', 'user']) envScans.push(JSON.parse(await probe(sbx, 'environ', { user, envs }))) // one at a time
  const read = new Set(envScans.flatMap((e) => e.read))
  const unread = envScans[0].unreadable.filter((p) => !read.has(p))
  for (const e of envScans) assert.deepEqual(e.target, [], `the value is in a process environment: ${e.target}`)
  assert.ok(envScans.some((e) => e.decoy.length > 0), `environ scans (${read.size} processes) find the decoy`)
  const onHost = sandboxEnvironsOnHost(sbx.sandboxId)
  if (onHost.length > 0) {
    for (const e of onHost) assert.ok(!e.environ.includes(value), `the value is in the environment of host pid ${e.pid}`)
    assert.ok(onHost.some((e) => e.environ.includes(decoy)), 'the host-side environ scan finds the decoy')
    assert.ok(onHost.length >= read.size + unread.length,
      `the host saw ${onHost.length} of the sandbox's processes, inside ${read.size} + ${unread.length} unreadable`)
    t.diagnostic(`environments: ${read.size} read inside, ${onHost.length} from the host (${unread.length} unreadable inside)`)
  } else {
    assert.deepEqual(unread, [], `environments neither root nor user could read: ${unread}`)
  }
  const fs = JSON.parse(await probe(sbx, 'fs', { user: 'root', envs, ms: 480_000 }))
  assert.deepEqual(fs.target, [], `the value is in the sandbox's filesystem: ${fs.target}`)
  assert.ok(fs.decoy.includes('/tmp/decoy.txt') && fs.files > 1000, `filesystem scan (${fs.files} files) finds the decoy`)
})

test('a domain without rules is not intercepted: the sandbox sees the upstream\'s own certificate', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  const name = `inj-cert-${tag}`
  await newSecret(t, name, newValue())
  const sbx = await prepared(t, { network: policy(bearer(name)) })
  assert.equal(await probe(sbx, `cert ${OTHER}`), `${WEB2} ${upstreamFingerprint}`)
  const ruled = await probe(sbx, `cert ${API}`)
  assert.ok(ruled.startsWith(`${WEB} `) && !ruled.endsWith(upstreamFingerprint), `the rule domain shows Moat's leaf: ${ruled}`)
  // And without verification tricks: the rule domain verifies with the
  // system store, the other does not (the sandbox never trusted the test CA).
  assert.match(await probe(sbx, `get https://${API}/e2e-${tag}/cert`), /^200 /)
  const other = await run(sbx, `python3 /tmp/p.py get https://${OTHER}/e2e-${tag}/cert`)
  assert.match(other.stdout, /fail URLError.*CERTIFICATE_VERIFY_FAILED/)
})

test('plain HTTP to a rule domain is 403; an unverified upstream and a deleted secret are 502', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  const name = `inj-del-${tag}`
  const s = await newSecret(t, name, newValue())
  const sbx = await prepared(t, { network: policy({ ...bearer(name), [BADCERT]: bearer(name)[API] }, [API, OTHER, BADCERT]) })
  const p = `/e2e-${tag}/refused`
  // The upstream's certificate is not for the name: Moat refuses to send.
  const bad = await probe(sbx, `get https://${BADCERT}${p}/badcert`)
  assert.match(bad, new RegExp(`^502 .*certificate of ${BADCERT.replaceAll('.', '\\.')} did not verify.*not sent`))
  const plain = await run(sbx, `curl -sS -w '\\n%{http_code}' http://${API}${p}/plain`)
  assert.match(plain.stdout, /HTTPS only[^]*\n403$/, plain.stdout + plain.stderr)

  assert.equal(await within(30_000, 'destroy', () => Secret.destroy(s.secretId)), true)
  const r = await probe(sbx, `get https://${API}${p}/deleted`)
  assert.match(r, new RegExp(`^502 .*secret "${name}".*not sent`))
  assert.ok(!r.includes('${'), r)
  assert.deepEqual(requests(p), [], 'a refused request reached the upstream')
  // A secret created again under the name is used by the next request.
  const again = newValue()
  await newSecret(t, name, again)
  assert.equal(await probe(sbx, `get https://${API}${p}/again`), authLine(again))
})

test('updateNetwork installs the CA in a running sandbox and replaces rules live', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  const name = `inj-live-${tag}`
  const value = newValue()
  await newSecret(t, name, value)
  const sbx = await prepared(t, { network: policy(null) })
  assert.equal((await run(sbx, 'test -e /usr/local/share/ca-certificates/moat-egress-ca.crt')).exitCode, 1,
    'no CA without rules')
  const headerRule = (v) => ({ [API]: [{ transform: { headers: { 'X-Rule': v, Authorization: `Bearer ${Secret.fill(name)}` } } }] })
  await within(30_000, 'updateNetwork', () => sbx.updateNetwork(policy(headerRule('one'))))
  assert.equal((await run(sbx, 'test -e /usr/local/share/ca-certificates/moat-egress-ca.crt')).exitCode, 0)

  // One kept-alive connection: each request waits for /tmp/go<i>.
  const h = await within(30_000, 'keepalive', () => sbx.commands.run(`python3 /tmp/p.py keepalive ${API}`, { background: true }))
  const step = async (i) => {
    await sbx.files.write(`/tmp/go${i}`, '')
    const deadline = Date.now() + 30_000
    while (!(await sbx.files.exists(`/tmp/done${i}`))) {
      if (Date.now() > deadline) return false
      await sleep(100)
    }
    return true
  }
  const rule = (i) => requests(`/keepalive/${i}`).map((r) => header(r, 'X-Rule')[0])
  assert.ok(await step(1))
  assert.deepEqual(rule(1), ['one'])
  await within(30_000, 'update rules', () => sbx.updateNetwork(policy(headerRule('two'))))
  assert.ok(await step(2))
  assert.deepEqual(rule(2), ['two'])
  // The rule removed, the name still allowed: the connection stays, the
  // request passes as the sandbox sent it.
  await within(30_000, 'remove rules', () => sbx.updateNetwork(policy(null)))
  assert.ok(await step(3))
  assert.deepEqual(rule(3), ['sandbox'])
  // The name removed from allowOut: the connection is closed.
  await within(30_000, 'remove name', () => sbx.updateNetwork(policy(null, [OTHER])))
  assert.ok(await step(4))
  const out = (await within(30_000, 'keepalive end', () => h.wait().catch((e) => e))).stdout
  const lines = out.trim().split('\n')
  assert.match(lines[0], /^1 200 same-connection auth-sha256=/)
  assert.match(lines[1], /^2 200 same-connection /)
  assert.match(lines[2], /^3 200 same-connection /)
  assert.match(lines[3] ?? '', /^4 fail/, out)
  assert.deepEqual(requests('/keepalive/4'), [])
  assert.equal(requests('/keepalive/1')[0] && header(requests('/keepalive/1')[0], 'Authorization')[0], `Bearer ${value}`)
})

test('rules survive pause/resume and a server restart', { timeout: 600_000 }, async (t) => {
  await ctx.ready
  const name = `inj-keep-${tag}`
  const value = newValue()
  await newSecret(t, name, value)
  const sbx = await prepared(t, { network: policy(bearer(name)) })
  const p = `/e2e-${tag}/keep`
  assert.equal(await probe(sbx, `get https://${API}${p}/before`), authLine(value))
  await within(120_000, 'pause', () => sbx.pause())
  const resumed = await within(180_000, 'resume', () => Sandbox.connect(sbx.sandboxId))
  assert.equal(await probe(resumed, `get https://${API}${p}/resumed`), authLine(value))
  if (ctx.external) {
    t.skip('the restart needs a server this suite starts')
    return
  }
  // A crash (kill -9) and a restart on the same address and data dir: the
  // recovery re-applies the stored rules, the CA is the same.
  const port = ctx.server.port
  await ctx.server.kill9()
  ctx.server.port = port
  await ctx.server.start()
  const after = await within(60_000, 'connect after restart', () => Sandbox.connect(sbx.sandboxId))
  assert.equal(await probe(after, `get https://${API}${p}/restarted`), authLine(value))
  assert.deepEqual(requests(p).map((r) => header(r, 'Authorization')[0]), Array(3).fill(`Bearer ${value}`))
})

async function api(method, p, body) {
  const res = await fetch(`${ctx.url}${p}`, {
    method,
    headers: { 'X-API-KEY': ctx.apiKey, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  })
  const text = await res.text()
  return { status: res.status, text, json: text ? JSON.parse(text) : undefined }
}

test('malformed rules, rules outside allowOut, oversize values: a clear 4xx and nothing applied', { timeout: 300_000 }, async (t) => {
  await ctx.ready
  const name = `inj-bad-${tag}`
  await newSecret(t, name, newValue())
  const good = bearer(name)
  const hdr = (v, domain = API) => ({ [domain]: [{ transform: { headers: { 'X-A': v } } }] })
  const cases = [
    [policy(hdr('x', 'bad domain')), /invalid domain/],
    [policy(hdr('a\r\nb')), /CR, LF/],
    [policy(hdr('v'.repeat(8 * 1024 + 1))), /limit is 8192/],
    [policy(hdr(`\${e2b.secrets.missing-${tag}}`)), /secret "missing-.*" not found/],
    [policy({ [API]: [{ transform: { headers: { Host: 'x' } } }] }), /cannot be set/],
    [policy(hdr('x', 'elsewhere.test')), /"elsewhere.test" is not reachable/],
    [{ rules: good }, /is not reachable/],
    [policy(Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`d${i}.inject.test`, []]))), /limit is 64/],
  ]
  const before = requests('/').length
  for (const [network, re] of cases) {
    const r = await api('POST', '/sandboxes', { templateID: template, network })
    assert.equal(r.status, 400, `${JSON.stringify(network).slice(0, 100)}: ${r.status} ${r.text}`)
    assert.equal(r.json.code, 400)
    assert.match(r.json.message, re)
  }
  // The same on a running sandbox: refused, and its rules stay as they were.
  const sbx = await prepared(t, { network: policy(good) })
  for (const [network, re] of cases) {
    const r = await api('PUT', `/sandboxes/${sbx.sandboxId}/network`, network)
    assert.equal(r.status, 400, `PUT ${JSON.stringify(network).slice(0, 100)}: ${r.status} ${r.text}`)
    assert.match(r.json.message, re)
  }
  const info = await within(30_000, 'getInfo', () => sbx.getInfo())
  assert.deepEqual(info.network?.rules, good)
  assert.match(await probe(sbx, `get https://${API}/e2e-${tag}/bad/still`), /^200 auth-sha256=/)
  assert.equal(requests('/').length, before + 1, 'only the last request reached the upstream')
  // The SDK surfaces the refusal.
  await assert.rejects(within(30_000, 'Sandbox.create', () => Sandbox.create(template, { network: { rules: good } })), /is not reachable/)
})

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }

// One sandbox, one upstream: api.inject.test is intercepted and gets the
// header, other.inject.test is spliced; rounds alternate which goes
// first. It prints numbers only: no timed asserts.
test('benchmark: HTTPS latency through the proxy with and without an injected header',
  { timeout: 600_000, skip: !process.env.MOAT_E2E_BENCH }, async (t) => {
    await ctx.ready
    const name = `inj-bench-${tag}`
    await newSecret(t, name, newValue())
    const sbx = await prepared(t, { network: policy(bearer(name)) })
    const res = { [API]: { new: [], kept: [] }, [OTHER]: { new: [], kept: [] } }
    for (let round = 0; round < 5; round++) {
      const out = JSON.parse(await probe(sbx, 'bench 20', { ms: 300_000 }))
      for (const h of [API, OTHER]) for (const k of ['new', 'kept']) res[h][k].push(...out[h][k])
    }
    const m = (h, k) => median(res[h][k])
    const line = (k, what) => `${what}, median of ${res[API][k].length}: with an injected header ${m(API, k).toFixed(2)} ms, ` +
      `without (spliced) ${m(OTHER, k).toFixed(2)} ms, ratio ${(m(API, k) / m(OTHER, k)).toFixed(2)}`
    console.log(line('new', 'HTTPS request on a new connection (connect+TLS+GET)'))
    console.log(line('kept', 'HTTPS request on a kept-alive connection (GET)'))
  })
