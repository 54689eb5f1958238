// Package state holds what the orchestrator hands envd through POST /init:
// the sandbox's global environment variables, the access token, the default
// user and working directory. Every envd service reads it; only /init writes.
package state

import (
	"maps"
	"sync"
	"time"
)

// Defaults used before any /init.
const (
	DefaultUser = "root"
	Version     = "0.6.13" // the E2B envd version whose features this envd implements
)

// State is safe for concurrent use.
type State struct {
	mu             sync.RWMutex
	envVars        map[string]string
	internal       map[string]string
	accessToken    string
	defaultUser    string
	defaultWorkdir string
	lastInit       time.Time
}

// New returns the state of a fresh envd. internal are the E2B_* variables that
// /init never removes.
func New(internal map[string]string) *State {
	return &State{envVars: map[string]string{}, internal: maps.Clone(internal), defaultUser: DefaultUser}
}

// Env returns all global variables: internal first, then the sandbox's.
func (s *State) Env() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := maps.Clone(s.internal)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, s.envVars)
	return out
}

// AccessToken returns the token every request must carry ("" = none).
func (s *State) AccessToken() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.accessToken
}

// DefaultUser returns the account used when a request names none.
func (s *State) DefaultUser() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultUser
}

// DefaultWorkdir returns the directory used for an empty path ("" = home).
func (s *State) DefaultWorkdir() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultWorkdir
}

// Init is the body of POST /init.
type Init struct {
	EnvVars        map[string]string `json:"envVars,omitempty"`
	AccessToken    *string           `json:"accessToken,omitempty"`
	Timestamp      *time.Time        `json:"timestamp,omitempty"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	// Internal carries sandbox identity (E2B_SANDBOX_ID, E2B_TEMPLATE_ID) for
	// sandboxes restored from a snapshot; a Moat extension.
	Internal map[string]string `json:"internal,omitempty"`
	// EgressCA is the egress proxy's CA certificate (PEM), for sandboxes
	// with network.rules: envd adds it to the system trust store and
	// points processes started afterwards at it (SSL_CERT_FILE,
	// REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS), then answers with
	// EgressCAHeader: EgressCAInstalled. A Moat extension; E2B clients
	// never send it.
	EgressCA string `json:"moatEgressCA,omitempty"`
}

// The answer header of an /init that installed Init.EgressCA.
const (
	EgressCAHeader    = "X-Moat-Egress-Ca"
	EgressCAInstalled = "installed"
)

// Apply applies an /init. It reports whether the clock in in.Timestamp is
// newer than any earlier /init (the caller may then set the system clock).
func (s *State) Apply(in Init) (clockNewer bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.EnvVars != nil {
		s.envVars = maps.Clone(in.EnvVars)
	}
	if in.AccessToken != nil {
		s.accessToken = *in.AccessToken
	}
	if in.DefaultUser != "" {
		s.defaultUser = in.DefaultUser
	}
	if in.DefaultWorkdir != "" {
		s.defaultWorkdir = in.DefaultWorkdir
	}
	if in.Internal != nil {
		if s.internal == nil {
			s.internal = map[string]string{}
		}
		maps.Copy(s.internal, in.Internal)
	}
	if in.Timestamp != nil && in.Timestamp.After(s.lastInit) {
		s.lastInit = *in.Timestamp
		return true
	}
	return false
}
