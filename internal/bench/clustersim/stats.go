package clustersim

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Statements is what pg_stat_statements counted in a run's database from
// the first create to the last answer (BEGIN and COMMIT included: every
// statement a client sent).
type Statements struct {
	// Create is the create path's statements: the front doors' reads,
	// the nodes' key check, template lookup and write transaction.
	Create int64
	// Background is the lease renewals and the watchers' rounds, which
	// run whether anyone creates or not.
	Background int64
	Top        []Statement // every statement, the most total time first
}

// Statement is one normalized statement's calls and time.
type Statement struct {
	Query      string
	Calls      int64
	Total      time.Duration // execution time summed over calls
	Background bool
}

// PerCreate is the create path's statements per created sandbox.
func (r Result) PerCreate() float64 {
	if r.Created == 0 {
		return 0
	}
	return float64(r.Stmts.Create) / float64(r.Created)
}

// resetStats clears pg_stat_statements.
func (e *Env) resetStats(ctx context.Context) error {
	if _, err := e.admin.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// readStats reads the statements of the database dsn names since the
// last reset.
func (e *Env) readStats(ctx context.Context, dsn string) (Statements, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return Statements{}, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	rows, err := e.admin.QueryContext(ctx, `SELECT query, calls, total_exec_time FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = ?)`, strings.TrimPrefix(u.Path, "/"))
	if err != nil {
		return Statements{}, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var st Statements
	for rows.Next() {
		var s Statement
		var ms float64
		if err := rows.Scan(&s.Query, &s.Calls, &ms); err != nil {
			return st, fmt.Errorf("read pg_stat_statements: %w", err)
		}
		s.Query = strings.Join(strings.Fields(s.Query), " ")
		s.Total = time.Duration(ms * float64(time.Millisecond))
		s.Background = background(s.Query)
		if s.Background {
			st.Background += s.Calls
		} else {
			st.Create += s.Calls
		}
		st.Top = append(st.Top, s)
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	slices.SortFunc(st.Top, func(a, b Statement) int { return cmp.Compare(b.Total, a.Total) })
	return st, nil
}

// backgroundStmts mark the node registry's upkeep (store/nodes.go):
// RegisterNode, RenewNodeLease, the watchers' ListNodes and
// MarkLostNodes.
var backgroundStmts = []string{"INSERT INTO nodes", "SET lease_until = CASE", "UPDATE nodes SET lost",
	"FROM nodes ORDER BY id", "FROM nodes WHERE id ="}

func background(q string) bool {
	return slices.ContainsFunc(backgroundStmts, func(s string) bool { return strings.Contains(q, s) })
}

// PrintTable prints one row per result: nodes, sandboxes, creates/s,
// p50, p99, statements per create, the registry's background statements
// per second and the CPU time per create of this process and of
// PostgreSQL (and the refusals and failures, when there were any).
func PrintTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%6s %9s %6s %9s %9s %9s %12s %10s %14s\n",
		"nodes", "sandboxes", "fronts", "creates/s", "p50", "p99", "stmts/create", "bg stmts/s", "cpu/create")
	for _, r := range rs {
		bg := 0.0
		if r.Took > 0 {
			bg = float64(r.Stmts.Background) / r.Took.Seconds()
		}
		cpu := "-"
		if r.Created > 0 {
			ms := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(r.Created) }
			cpu = fmt.Sprintf("%.2f+%.2f ms", ms(r.CPU.Go), ms(r.CPU.PG))
		}
		fmt.Fprintf(w, "%6d %9d %6d %9.0f %9s %9s %12.1f %10.0f %14s", r.Nodes, r.Sandboxes, r.Fronts, r.PerSecond(),
			r.Latency.Percentile(50).Round(100*time.Microsecond), r.Latency.Percentile(99).Round(100*time.Microsecond),
			r.PerCreate(), bg, cpu)
		if r.Refused > 0 || r.Failed > 0 {
			fmt.Fprintf(w, "  (%d refused: no room; %d failed: %s)", r.Refused, r.Failed, r.FirstError)
		}
		fmt.Fprintln(w)
	}
}

// PrintStatements prints r's statements, the most time first (at most
// n): calls per create, mean and total time.
func PrintStatements(w io.Writer, r Result, n int) {
	fmt.Fprintf(w, "statements, nodes=%d sandboxes=%d (per create, mean, total):\n", r.Nodes, r.Sandboxes)
	for i, s := range r.Stmts.Top {
		if i == n {
			break
		}
		per, mean := 0.0, time.Duration(0)
		if r.Created > 0 {
			per = float64(s.Calls) / float64(r.Created)
		}
		if s.Calls > 0 {
			mean = s.Total / time.Duration(s.Calls)
		}
		tag := ""
		if s.Background {
			tag = " [background]"
		}
		q := s.Query
		if len(q) > 110 {
			q = q[:110] + "…"
		}
		fmt.Fprintf(w, "  %6.2f %9s %9s  %s%s\n", per, mean.Round(time.Microsecond), s.Total.Round(time.Millisecond), q, tag)
	}
}
