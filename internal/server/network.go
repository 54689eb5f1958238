package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
)

// networkJSON is E2B's SandboxNetworkConfig as NewSandbox carries it.
// Moat enforces allowOut/denyOut (IPs and CIDR blocks) on the host and
// allowPublicTraffic (a traffic access token the proxy requires); every
// other field changes security or routing and is refused with 400 when
// set, never ignored; so is any field this server does not know.
type networkJSON struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts"`
	Rules              json.RawMessage `json:"rules"`
}

// networkUpdateJSON is SandboxNetworkUpdateConfig (PUT
// /sandboxes/{id}/network), with the fields older E2B servers also took.
type networkUpdateJSON struct {
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	Rules               json.RawMessage `json:"rules"`
	MaskRequestHost     *string         `json:"maskRequestHost"`
	AllowIn             json.RawMessage `json:"allowIn"`
	DenyIn              json.RawMessage `json:"denyIn"`
}

// networkOut is the network object of SandboxDetail.
type networkOut struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic bool     `json:"allowPublicTraffic"`
}

func toNetworkOut(n store.Network) *networkOut {
	return &networkOut{AllowOut: n.AllowOut, DenyOut: n.DenyOut, AllowPublicTraffic: n.TrafficAccessToken == ""}
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
	return fmt.Errorf("%s is not supported by this server: %w", field, errdefs.ErrInvalidArgument)
}

// decodeStrict decodes one JSON value from raw, refusing unknown fields
// (named in the error, prefixed with what).
func decodeStrict(raw []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("invalid request body: field %q must be %s, not %s: %w", what+te.Field, te.Type, te.Value, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("invalid %s: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// parseNetwork checks a create's network object into req.
func parseNetwork(raw json.RawMessage, req *orchestrator.CreateRequest) error {
	if string(bytes.TrimSpace(raw)) == "null" || len(raw) == 0 {
		return nil
	}
	var n networkJSON
	if err := decodeStrict(raw, &n, "network."); err != nil {
		return err
	}
	switch {
	case n.MaskRequestHost != nil && *n.MaskRequestHost != "":
		return errUnsupported("network.maskRequestHost")
	case !unset(n.EgressProxy):
		return errUnsupported("network.egressProxy")
	case !unset(n.HTTPSPorts):
		return errUnsupported("network.httpsPorts")
	case !unset(n.Rules):
		return errUnsupported("network.rules")
	}
	if _, _, err := orchestrator.CanonicalNetwork(n.AllowOut, n.DenyOut); err != nil {
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
		s.fail(w, r, fmt.Errorf("request body is required: %w", errdefs.ErrInvalidArgument))
		return
	}
	var body networkUpdateJSON
	if err := decodeStrict(raw, &body, ""); err != nil {
		s.fail(w, r, err)
		return
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"egressProxy", !unset(body.EgressProxy)},
		{"rules", !unset(body.Rules)},
		{"maskRequestHost", body.MaskRequestHost != nil && *body.MaskRequestHost != ""},
		{"allowIn", !unset(body.AllowIn)},
		{"denyIn", !unset(body.DenyIn)},
	} {
		if f.set {
			s.fail(w, r, errUnsupported(f.name))
			return
		}
	}
	_, err = s.orch.UpdateNetwork(r.Context(), team(r), id, orchestrator.NetworkUpdate{
		AllowOut: body.AllowOut, DenyOut: body.DenyOut, AllowInternet: body.AllowInternetAccess})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
