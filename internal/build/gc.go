package build

import (
	"time"

	"github.com/moatsh/moat/internal/build/layercache"
)

// GC collects the layer cache unless a build (in any process) holds it,
// in which case it does nothing and returns ran=false: the build's end
// collects. It removes work directories left by builds that no longer
// run, replaced generations of layers, and layers no template was built
// from that were unused for Config.LayerMaxAge, then the least recently
// used of those beyond Config.MaxLayers, then more of them while the
// filesystem has less than Config.LayerMinFree of its space free. Layers
// a template was built from
// (its layers.json) stay as long as the template's directory exists.
func (m *Manager) GC() (st layercache.GCStats, ran bool, err error) {
	unlock, ok, err := m.cache.Lock(true, false)
	if err != nil || !ok {
		return layercache.GCStats{}, false, err
	}
	defer unlock()
	refs, err := layercache.Refs(m.cfg.DataDir)
	if err != nil {
		return layercache.GCStats{}, true, err
	}
	st, err = m.cache.GC(refs, layercache.Policy{Now: time.Now(), MaxAge: m.cfg.LayerMaxAge, MaxLayers: m.cfg.MaxLayers,
		MinFree: m.cfg.LayerMinFree, Free: layercache.FreeShare(m.cache.Dir())})
	return st, true, err
}

// collect runs GC and logs what it did.
func (m *Manager) collect() {
	st, ran, err := m.GC()
	switch {
	case err != nil:
		m.log.Warn("layer cache GC", "err", err)
	case ran && st.Layers+st.Replaced+st.WorkDirs > 0:
		m.log.Info("layer cache GC", "removed_layers", st.Layers, "removed_replaced", st.Replaced,
			"removed_work_dirs", st.WorkDirs, "kept_layers", st.Kept)
	}
}
