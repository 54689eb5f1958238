package orchestrator

// OnRemove registers fn, called with the ID of every sandbox that leaves
// the routing table (killed through the API, timed out, or found dead),
// after Lookup stops finding it (under the sandbox's op lock, without
// the table's lock: fn must not call back into this sandbox). The proxy
// closes its connections to the sandbox there: a killed microVM or gVisor
// sandbox never resets them. Call it before serving.
func (o *Orchestrator) OnRemove(fn func(id string)) { o.live.OnRemove(fn) }
