package templatebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// templateAPI speaks E2B's template REST API as the official SDKs do
// (Template.build): the same routes, bodies and headers, so the CLI
// exercises exactly what SDK users hit.
type templateAPI struct {
	url, key string
	http     *http.Client
}

func newTemplateAPI(apiURL, apiKey string) *templateAPI {
	return &templateAPI{url: strings.TrimRight(apiURL, "/"), key: apiKey, http: &http.Client{Timeout: 2 * time.Minute}}
}

// apiError is a non-2xx answer ({"code","message"}).
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.msg)
}

// call sends in as JSON (if not nil) and decodes the answer into out (if
// not nil); a status other than want is an *apiError.
func (a *templateAPI) call(ctx context.Context, method, path string, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("X-API-Key", a.key)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: is `moat serve` running at %s? %w", method, path, a.url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %w", method, path, parseAPIError(resp.StatusCode, b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

func parseAPIError(status int, b []byte) error {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		return &apiError{status: status, msg: e.Message}
	}
	return &apiError{status: status, msg: strings.TrimSpace(string(b))}
}

func isStatus(err error, status int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == status
}

type buildRequest struct {
	Name     string `json:"name"`
	CPUCount *int32 `json:"cpuCount,omitempty"`
	MemoryMB *int32 `json:"memoryMB,omitempty"`
}

type buildIDs struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
}

// requestBuild is POST /v3/templates.
func (a *templateAPI) requestBuild(ctx context.Context, req buildRequest) (buildIDs, error) {
	var out buildIDs
	err := a.call(ctx, http.MethodPost, "/v3/templates", req, &out, http.StatusAccepted)
	return out, err
}

type filesLink struct {
	Present bool   `json:"present"`
	URL     string `json:"url"`
}

// filesLink is GET /templates/{id}/files/{hash}.
func (a *templateAPI) filesLink(ctx context.Context, templateID, hash string) (filesLink, error) {
	var out filesLink
	err := a.call(ctx, http.MethodGet, "/templates/"+url.PathEscape(templateID)+"/files/"+hash, nil, &out, http.StatusCreated)
	return out, err
}

// upload PUTs the archive at path to the signed URL the server handed out.
func (a *templateAPI) upload(ctx context.Context, uploadURL, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, uploadURL, f)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	req.ContentLength = fi.Size()
	cl := &http.Client{Timeout: 30 * time.Minute}
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upload: %w", parseAPIError(resp.StatusCode, b))
	}
	return nil
}

type stepBody struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash,omitempty"`
	Force     bool     `json:"force"`
}

type buildStart struct {
	FromImage    string     `json:"fromImage,omitempty"`
	FromTemplate string     `json:"fromTemplate,omitempty"`
	StartCmd     string     `json:"startCmd,omitempty"`
	ReadyCmd     string     `json:"readyCmd,omitempty"`
	Force        bool       `json:"force"`
	Steps        []stepBody `json:"steps"`
}

// startBuild is POST /v2/templates/{id}/builds/{buildID}.
func (a *templateAPI) startBuild(ctx context.Context, ids buildIDs, body buildStart) error {
	return a.call(ctx, http.MethodPost, "/v2/templates/"+url.PathEscape(ids.TemplateID)+"/builds/"+url.PathEscape(ids.BuildID),
		body, nil, http.StatusAccepted)
}

type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step"`
}

type buildStatus struct {
	Status     string     `json:"status"`
	LogEntries []logEntry `json:"logEntries"`
	Reason     *struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"reason"`
}

// status is GET /templates/{id}/builds/{buildID}/status?logsOffset=N.
func (a *templateAPI) status(ctx context.Context, ids buildIDs, offset int) (buildStatus, error) {
	var out buildStatus
	err := a.call(ctx, http.MethodGet, fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d",
		url.PathEscape(ids.TemplateID), url.PathEscape(ids.BuildID), offset), nil, &out, http.StatusOK)
	return out, err
}

// templateExists asks GET /templates/aliases/{name}: a template the
// caller may build from.
func (a *templateAPI) templateExists(ctx context.Context, name string) (bool, error) {
	err := a.call(ctx, http.MethodGet, "/templates/aliases/"+url.PathEscape(name), nil, nil, http.StatusOK)
	switch {
	case err == nil:
		return true, nil
	case isStatus(err, http.StatusNotFound), isStatus(err, http.StatusBadRequest):
		return false, nil
	}
	return false, err
}

// lastBuild is how long the template's newest finished build other than
// buildID took (GET /templates/{id}); false when it has none.
func (a *templateAPI) lastBuild(ctx context.Context, templateID, buildID string) (time.Duration, bool) {
	var out struct {
		Builds []struct {
			BuildID    string     `json:"buildID"`
			Status     string     `json:"status"`
			CreatedAt  time.Time  `json:"createdAt"`
			FinishedAt *time.Time `json:"finishedAt"`
		} `json:"builds"`
	}
	if a.call(ctx, http.MethodGet, "/templates/"+url.PathEscape(templateID), nil, &out, http.StatusOK) != nil {
		return 0, false
	}
	var best time.Time
	var took time.Duration
	for _, b := range out.Builds {
		if b.BuildID == buildID || b.Status != "ready" || b.FinishedAt == nil || !b.FinishedAt.After(best) {
			continue
		}
		best, took = *b.FinishedAt, b.FinishedAt.Sub(b.CreatedAt)
	}
	return took, !best.IsZero()
}

// deleteTemplate is DELETE /templates/{id} (ID or name).
func (a *templateAPI) deleteTemplate(ctx context.Context, idOrName string) error {
	return a.call(ctx, http.MethodDelete, "/templates/"+url.PathEscape(idOrName), nil, nil, http.StatusNoContent)
}
