package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/backfillsvc/backfill/client"
)

// dagsImportSynopsis is what follows `backfillctl dags import` in its usage.
const dagsImportSynopsis = "--airflow URL [--dag-id ID]... [--airflow-token T | --airflow-user U --airflow-password P]"

// dagsImport is `backfillctl dags import --airflow URL`: it creates or updates the
// service's DAGs from Airflow's (schedule, timezone, max_active_runs), every DAG or those
// named by --dag-id. A DAG whose timetable is not a cron expression (or a preset the
// service knows) is reported and skipped: the service schedules by cron only.
func dagsImport(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	base := fs.String("airflow", "", "Airflow's base URL (required; the API is under /api/v2)")
	var ids repeated
	fs.Var(&ids, "dag-id", "import only this DAG (repeatable; default every DAG Airflow lists)")
	token := fs.String("airflow-token", c.getenv("BACKFILL_AIRFLOW_TOKEN"), "Airflow's bearer token (env BACKFILL_AIRFLOW_TOKEN)")
	user := fs.String("airflow-user", "", "Airflow user whose password buys tokens at POST /auth/token")
	password := fs.String("airflow-password", c.getenv("BACKFILL_AIRFLOW_PASSWORD"), "that user's password (env BACKFILL_AIRFLOW_PASSWORD)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := checkAirflowFlags(pos, airflowFlagNames{"--airflow", "--airflow-token", "--airflow-user", "--airflow-password"}, *base, *token, *user, *password, 1); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	af := newAirflowAPI(*base, *token, *user, *password)
	if err := af.check(ctx); err != nil {
		return err
	}
	if len(ids) == 0 {
		if ids, err = af.dagIDs(ctx); err != nil {
			return err
		}
	}
	failed := 0
	for _, id := range ids {
		if err := importDAG(ctx, c, api, af, id); err != nil {
			failed++
			c.importLine(id, "error", nil, err.Error())
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d DAGs could not be imported", failed, len(ids))
	}
	return nil
}

// importDAG reads one of Airflow's DAGs and puts it in the service, or reports why not.
func importDAG(ctx context.Context, c *cli, api *client.Client, af *airflowAPI, id string) error {
	d, err := af.dagDetails(ctx, id)
	if err != nil {
		return err
	}
	schedule, why := cronOf(d.TimetableSummary)
	if why != "" {
		c.importLine(id, "skipped", nil, why)
		return nil
	}
	body := client.DagPut{Schedule: schedule}
	// Airflow knows nothing of the service's dependencies between DAGs: an update keeps the
	// DAG's upstreams and depends_on_past, which a PUT would otherwise replace with none.
	switch cur, err := api.GetDag(ctx, id); {
	case err == nil:
		ups := make([]client.DagUpstreamPut, len(cur.Upstreams))
		for i, u := range cur.Upstreams {
			ups[i] = client.DagUpstreamPut{DagId: u.DagId, Mapping: &u.Mapping, Lookback: &u.Lookback}
		}
		body.Upstreams, body.DependsOnPast = &ups, &cur.DependsOnPast
	case !client.IsCode(err, client.ProblemCodeDagNotFound):
		return fmt.Errorf("read the service's DAG: %w", err)
	}
	if d.Timezone != nil && *d.Timezone != "" {
		body.Timezone = d.Timezone
	}
	if d.MaxActiveRuns != nil {
		n := int32(*d.MaxActiveRuns)
		body.MaxActiveRuns = &n
	}
	got, created, err := api.PutDag(ctx, id, body)
	if err != nil {
		return fmt.Errorf("the service refused it: %w", err)
	}
	action := "updated"
	if created {
		action = "created"
	}
	c.importLine(id, action, &got, "")
	return nil
}

// importLine prints what became of one DAG: a line, or a JSON line with -o json.
func (c *cli) importLine(id, action string, d *client.Dag, reason string) {
	if c.g.output == "json" {
		line := map[string]any{"dag_id": id, "action": action}
		if d != nil {
			line["schedule"], line["timezone"], line["max_active_runs"] = d.Schedule, d.Timezone, d.MaxActiveRuns
		}
		if reason != "" {
			line["reason"] = reason
		}
		fmt.Fprintln(c.stdout, jsonLine(line))
		return
	}
	if d != nil {
		fmt.Fprintf(c.stdout, "%-8s %s  schedule %q  timezone %s  max_active_runs %d\n", action, id, d.Schedule, d.Timezone, d.MaxActiveRuns)
		return
	}
	fmt.Fprintf(c.stdout, "%-8s %s  %s\n", action, id, reason)
}

// servicePresets are the schedule macros the service takes as they are.
var servicePresets = []string{"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"}

// cronField is one field of a 5-field cron expression, as far as telling a cron
// expression from another timetable's summary needs; the service validates the rest.
var cronField = regexp.MustCompile(`^[0-9A-Za-z*/,?LW#-]+$`)

// cronOf answers the service schedule of an Airflow timetable summary (DAGDetailsResponse's
// timetable_summary: the expression of a cron timetable, else a description such as "None",
// "@once", "1 day, 0:00:00" or "Asset"), or why it has none.
func cronOf(summary *string) (schedule, why string) {
	if summary == nil || *summary == "" || *summary == "None" {
		return "", "no schedule in Airflow (runs only when triggered)"
	}
	s := strings.TrimSpace(*summary)
	if slices.Contains(servicePresets, s) {
		return s, ""
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return "", fmt.Sprintf("timetable %q is not a 5-field cron expression", s)
	}
	for _, f := range fields {
		if !cronField.MatchString(f) {
			return "", fmt.Sprintf("timetable %q is not a 5-field cron expression", s)
		}
	}
	return strings.Join(fields, " "), ""
}

// afDagDetails is the part of DAGDetailsResponse that import reads.
type afDagDetails struct {
	DagID            string  `json:"dag_id"`
	TimetableSummary *string `json:"timetable_summary"`
	Timezone         *string `json:"timezone"`
	MaxActiveRuns    *int    `json:"max_active_runs"`
}

// dagDetails is GET /api/v2/dags/{dag_id}/details.
func (a *airflowAPI) dagDetails(ctx context.Context, dagID string) (afDagDetails, error) {
	var out afDagDetails
	err := a.do(ctx, http.MethodGet, "/api/v2/dags/"+url.PathEscape(dagID)+"/details", nil, nil, &out)
	if airflowStatus(err) == http.StatusNotFound {
		return out, errors.New("no such DAG in Airflow")
	}
	return out, err
}

// dagIDsPage is how many DAGs each GET /api/v2/dags asks for.
const dagIDsPage = 100

// dagIDs pages through GET /api/v2/dags (limit, offset; DAGCollectionResponse) and answers
// every DAG id in Airflow's order.
func (a *airflowAPI) dagIDs(ctx context.Context) ([]string, error) {
	var ids []string
	for offset := 0; ; {
		var page struct {
			Dags []struct {
				DagID string `json:"dag_id"`
			} `json:"dags"`
			TotalEntries int `json:"total_entries"`
		}
		q := url.Values{"limit": {fmt.Sprint(dagIDsPage)}, "offset": {fmt.Sprint(offset)}}
		if err := a.do(ctx, http.MethodGet, "/api/v2/dags", q, nil, &page); err != nil {
			return nil, err
		}
		for _, d := range page.Dags {
			ids = append(ids, d.DagID)
		}
		offset += len(page.Dags)
		if len(page.Dags) == 0 || offset >= page.TotalEntries {
			return ids, nil
		}
	}
}
