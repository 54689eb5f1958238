// Package secretapi serves E2B's /secrets API for the server (create,
// update, get, list, delete; values are write-only: no response carries
// one) and checks the network.rules of a create or a network update
// against the caller's secrets and allowOut.
package secretapi

import (
	"context"
	"net/http"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/secrets"
	"github.com/moatsh/moat/internal/server/listquery"
	"github.com/moatsh/moat/internal/store"
)

// Deps is what the API uses of the server.
type Deps struct {
	Secrets *secrets.Service
	// Team is the caller's team, which the server's API-key check put in
	// the request.
	Team func(*http.Request) string
	// Fail answers with err as E2B's JSON error and logs it once.
	Fail func(http.ResponseWriter, *http.Request, error)
	// Decode reads a required JSON body into v; when it fails it has
	// answered already (400, or 413 for an oversize body).
	Decode func(w http.ResponseWriter, r *http.Request, v any) bool
}

// API holds the secrets API's handlers; a nil *API is a server without a
// secrets service.
type API struct{ d Deps }

// New returns the API.
func New(d Deps) *API { return &API{d: d} }

// Register adds the /secrets routes to m behind auth; on a nil API they
// answer 501.
func (a *API) Register(m *http.ServeMux, auth func(http.HandlerFunc) http.HandlerFunc) {
	if a == nil {
		for _, p := range []string{"GET /secrets", "POST /secrets", "GET /secrets/{secretID}",
			"POST /secrets/{secretID}", "DELETE /secrets/{secretID}"} {
			m.HandleFunc(p, auth(notImplemented))
		}
		return
	}
	m.HandleFunc("GET /secrets", auth(a.listSecrets))
	m.HandleFunc("POST /secrets", auth(a.createSecret))
	m.HandleFunc("GET /secrets/{secretID}", auth(a.getSecret))
	m.HandleFunc("POST /secrets/{secretID}", auth(a.updateSecret))
	m.HandleFunc("DELETE /secrets/{secretID}", auth(a.deleteSecret))
}

func notImplemented(w http.ResponseWriter, r *http.Request) {
	errhttp.WriteError(w, errdefs.Public(errdefs.ErrNotImplemented, r.Method+" "+r.URL.Path+" is not implemented by this server"))
}

// metadata is a body's optional metadata: nil when it has none.
func metadata(m *rest.SecretMetadata) map[string]string {
	if m == nil {
		return nil
	}
	return *m
}

func toSecret(sec store.Secret) rest.Secret {
	return rest.Secret{SecretID: sec.ID, Name: sec.Name, CurrentVersion: sec.CurrentVersion,
		Metadata: rest.SecretMetadata(sec.Metadata), CreatedAt: sec.CreatedAt.UTC(), UpdatedAt: sec.UpdatedAt.UTC()}
}

// createSecret is POST /secrets: 201 Secret.
func (a *API) createSecret(w http.ResponseWriter, r *http.Request) {
	var body rest.NewSecret
	if !a.d.Decode(w, r, &body) {
		return
	}
	sec, err := a.d.Secrets.Create(r.Context(), a.d.Team(r), body.Name, body.Value, metadata(body.Metadata))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusCreated, toSecret(sec))
}

// updateSecret is POST /secrets/{secretID}: a new version; 200 Secret.
func (a *API) updateSecret(w http.ResponseWriter, r *http.Request) {
	var body rest.SecretUpdate
	if !a.d.Decode(w, r, &body) {
		return
	}
	sec, err := a.d.Secrets.Update(r.Context(), a.d.Team(r), r.PathValue("secretID"), body.Value, metadata(body.Metadata))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, toSecret(sec))
}

// getSecret is GET /secrets/{secretID} (ID or name): 200 Secret.
func (a *API) getSecret(w http.ResponseWriter, r *http.Request) {
	sec, err := a.d.Secrets.Get(r.Context(), a.d.Team(r), r.PathValue("secretID"))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, toSecret(sec))
}

// deleteSecret is DELETE /secrets/{secretID}: 204.
func (a *API) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := a.d.Secrets.Delete(r.Context(), a.d.Team(r), r.PathValue("secretID")); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listSecrets is GET /secrets?limit&nextToken, by name; X-Next-Token is
// the last name of a full page.
func (a *API) listSecrets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := listquery.PageLimit(q)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	list, err := a.d.Secrets.List(r.Context(), a.d.Team(r), q.Get("nextToken"), limit+1)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	list = listquery.TrimPage(w, list, limit, func(sec store.Secret) string { return sec.Name })
	out := make([]rest.Secret, 0, len(list))
	for _, sec := range list {
		out = append(out, toSecret(sec))
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

// CheckRules validates a create's or an update's network.rules for team
// and returns them as the sandbox stores them: malformed rules,
// placeholders of secrets team does not have and rules for a domain that
// allowOut (canonical, as orchestrator.CanonicalNetwork returns it) does
// not reach are 400, naming the domain, header or secret.
func (a *API) CheckRules(ctx context.Context, team string, rules map[string][]rest.SandboxNetworkRule,
	allowOut []string) ([]store.NetworkRule, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	parsed, names, err := secrets.ParseRules(ruleHeaders(rules))
	if err != nil {
		return nil, err
	}
	if len(names) > 0 && a == nil {
		return nil, errdefs.Publicf(errdefs.ErrNotImplemented, "network.rules: secrets are not available on this server")
	}
	for _, n := range names {
		if _, err := a.d.Secrets.Get(ctx, team, n); errdefs.IsNotFound(err) {
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument,
				"network.rules: secret %q not found (create it with Secret.create first)", n)
		} else if err != nil {
			return nil, err
		}
	}
	if err := secrets.CheckReachable(parsed, netpolicy.Domains(allowOut)); err != nil {
		return nil, err
	}
	return parsed, nil
}

// RulesOut is network.rules as GET /sandboxes/{id} reports them: header
// values with their placeholders (never a secret's value), by domain.
func RulesOut(rules []store.NetworkRule) map[string][]rest.SandboxNetworkRule {
	if len(rules) == 0 {
		return nil
	}
	out := map[string][]rest.SandboxNetworkRule{}
	for _, r := range rules {
		var rule rest.SandboxNetworkRule
		if len(r.Headers) > 0 {
			rule.Transform = &rest.SandboxNetworkTransform{Headers: r.Headers}
		}
		out[r.Domain] = append(out[r.Domain], rule)
	}
	return out
}

// ruleHeaders is network.rules as secrets.ParseRules reads them: each
// domain's rules as the headers their transform sets (nil without one).
func ruleHeaders(rules map[string][]rest.SandboxNetworkRule) map[string][]map[string]string {
	out := make(map[string][]map[string]string, len(rules))
	for domain, rs := range rules {
		hs := make([]map[string]string, 0, len(rs))
		for _, r := range rs {
			var h map[string]string
			if r.Transform != nil {
				h = r.Transform.Headers
			}
			hs = append(hs, h)
		}
		out[domain] = hs
	}
	return out
}
