package orchestrator

import "github.com/moatsh/moat/internal/orchestrator/sandboxspec"

// VolumeMount is a volume a create mounts (see sandboxspec.AddVolumes).
type VolumeMount = sandboxspec.VolumeMount
