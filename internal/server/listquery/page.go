package listquery

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/moatsh/moat/internal/errdefs"
)

// PageLimit reads ?limit of a paged list: 1..100, default 100 (E2B's
// paginationLimit).
func PageLimit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid limit %q: want 1..100", v)
	}
	return n, nil
}

// TrimPage cuts items, fetched with limit+1, to limit and, when there was
// more, sets X-Next-Token to the token of the page's last item.
func TrimPage[T any](w http.ResponseWriter, items []T, limit int, token func(T) string) []T {
	if len(items) > limit {
		items = items[:limit]
		w.Header().Set("X-Next-Token", token(items[len(items)-1]))
	}
	return items
}
