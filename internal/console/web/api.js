// The REST API of the server that serves the console, called with the
// API key kept in sessionStorage (gone when the tab closes).

const keyName = 'moat.apiKey'

export const getKey = () => sessionStorage.getItem(keyName) || ''
export const setKey = (k) => sessionStorage.setItem(keyName, k)
export const clearKey = () => sessionStorage.removeItem(keyName)

// ApiError carries the server's status and message.
export class ApiError extends Error {
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

// api calls path with the key and returns the decoded JSON (null on 204).
export async function api(path, { method = 'GET', body, key = getKey() } = {}) {
  const headers = { 'X-API-KEY': key }
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  let data = null
  try {
    data = text ? JSON.parse(text) : null
  } catch {
    data = null
  }
  if (!res.ok) throw new ApiError(res.status, (data && data.message) || text || res.statusText)
  return data
}
