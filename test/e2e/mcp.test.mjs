// `moat mcp` (docs/mcp.md) through an independent client: the official
// TypeScript MCP SDK (@modelcontextprotocol/sdk). The MCP server is a
// client of the Moat server, the same whatever the sandboxes' runtime, so
// the suite is small: over stdio it creates a sandbox from the harness's
// template, runs a command and kills it; over streamable HTTP (with a
// bearer token) it does the same with a code-interpreter sandbox and runs
// code in it too.
//
// Environment (besides the harness's):
//   MOAT_E2E_INTERPRETER_TEMPLATE  template for run_code (default code-interpreter-v1)
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

import { useServer, within, killQuietly, assertNoLeaks, moatBin, template, freePort, sleep } from './harness.mjs'

const server = useServer()
const interpreterTemplate = process.env.MOAT_E2E_INTERPRETER_TEMPLATE || 'code-interpreter-v1'

const tools = ['create_sandbox', 'expose_port', 'kill_sandbox', 'list_files', 'list_sandboxes',
  'read_file', 'run_code', 'run_command', 'write_file']

// mcpEnv is the environment of a `moat mcp` child: the harness's server and key.
function mcpEnv() {
  return { ...process.env, MOAT_API_URL: server.url, MOAT_API_KEY: server.apiKey }
}

// text joins a tool result's text contents.
const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n')

// call calls a tool within ms and fails on a tool error (isError).
async function call(client, name, args, ms = 120_000) {
  const res = await within(ms, `${name}(${JSON.stringify(args).slice(0, 80)})`, () =>
    client.callTool({ name, arguments: args }, undefined, { timeout: ms }))
  assert.ok(!res.isError, `${name}: tool error: ${text(res)}`)
  return res
}

async function listTools(client) {
  const { tools: got } = await within(30_000, 'listTools', () => client.listTools())
  assert.deepEqual(got.map((t) => t.name).sort(), tools)
  for (const t of got) assert.equal(t.inputSchema.type, 'object', t.name)
}

// lifecycle creates a sandbox through MCP, runs a command (and code when
// code is set), and kills it, leaving nothing on the host.
async function lifecycle(t, client, tmpl, code) {
  const created = await call(client, 'create_sandbox', { template: tmpl, timeout_seconds: 600 }, 240_000)
  const id = created.structuredContent?.sandbox_id
  assert.match(id ?? '', /^[a-z0-9]+$/, text(created))
  t.after(() => killQuietly(id))

  const listed = await call(client, 'list_sandboxes', {})
  assert.ok(listed.structuredContent.sandboxes.some((s) => s.sandbox_id === id), text(listed))

  const ran = await call(client, 'run_command', { sandbox_id: id, command: 'echo out; echo err >&2; exit 3' })
  assert.deepEqual(ran.structuredContent, { exit_code: 3, stdout: 'out\n', stderr: 'err\n' })

  if (code) {
    const res = await call(client, 'run_code', { sandbox_id: id, code: 'import math\nprint("hi")\nmath.factorial(5)' }, 180_000)
    assert.match(text(res), /Result:\n120/)
    assert.match(text(res), /stdout:\nhi/)
    const bad = await within(120_000, 'run_code 1/0', () =>
      client.callTool({ name: 'run_code', arguments: { sandbox_id: id, code: '1/0' } }))
    assert.equal(bad.isError, true)
    assert.match(text(bad), /ZeroDivisionError/)
  }

  await call(client, 'kill_sandbox', { sandbox_id: id })
  const again = await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: id } })
  assert.equal(again.isError, true, 'a second kill_sandbox is a tool error')
  if (!server.external) await assertNoLeaks([id])
}

describe('moat mcp', () => {
  test('stdio: tools, create, run_command, kill', { timeout: 300_000 }, async (t) => {
    await server.ready
    const transport = new StdioClientTransport({ command: moatBin, args: ['mcp'], env: mcpEnv(), stderr: 'pipe' })
    let stderr = ''
    transport.stderr?.on('data', (b) => { stderr += b })
    const client = new Client({ name: 'moat-e2e', version: '0' })
    t.after(() => client.close())
    await within(30_000, 'connect over stdio', () => client.connect(transport)).catch((err) => {
      err.message += `\nmoat mcp stderr:\n${stderr}`
      throw err
    })
    await listTools(client)
    await lifecycle(t, client, template, false)
  })

  test('streamable HTTP: token, tools, create, run_command, run_code, kill', { timeout: 400_000 }, async (t) => {
    await server.ready
    const port = await freePort()
    const token = 'e2e-' + Math.random().toString(36).slice(2)
    const proc = spawn(moatBin, ['mcp', '--http', `127.0.0.1:${port}`, '--http-token', token],
      { env: mcpEnv(), stdio: ['ignore', 'ignore', 'pipe'] })
    const exited = new Promise((resolve) => proc.once('exit', resolve))
    t.after(async () => {
      proc.kill('SIGTERM')
      await Promise.race([exited, sleep(10_000)])
    })
    let log = ''
    proc.stderr.on('data', (b) => { log += b })
    for (const deadline = Date.now() + 30_000; !log.includes('moat mcp listening on'); await sleep(50)) {
      assert.ok(Date.now() < deadline && proc.exitCode === null, `moat mcp --http did not listen:\n${log}`)
    }
    const url = new URL(`http://127.0.0.1:${port}/mcp`)

    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
    assert.equal(res.status, 401, 'no bearer token')

    const client = new Client({ name: 'moat-e2e', version: '0' })
    t.after(() => client.close())
    const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${token}` } } })
    await within(30_000, 'connect over HTTP', () => client.connect(transport))
    await listTools(client)
    await lifecycle(t, client, interpreterTemplate, true)
  })
})

