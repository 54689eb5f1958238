// Package floor is the bare file server that `moat bench --files` measures
// envd's file API against: plain net/http in the same sandbox, behind the
// same proxy, with nothing of envd's (no users, no multipart, no
// compression choice, no metadata). GET /PATH sends the file, PUT /PATH
// writes it; `envd --floor ADDR` serves it instead of envd. It is a
// benchmark's yardstick, not an API: nothing else calls it.
package floor

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
)

// Handler serves the files under root.
func Handler(root string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := filepath.Join(root, filepath.Clean("/"+r.URL.Path))
		switch r.Method {
		case http.MethodGet:
			f, err := os.Open(p)
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			defer f.Close()
			_, _ = io.Copy(w, f)
		case http.MethodPut:
			f, err := os.Create(p)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, err = io.Copy(f, r.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
		}
	})
}
