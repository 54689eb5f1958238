// Tiny DOM helpers: text always goes in as text, never as HTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v)
    else if (k === 'dataset') Object.assign(el.dataset, v)
    else if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v)
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue
    el.append(c instanceof Node ? c : String(c))
  }
  return el
}

// table builds a table of rows with the given header and a row function.
export function table(id, headers, rows, row) {
  return h('table', { id }, h('thead', {}, h('tr', {}, headers.map((t) => h('th', {}, t)))), h('tbody', {}, rows.map(row)))
}

export function age(iso) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000))
  if (s < 120) return `${s}s`
  if (s < 7200) return `${Math.round(s / 60)}m`
  if (s < 172800) return `${Math.round(s / 3600)}h`
  return `${Math.round(s / 86400)}d`
}

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : '')
