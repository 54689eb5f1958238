// A small SVG line chart of a sandbox's CPU and memory use (percent).

const ns = 'http://www.w3.org/2000/svg'
const W = 600
const H = 160

export function newChart() {
  const svg = document.createElementNS(ns, 'svg')
  svg.setAttribute('class', 'chart')
  svg.setAttribute('width', W)
  svg.setAttribute('height', H)
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`)
  for (const y of [0, 50, 100]) {
    const line = document.createElementNS(ns, 'line')
    line.setAttribute('x1', 0)
    line.setAttribute('x2', W)
    line.setAttribute('y1', H - (y / 100) * (H - 10) - 5)
    line.setAttribute('y2', H - (y / 100) * (H - 10) - 5)
    line.setAttribute('stroke', '#eee')
    svg.append(line)
  }
  const cpu = document.createElementNS(ns, 'polyline')
  cpu.setAttribute('class', 'cpu')
  const mem = document.createElementNS(ns, 'polyline')
  mem.setAttribute('class', 'mem')
  svg.append(cpu, mem)
  svg.dataset.points = '0'
  return svg
}

// drawChart plots metrics (E2B's SandboxMetric list, oldest first).
export function drawChart(svg, metrics) {
  const pts = metrics.slice(-60)
  const x = (i) => (pts.length < 2 ? W / 2 : (i / (pts.length - 1)) * W)
  const y = (pct) => H - (Math.max(0, Math.min(100, pct)) / 100) * (H - 10) - 5
  const line = (f) => pts.map((m, i) => `${x(i).toFixed(1)},${y(f(m)).toFixed(1)}`).join(' ')
  svg.querySelector('.cpu').setAttribute('points', line((m) => m.cpuUsedPct))
  svg.querySelector('.mem').setAttribute('points', line((m) => (m.memTotal ? (100 * m.memUsed) / m.memTotal : 0)))
  svg.dataset.points = String(pts.length)
}
