// Package orchestrator owns the lifecycle of every sandbox: it turns API
// requests into runtime calls, waits until envd inside a new sandbox is
// initialised, keeps timeouts, and reconciles the store with the runtime
// after a restart. It knows nothing of HTTP.
//
// The state machine is store.State's (its doc has the diagram, and
// CanBecome its edges). Every change goes through commit, which checks
// the edge, persists, logs, and re-arms the sandbox's timer and process
// watch.
//
// A sandbox exists in the store and in memory (routable by the proxy) only
// once it is running; on any failure during Create the runtime object is
// killed and no row is left behind. While Run runs, a running sandbox has
// a timer for its end (kill, or pause when created with autoPause) and a
// goroutine blocked in the runtime's Wait, which removes it when its
// process dies on its own.
//
// Parts with one job each live in subpackages, none of which imports this
// one: livetable (the live sandboxes in memory, their op locks and
// ownership), reaper (timers and process watches), runtimeset (several
// runtimes behind one), envdcall (the calls to envd), warmpool (warm
// pools), recovery (reconciliation at start), sandboxspec (pure checks
// and defaults of a create), usage (resource readings), clock
// (injectable time).
package orchestrator
