package repo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Upstreams is a DAG's upstreams as the API reads them (dagAPIColumns: one JSON array).
type Upstreams []domain.Upstream

// Scan reads the JSON array dagAPIColumns builds.
func (u *Upstreams) Scan(src any) error {
	var data []byte
	switch v := src.(type) {
	case nil:
		*u = Upstreams{}
		return nil
	case []byte:
		data = v
	case string:
		data = []byte(v)
	default:
		return fmt.Errorf("upstreams: cannot scan %T", src)
	}
	return json.Unmarshal(data, (*[]domain.Upstream)(u))
}

// dagAPIColumns selects a Dag with its dependencies, as the API answers it: the upstreams in
// the order the definition lists them, the downstreams by dag_id.
const dagAPIColumns = dagColumns + `,
	coalesce((SELECT json_agg(json_build_object('dag_id', e.upstream_dag_id, 'mapping', e.mapping,
			'lookback', e.lookback) ORDER BY e.position)
		FROM dag_dependencies e WHERE e.dag_id = dags.dag_id), '[]') AS upstreams,
	ARRAY(SELECT e.dag_id FROM dag_dependencies e WHERE e.upstream_dag_id = dags.dag_id ORDER BY e.dag_id) AS downstreams`

// dependencyGraphLock is the advisory lock under which the dependency graph gains edges: two
// definitions that would close a cycle together (A names B while B names A) take it one
// after the other, and the second sees the first's edge. Only writes that add edges take it,
// and DAG definitions change rarely.
const dependencyGraphLock = 0x6266_6465_7073 // "bfdeps"

// replaceUpstreams makes p's upstreams the DAG's, in tx: the upstreams must exist (each is
// locked FOR KEY SHARE, so that a concurrent delete of one waits and then finds it named, or
// comes first and this finds it gone), and no new edge may close a cycle.
func replaceUpstreams(ctx context.Context, tx *sqlx.Tx, dagID string, ups []domain.Upstream) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM dag_dependencies WHERE dag_id = $1`, dagID); err != nil {
		return fmt.Errorf("replace upstreams of %q: %w", dagID, err)
	}
	if len(ups) == 0 {
		return nil
	}
	names := make([]string, len(ups))
	mappings := make([]string, len(ups))
	lookbacks := make([]int64, len(ups))
	for i, u := range ups {
		names[i], mappings[i], lookbacks[i] = u.DagID, string(u.Mapping), int64(u.Lookback)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(dependencyGraphLock)); err != nil {
		return fmt.Errorf("lock the dependency graph: %w", err)
	}
	var missing []string
	err := tx.SelectContext(ctx, &missing, `
		SELECT u FROM unnest($1::text[]) WITH ORDINALITY AS t (u, n)
		WHERE u NOT IN (SELECT dag_id FROM dags WHERE dag_id = ANY ($1) FOR KEY SHARE)
		ORDER BY n`, pq.StringArray(names))
	if err != nil {
		return fmt.Errorf("find upstreams of %q: %w", dagID, err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: no DAG %q (an upstream of %q)", ErrUnknownUpstream, missing[0], dagID)
	}
	if path, err := dependencyCycle(ctx, tx, dagID, names); err != nil || path != nil {
		if err != nil {
			return err
		}
		return &domain.DependencyCycleError{Path: path}
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO dag_dependencies (dag_id, upstream_dag_id, position, mapping, lookback)
		SELECT $1, u, n, m, l FROM unnest($2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS t (u, m, l, n)`,
		dagID, pq.StringArray(names), pq.StringArray(mappings), pq.Int64Array(lookbacks))
	if err != nil {
		return fmt.Errorf("write upstreams of %q: %w", dagID, err)
	}
	return nil
}

// dependencyCycle answers the shortest path by which one of ups already depends, directly or
// through others, on dagID, as dagID → upstream → … → dagID; nil when there is none. It walks
// the graph breadth first, one statement per level, visiting each DAG once (a walk of paths
// would grow with the number of paths, which diamonds multiply). dagID's own edges were
// deleted first, so the walk sees the graph without them.
func dependencyCycle(ctx context.Context, tx *sqlx.Tx, dagID string, ups []string) ([]string, error) {
	// via[d] is the DAG through which the walk reached d: the one that depends on it.
	via := make(map[string]string, len(ups))
	frontier := make([]string, 0, len(ups))
	for _, u := range ups {
		via[u] = dagID
		frontier = append(frontier, u)
	}
	for len(frontier) > 0 {
		var edges []struct {
			DagID    string `db:"dag_id"`
			Upstream string `db:"upstream_dag_id"`
		}
		err := tx.SelectContext(ctx, &edges, `
			SELECT dag_id, upstream_dag_id FROM dag_dependencies
			WHERE dag_id = ANY ($1) ORDER BY dag_id, position`, pq.StringArray(frontier))
		if err != nil {
			return nil, fmt.Errorf("look for a dependency cycle through %q: %w", dagID, err)
		}
		frontier = frontier[:0]
		for _, e := range edges {
			if e.Upstream == dagID {
				return cyclePath(dagID, e.DagID, via), nil
			}
			if _, seen := via[e.Upstream]; !seen {
				via[e.Upstream] = e.DagID
				frontier = append(frontier, e.Upstream)
			}
		}
	}
	return nil, nil
}

// cyclePath is the cycle dagID → … → last → dagID, read back from last through via.
func cyclePath(dagID, last string, via map[string]string) []string {
	back := []string{dagID, last}
	for d := last; d != dagID; {
		d = via[d]
		back = append(back, d)
	}
	slices.Reverse(back)
	return back
}

// dagDownstreams answers the DAGs that name dagID as an upstream, by dag_id.
func dagDownstreams(ctx context.Context, tx *sqlx.Tx, dagID string) ([]string, error) {
	var downs []string
	err := tx.SelectContext(ctx, &downs, `
		SELECT dag_id FROM dag_dependencies WHERE upstream_dag_id = $1 ORDER BY dag_id`, dagID)
	if err != nil {
		return nil, fmt.Errorf("find downstreams of %q: %w", dagID, err)
	}
	return downs, nil
}
