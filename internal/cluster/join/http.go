package join

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// Path is where API servers answer joins.
const Path = "/cluster/join"

// maxBody bounds a join request: a token and a certificate request.
const maxBody = 16 << 10

// Request and answer of POST Path.
type (
	joinRequest struct {
		Token string `json:"token"`
		CSR   string `json:"csr"` // PEM
	}
	joinAnswer struct {
		Certificate string `json:"certificate"` // PEM
		CA          string `json:"ca"`          // PEM
	}
)

// ServeHTTP answers POST Path: {"token","csr"} → {"certificate","ca"}; the
// token is the only credential. And POST RenewPath:
// {"certificate","csr","time","signature"} → {"certificate","ca"} (Renew).
// Errors are {"code","message"}: 400 for a malformed body, token or
// request, 403 for a token that is unknown, expired or used, or a renewal
// that does not prove the node, 405 for another method, 413 past 16 KiB.
func (is *Issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		errhttp.Write(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		errhttp.Write(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a join request is at most %d bytes", maxBody))
		return
	}
	if err != nil {
		errhttp.Write(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if r.URL.Path == RenewPath {
		is.serveRenew(w, b)
		return
	}
	var in joinRequest
	if err := json.Unmarshal(b, &in); err != nil {
		errhttp.Write(w, http.StatusBadRequest, "the body must be JSON {\"token\":\"...\",\"csr\":\"<PEM>\"}")
		return
	}
	cert, ca, err := is.Join(r.Context(), in.Token, []byte(in.CSR))
	if err != nil {
		errhttp.WriteError(w, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, joinAnswer{Certificate: string(cert), CA: string(ca)})
}

// Files a node keeps after it joined (in its data dir's cluster/).
const (
	KeyFile  = "node.key"
	CertFile = "node.crt"
	CAFile   = "ca.crt"
)

// Ask joins the cluster through the API server at apiURL with token as
// nodeID: it makes the node's key and request, and returns the key, the
// signed certificate and the CA's certificate (PEM).
func Ask(ctx context.Context, hc *http.Client, apiURL, token, nodeID string) (key, cert, ca []byte, err error) {
	key, csr, err := Request(nodeID)
	if err != nil {
		return nil, nil, nil, err
	}
	body, _ := json.Marshal(joinRequest{Token: token, CSR: string(csr)})
	cert, ca, err = post(ctx, hc, apiURL, Path, body)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("join: %w", err)
	}
	return key, cert, ca, nil
}

// post sends body to path of the API server at apiURL and returns the
// certificate and CA of its answer.
func post(ctx context.Context, hc *http.Client, apiURL, path string, body []byte) (cert, ca []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(apiURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e errhttp.Error
		_ = json.Unmarshal(b, &e)
		return nil, nil, fmt.Errorf("%s answered %d: %s: %w", apiURL, resp.StatusCode, e.Message, errhttp.ToNative(resp.StatusCode))
	}
	var out joinAnswer
	if err := json.Unmarshal(b, &out); err != nil || out.Certificate == "" || out.CA == "" {
		return nil, nil, fmt.Errorf("%s answered an unexpected body", apiURL)
	}
	return []byte(out.Certificate), []byte(out.CA), nil
}

// Save writes what a join gave the node into dir (made 0700 if missing):
// the CA's certificate, its certificate, its key (mode 0600) and apiURL,
// where it renews (APIFile).
func Save(dir, apiURL string, key, cert, ca []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeFiles(dir, []fileOut{{CAFile, ca, 0o644}, {CertFile, cert, 0o644}, {KeyFile, key, 0o600},
		{APIFile, []byte(apiURL + "\n"), 0o644}})
}

// SaveRenewed replaces the key and certificate in dir with renewed ones:
// the key first, so that a start between the two reads a pair that does
// not match and says so, rather than a certificate alone that could be
// taken for a valid one.
func SaveRenewed(dir string, key, cert []byte) error {
	return writeFiles(dir, []fileOut{{KeyFile, key, 0o600}, {CertFile, cert, 0o644}})
}

// fileOut is a file writeFiles writes.
type fileOut struct {
	name string
	b    []byte
	mode os.FileMode
}

// writeFiles replaces each file in dir, each through a temporary file
// renamed over it.
func writeFiles(dir string, files []fileOut) error {
	for _, f := range files {
		tmp := filepath.Join(dir, "."+f.name+".new")
		if err := os.WriteFile(tmp, f.b, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return err
		}
	}
	return nil
}

// CAHash is the hex SHA-256 of the first certificate in caPEM (its DER):
// what a node pins with `moat cluster join --ca-sha256`, so that a join
// over a network it does not trust cannot hand it another CA.
func CAHash(caPEM []byte) (string, error) {
	blk, _ := pem.Decode(caPEM)
	if blk == nil {
		return "", fmt.Errorf("no PEM certificate")
	}
	h := sha256.Sum256(blk.Bytes)
	return hex.EncodeToString(h[:]), nil
}
