package server_test

import (
	"slices"
	"strings"
	"testing"
)

// TestCreateNetworkValidation: what the SDKs send in a create body that
// Moat cannot honour is refused with 400 naming it, never ignored.
func TestCreateNetworkValidation(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"malformed CIDR", `{"network":{"denyOut":["10.0.0.0/33"]}}`, `network.denyOut: invalid entry: "10.0.0.0/33" is not a valid CIDR block`},
		{"malformed entry", `{"network":{"allowOut":["1.2.3.4.5"]}}`, `"1.2.3.4.5" is not an IP address, CIDR block or domain name`},
		{"domain in allowOut without deny-all", `{"network":{"allowOut":["example.com"],"denyOut":["8.8.8.8"]}}`, `network.allowOut: when specifying allowed domains in allowOut, you must include '0.0.0.0/0'`},
		{"wildcard domain without denyOut", `{"network":{"allowOut":["*.example.com"]}}`, `you must include '0.0.0.0/0' (ALL_TRAFFIC) in denyOut`},
		{"domain in denyOut", `{"network":{"denyOut":["example.com"]}}`, `domain names are not supported for deny rules`},
		{"port rule", `{"network":{"allowOut":["1.2.3.4:443"]}}`, `port rules are not supported`},
		{"maskRequestHost", `{"network":{"maskRequestHost":"x.example.com"}}`, `network.maskRequestHost is not supported`},
		{"egressProxy", `{"network":{"egressProxy":{"address":"p:1080"}}}`, `network.egressProxy is not supported`},
		{"httpsPorts", `{"network":{"httpsPorts":[8443]}}`, `network.httpsPorts is not supported`},
		{"malformed rules", `{"network":{"rules":{"api example.com":[{"transform":{"headers":{"a":"b"}}}]}}}`, `network.rules: invalid domain`},
		{"rules placeholder", `{"network":{"rules":{"a.com":[{"transform":{"headers":{"a":"${e2b.env.X}"}}}]}}}`, `unknown placeholder`},
		{"unknown network field", `{"network":{"allowIn":["1.2.3.4"]}}`, `unknown field "allowIn"`},
		{"mcp", `{"mcp":{"github":{}}}`, `mcp is not supported`},
		{"iam", `{"iam":{"tokens":{"t":{"audience":"a","tokenType":"jwt"}}}}`, `iam is not supported`},
		{"volumeMounts", `{"volumeMounts":[{"name":"v","path":"/data"}]}`, `volumeMounts is not supported`},
		{"allowOut of the wrong type", `{"network":{"allowOut":"1.2.3.4"}}`, `network.allowOut`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"templateID":"base",` + strings.TrimPrefix(tc.body, "{")
			for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
				msg := h.do("POST", p, body).errBody(t, 400)
				if !strings.Contains(msg, tc.want) {
					t.Fatalf("%s: message %q, want it to contain %q", p, msg, tc.want)
				}
			}
		})
	}
	// Rules grant no egress: their domain must be reachable through allowOut.
	for _, body := range []string{
		`{"templateID":"base","network":{"rules":{"a.com":[{"transform":{"headers":{"a":"b"}}}]}}}`,
		`{"templateID":"base","network":{"allowOut":["b.com"],"denyOut":["0.0.0.0/0"],"rules":{"a.com":[{}]}}}`,
		`{"templateID":"base","network":{"allowOut":["a.com"],"denyOut":["0.0.0.0/0"],"rules":{"*.a.com":[{}]}}}`,
	} {
		if msg := h.do("POST", "/v2/sandboxes", body).errBody(t, 400); !strings.Contains(msg, `is not reachable`) {
			t.Fatalf("rules outside allowOut: %q", msg)
		}
	}
	if n := h.env.Runtime.Count(); n != 0 {
		t.Fatalf("%d sandboxes created by refused requests", n)
	}
	// Harmless or empty values pass.
	r := h.do("POST", "/v2/sandboxes", `{"templateID":"base","mcp":null,"volumeMounts":[],"autoPauseMemory":false,
		"network":{"allowOut":[],"denyOut":[],"allowPublicTraffic":true,"rules":{}}}`)
	if r.status != 201 {
		t.Fatalf("create with empty values: %d %s", r.status, r.body)
	}
}

// TestNetworkRoundTrip: create with a policy, read it back, replace it with
// PUT /sandboxes/{id}/network, and allowPublicTraffic: false returns a
// traffic access token.
func TestNetworkRoundTrip(t *testing.T) {
	h := newHarness(t)
	var sb struct {
		SandboxID          string  `json:"sandboxID"`
		TrafficAccessToken *string `json:"trafficAccessToken"`
	}
	r := h.do("POST", "/v2/sandboxes", `{"templateID":"base","allow_internet_access":false,
		"network":{"allowOut":["1.2.3.4","10.1.0.0/16"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":false}}`)
	if r.status != 201 {
		t.Fatalf("create %d %s", r.status, r.body)
	}
	r.json(t, &sb)
	if sb.TrafficAccessToken == nil || *sb.TrafficAccessToken == "" {
		t.Fatalf("no traffic token: %s", r.body)
	}
	type detail struct {
		AllowInternetAccess *bool `json:"allowInternetAccess"`
		Network             *struct {
			AllowOut           []string `json:"allowOut"`
			DenyOut            []string `json:"denyOut"`
			AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
		} `json:"network"`
	}
	get := func() detail {
		var d detail
		r := h.do("GET", "/sandboxes/"+sb.SandboxID, "")
		if r.status != 200 {
			t.Fatalf("get %d %s", r.status, r.body)
		}
		r.json(t, &d)
		if d.Network == nil || d.Network.AllowPublicTraffic == nil {
			t.Fatalf("no network in %s", r.body)
		}
		return d
	}
	d := get()
	if !slices.Equal(d.Network.AllowOut, []string{"1.2.3.4/32", "10.1.0.0/16"}) || !slices.Equal(d.Network.DenyOut, []string{"0.0.0.0/0"}) ||
		*d.Network.AllowPublicTraffic || *d.AllowInternetAccess {
		t.Fatalf("detail %+v %+v", d, d.Network)
	}
	p := "/sandboxes/" + sb.SandboxID + "/network"
	if r := h.do("PUT", p, `{"allowOut":["8.8.8.8/32"],"allow_internet_access":true}`); r.status != 204 {
		t.Fatalf("update %d %s", r.status, r.body)
	}
	d = get()
	if !slices.Equal(d.Network.AllowOut, []string{"8.8.8.8/32"}) || len(d.Network.DenyOut) != 0 || !*d.AllowInternetAccess {
		t.Fatalf("after update %+v %+v", d, d.Network)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"allowOut":["example.com"]}`, "you must include '0.0.0.0/0'"},
		{`{"denyOut":["1.2.3.4/40"]}`, `"1.2.3.4/40"`},
		{`{"egressProxy":{"address":"p:1"}}`, "egressProxy is not supported"},
		{`{"rules":{"a/b":[{}]}}`, "network.rules: invalid domain"},
		{`{"allowIn":["1.2.3.4"]}`, "allowIn is not supported"},
		{`{"maskRequestHost":"x"}`, "maskRequestHost is not supported"},
		{`{"bogus":1}`, `unknown field "bogus"`},
		{``, "request body is required"},
	} {
		if msg := h.do("PUT", p, tc.body).errBody(t, 400); !strings.Contains(msg, tc.want) {
			t.Fatalf("PUT %s: %q, want %q", tc.body, msg, tc.want)
		}
	}
	if msg := h.do("PUT", p, `{"rules":{"a.com":[{}]}}`).errBody(t, 400); !strings.Contains(msg, `domain "a.com" is not reachable`) {
		t.Fatalf("PUT rules outside allowOut: %q", msg)
	}
	if d := get(); !slices.Equal(d.Network.AllowOut, []string{"8.8.8.8/32"}) {
		t.Fatalf("refused update changed the policy: %+v", d.Network)
	}
	h.do("PUT", "/sandboxes/inope/network", `{}`).errBody(t, 404)
	if r := h.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", ""); r.status != 204 {
		t.Fatalf("pause %d", r.status)
	}
	if r := h.do("PUT", p, `{"denyOut":["0.0.0.0/0"]}`); r.status != 204 {
		t.Fatalf("update while paused %d %s", r.status, r.body)
	}
	h.do("POST", "/sandboxes/"+sb.SandboxID+"/resume", `{"memory":false}`).errBody(t, 400)
	if r := h.do("POST", "/sandboxes/"+sb.SandboxID+"/resume", `{}`); r.status != 201 {
		t.Fatalf("resume %d %s", r.status, r.body)
	}
	if d := get(); !slices.Equal(d.Network.DenyOut, []string{"0.0.0.0/0"}) {
		t.Fatalf("after pause/resume %+v", d.Network)
	}
}
