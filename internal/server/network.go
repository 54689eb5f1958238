package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/server/secretapi"
	"github.com/moatsh/moat/internal/store"
)

// networkCreate is E2B's SandboxNetworkConfig as NewSandbox carries it,
// with httpsPorts (sent by SDKs of other E2B API versions). Moat enforces
// allowOut/denyOut (IPs and CIDR blocks) on the host and allowPublicTraffic
// (a traffic access token the proxy requires); every other field changes
// security or routing and is refused with 400 when set, never ignored; so
// is any field this server does not know.
type networkCreate struct {
	rest.SandboxNetworkConfig
	HTTPSPorts json.RawMessage `json:"httpsPorts"`
}

// networkUpdate is SandboxNetworkUpdateConfig (PUT /sandboxes/{id}/network)
// with the fields older E2B servers also took.
type networkUpdate struct {
	rest.SandboxNetworkUpdateConfig
	MaskRequestHost *string         `json:"maskRequestHost"`
	AllowIn         json.RawMessage `json:"allowIn"`
	DenyIn          json.RawMessage `json:"denyIn"`
}

// toNetworkOut is the network object of SandboxDetail.
func toNetworkOut(n store.Network) *rest.SandboxNetworkConfig {
	public := n.TrafficAccessToken == ""
	return &rest.SandboxNetworkConfig{AllowOut: n.AllowOut, DenyOut: n.DenyOut, AllowPublicTraffic: &public,
		Rules: secretapi.RulesOut(n.Rules)}
}

// proxySet reports whether an egressProxy was given (an empty object is not).
func proxySet(p *rest.SandboxEgressProxyConfig) bool {
	return p != nil && *p != (rest.SandboxEgressProxyConfig{})
}

// unset reports whether an optional JSON value is absent, null or empty.
func unset(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", "[]", "{}":
		return true
	}
	return false
}

func errUnsupported(field string) error {
	return errdefs.Publicf(errdefs.ErrInvalidArgument, "%s is not supported by this server", field)
}

// decodeStrict decodes one JSON value from raw, refusing unknown fields
// (named in the error, prefixed with what).
func decodeStrict(raw []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid request body: field %q must be %s, not %s", what+te.Field, te.Type, te.Value)
		}
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid %s: %v", what, err)
	}
	return nil
}

// parseNetwork checks a create's network object into req.
func (s *Server) parseNetwork(ctx context.Context, raw json.RawMessage, req *orchestrator.CreateRequest) error {
	if string(bytes.TrimSpace(raw)) == "null" || len(raw) == 0 {
		return nil
	}
	var n networkCreate
	if err := decodeStrict(raw, &n, "network."); err != nil {
		return err
	}
	switch {
	case n.MaskRequestHost != nil && *n.MaskRequestHost != "":
		return errUnsupported("network.maskRequestHost")
	case proxySet(n.EgressProxy):
		return errUnsupported("network.egressProxy")
	case !unset(n.HTTPSPorts):
		return errUnsupported("network.httpsPorts")
	}
	allow, _, err := orchestrator.CanonicalNetwork(n.AllowOut, n.DenyOut)
	if err != nil {
		return err
	}
	if req.Rules, err = s.secretAPI.CheckRules(ctx, req.Team, n.Rules, allow); err != nil {
		return err
	}
	req.AllowOut, req.DenyOut = n.AllowOut, n.DenyOut
	req.PrivateTraffic = n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic
	return nil
}

// updateNetwork is PUT /sandboxes/{id}/network: 204 once the new policy is
// in force.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request, id string) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		s.writeBodyErr(w, r, bodyError(err))
		return
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "request body is required"))
		return
	}
	var body networkUpdate
	if err := decodeStrict(raw, &body, ""); err != nil {
		s.fail(w, r, err)
		return
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"egressProxy", proxySet(body.EgressProxy)},
		{"maskRequestHost", body.MaskRequestHost != nil && *body.MaskRequestHost != ""},
		{"allowIn", !unset(body.AllowIn)},
		{"denyIn", !unset(body.DenyIn)},
	} {
		if f.set {
			s.fail(w, r, errUnsupported(f.name))
			return
		}
	}
	allow, _, err := orchestrator.CanonicalNetwork(body.AllowOut, body.DenyOut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rules, err := s.secretAPI.CheckRules(r.Context(), team(r), body.Rules, allow)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	_, err = s.orch.UpdateNetwork(r.Context(), team(r), id, orchestrator.NetworkUpdate{
		AllowOut: body.AllowOut, DenyOut: body.DenyOut, AllowInternet: body.AllowInternetAccess, Rules: rules})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
