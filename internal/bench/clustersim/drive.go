package clustersim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// createBodyJSON is every client's create.
var createBodyJSON = []byte(`{"templateID":"base"}`)

// drive issues cfg.Sandboxes creates from cfg.Concurrency clients, the
// i-th to front door i mod len(urls), and fills res's counts and latency.
func drive(ctx context.Context, urls []string, key string, cfg Config, res *Result) {
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	lat := make([]time.Duration, cfg.Sandboxes)
	status := make([]int, cfg.Sandboxes)
	errs := make([]error, cfg.Sandboxes)
	next := make(chan int)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for i := range next {
				t0 := time.Now()
				status[i], errs[i] = create(ctx, client, urls[i%len(urls)], key)
				lat[i] = time.Since(t0)
			}
		})
	}
	for i := range cfg.Sandboxes {
		select {
		case next <- i:
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	close(next)
	wg.Wait()
	for i, st := range status {
		switch {
		case errs[i] == nil && st == http.StatusCreated:
			res.Created++
		case errs[i] == nil && st == http.StatusServiceUnavailable:
			res.Refused++
		default:
			res.Failed++
			if res.FirstError == "" {
				res.FirstError = fmt.Sprintf("status %d: %v", st, errs[i])
			}
		}
	}
	res.Latency.Name, res.Latency.Samples = "create", lat
}

// create posts one create to url and returns the status; a status other
// than 201 or 503 comes with the answer's body as its error.
func create(ctx context.Context, client *http.Client, url, key string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/sandboxes", bytes.NewReader(createBodyJSON))
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-KEY", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("create: %w", err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusServiceUnavailable {
		return resp.StatusCode, fmt.Errorf("create: %s", bytes.TrimSpace(body))
	}
	return resp.StatusCode, nil
}
