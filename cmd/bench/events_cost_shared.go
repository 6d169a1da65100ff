package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// What P12's parts share: their sessions' settings, the backfills and events they create the
// way a client would, and the checks and log lines of their reads.

// withSessionDefault adds a run-time parameter to a lib/pq URL unless it sets it. P12's
// sessions run with JIT off, as the service's pool sessions do (cmd/api, poolSessionDSN):
// with the server's default (on), every EventScan page of a partitioned outbox compiles its
// statement (55-115 ms here), whose estimate crosses jit_above_cost from two partitions on,
// and P12 would measure a compiler the service's own sessions turn off. -db '...&jit=on'
// measures it.
func withSessionDefault(dsn, key, value string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	if q.Get(key) == "" {
		q.Set(key, value)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// p12Backfill creates an hourly DAG and its backfill through the repo, with the fields a
// client sets on a real one (a description of about 40 characters, a conf, who and why; the
// repo adds the plan's hash): the UPDATE of (a) rewrites the whole row, so its size is part
// of the change's cost.
func p12Backfill(ctx context.Context, s *repo.Store, dag string) (int64, error) {
	if err := putDag(ctx, s, dag, hourly); err != nil {
		return 0, err
	}
	from, to := hourlyWindow(time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), 24)
	req := plainRequest(dag, from, to, 10)
	desc, who, why := "re-run of March after the schema fix #4127", "svc-airflow@example.com", "late partition data from upstream"
	req.Description, req.CreatedBy, req.Reason = &desc, &who, &why
	req.DagRunConf = []byte(`{"source": "s3://lake/raw/events", "full_refresh": true, "regions": ["eu", "us"]}`)
	bf, _, err := s.BackfillCreate(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("backfill of %s: %w", dag, err)
	}
	return bf.ID, nil
}

// p12Events creates a backfill with three events: its creation and two PATCHes.
func p12Events(ctx context.Context, s *repo.Store, dag string) (int64, error) {
	id, err := p12Backfill(ctx, s, dag)
	if err != nil {
		return 0, err
	}
	for _, v := range []int{3, 4} {
		if _, err := s.BackfillPatch(ctx, repo.BackfillPatchParams{ID: id, MaxActiveRuns: &v}); err != nil {
			return 0, err
		}
	}
	return id, nil
}

var p12Types = []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillUpdated, domain.EventBackfillUpdated}

func eventTypesOf(evs []domain.Event) []domain.EventType {
	out := make([]domain.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func durs(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = dur(d)
	}
	return strings.Join(out, ", ")
}
