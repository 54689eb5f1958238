// Connect protocol over fetch: envd's process API (api/envd/process/
// process.proto) through the sandbox proxy, JSON codec. A streaming
// message is an envelope: 1 flag byte, a 4-byte big-endian length, JSON.

const enc = new TextEncoder()
const dec = new TextDecoder()

export function envelope(msg) {
  const body = enc.encode(JSON.stringify(msg))
  const out = new Uint8Array(5 + body.length)
  new DataView(out.buffer).setUint32(1, body.length)
  out.set(body, 5)
  return out
}

// Envelopes splits a byte stream into envelopes: push chunks, take whole
// messages as {flags, msg}.
export class Envelopes {
  constructor() {
    this.buf = new Uint8Array(0)
  }
  push(chunk) {
    const b = new Uint8Array(this.buf.length + chunk.length)
    b.set(this.buf)
    b.set(chunk, this.buf.length)
    this.buf = b
    const out = []
    while (this.buf.length >= 5) {
      const n = new DataView(this.buf.buffer, this.buf.byteOffset).getUint32(1)
      if (this.buf.length < 5 + n) break
      const flags = this.buf[0]
      const text = dec.decode(this.buf.subarray(5, 5 + n))
      out.push({ flags, msg: text ? JSON.parse(text) : {} })
      this.buf = this.buf.slice(5 + n)
    }
    return out
  }
}

export function envdHeaders(sandbox) {
  return {
    'E2b-Sandbox-Id': sandbox.sandboxID,
    'E2b-Sandbox-Port': '49983',
    'X-Access-Token': sandbox.envdAccessToken || '',
    'Connect-Protocol-Version': '1',
  }
}

// unary calls a unary procedure, e.g. 'process.Process/SendInput'.
export async function unary(sandbox, procedure, msg) {
  const res = await fetch(`/${procedure}`, {
    method: 'POST',
    headers: { ...envdHeaders(sandbox), 'Content-Type': 'application/json' },
    body: JSON.stringify(msg),
  })
  const text = await res.text()
  if (!res.ok) throw new Error(`${procedure}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : {}
}

// serverStream calls a server-streaming procedure and gives each message
// to onMsg; it resolves when the stream ends, rejects on its error.
export async function serverStream(sandbox, procedure, msg, onMsg, signal) {
  const res = await fetch(`/${procedure}`, {
    method: 'POST',
    headers: { ...envdHeaders(sandbox), 'Content-Type': 'application/connect+json', 'Keepalive-Ping-Interval': '50' },
    body: envelope(msg),
    signal,
  })
  if (!res.ok) throw new Error(`${procedure}: ${res.status} ${await res.text()}`)
  const reader = res.body.getReader()
  const env = new Envelopes()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) return
    for (const { flags, msg: m } of env.push(value)) {
      if (flags & 2) {
        if (m.error) throw new Error(`${procedure}: ${m.error.code}: ${m.error.message}`)
        return
      }
      onMsg(m)
    }
  }
}

export function toBase64(bytes) {
  let s = ''
  for (const b of bytes) s += String.fromCharCode(b)
  return btoa(s)
}

export function fromBase64(b64) {
  const s = atob(b64)
  const out = new Uint8Array(s.length)
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i)
  return out
}
