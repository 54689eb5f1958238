// Package orchestrator owns the lifecycle of every sandbox: it turns API
// requests into runtime calls, waits until envd inside a new sandbox is
// initialised, keeps timeouts, and reconciles the store with the runtime
// after a restart. It knows nothing of HTTP.
//
// State machine (store.State* values):
//
//	            Create                 Pause              (freezer)
//	(none) ──► creating ──► running ─────────► pausing ──► paused
//	              │            ▲  │                           │
//	              │ failure    │  └──── Kill / timeout ──┐    │ Resume / Connect
//	              ▼            └────── resuming ◄────────┼────┘
//	           (killed)                                  ▼
//	                                                 (killed: row deleted)
//
// A sandbox exists in memory (and is routable by the proxy) only once it is
// running; on any failure during Create the runtime object is killed and no
// row is left behind. On timeout a sandbox is killed, or paused when it was
// created with autoPause.
package orchestrator
