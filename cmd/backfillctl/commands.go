package main

import "github.com/backfillsvc/backfill/client"

// command is one subcommand: name is how it is typed ("backfills create"), synopsis what
// follows the name in its -h, run what it does.
type command struct {
	name     string
	synopsis string
	run      runFunc
}

// noun is a kind of thing and the commands on it ("dags": put, get, list, delete); the
// commands of the noun "" are typed by their own name (watch, executor).
type noun struct {
	name  string
	verbs []command
}

// nouns are every command, grouped as the usage groups them.
var nouns = []noun{
	{"dags", []command{
		{"put", "DAG_ID --schedule CRON [flags]", dagsPut},
		{"get", "DAG_ID", get(dagID, (*client.Client).GetDag, showOne(dagColumns))},
		{"list", "[--limit N] [--offset N]", dagsList},
		{"delete", "DAG_ID", dagsDelete},
		{"import", dagsImportSynopsis, dagsImport},
	}},
	{"backfills", []command{
		{"create", "--dag-id ID --from-date DATE --to-date DATE [flags]", backfillsCreate},
		{"dry-run", "--dag-id ID --from-date DATE --to-date DATE [flags]", backfillsDryRun},
		{"get", "ID", backfillsGet},
		{"list", "[flags]", backfillsList},
		{"runs", "ID [--state STATE] [--order-by sort_ordinal|-sort_ordinal] [--limit N] [--offset N | --cursor C]", backfillsRuns},
		{"pause", "ID", backfillsPause},
		{"unpause", "ID", backfillsUnpause},
		{"cancel", "ID", backfillsCancel},
		{"patch", "ID [--max-active-runs N] [--max-failed-runs N|none] [--description TEXT]", backfillsPatch},
		{"retry", "ID [flags]", backfillsRetry},
	}},
	{"", []command{
		{"watch", "ID [--interval D] [--timeout 0] [--wait-through-pause]", watch},
	}},
	{"groups", []command{
		{"create", "--dag-id ID [--dag-id ID]... --from-date DATE --to-date DATE [flags]", groupsCreate},
		{"get", "ID", groupsGet},
		{"list", "[--state STATE] [--dag-id ID] [--limit N] [--offset N | --cursor C]", groupsList},
		{"watch", "ID [--interval D] [--timeout 0] [--wait-through-pause]", groupsWatch},
		{"pause", "ID", groupsPause},
		{"unpause", "ID", groupsUnpause},
		{"cancel", "ID", groupsCancel},
		{"patch", "ID [--max-active-runs N] [--max-failed-runs N|none] [--description TEXT] [--priority N]", groupsPatch},
	}},
	{"runs", []command{
		{"list", "DAG_ID [--state STATE] [--backfill-id ID] [--limit N] [--offset N | --cursor C]", runsList},
		{"get", "DAG_ID RUN_ID", runsGet},
		{"claim", "--worker-id ID [--dag-id ID] [--limit N] [--lease-seconds N]", runsClaim},
		{"heartbeat", "ID --worker-id ID", runsHeartbeat},
		{"report", "DAG_ID RUN_ID --state success|failed|canceled [--worker-id ID] [--note TEXT]", runsReport},
		{"release", "ID --worker-id ID", runsRelease},
	}},
	{"webhooks", []command{
		{"add", "URL [--event-type TYPE]... [--description TEXT]", webhooksAdd},
		{"list", "[--limit N] [--offset N]", webhooksList},
		{"rm", "ID", webhooksRm},
		{"deliveries", "ID [--event-id N] [--limit N] [--offset N]", webhooksDeliveries},
	}},
	{"pools", []command{
		{"put", "NAME --slots N [--description TEXT]", poolsPut},
		{"get", "NAME", get(poolName, (*client.Client).GetPool, showOne(poolColumns))},
		{"list", "[--limit N] [--offset N]", poolsList},
		{"delete", "NAME", poolsDelete},
	}},
	{"", []command{
		{"executor", "[--worker-id ID] [--dag-id ID] [--limit N] [--sleep 1s] [--fail-rate 0]", executor},
		{"airflow", airflowSynopsis, airflowCommand},
	}},
}

// commands are the nouns' commands by their full names.
var commands = func() []command {
	var all []command
	for _, n := range nouns {
		for _, v := range n.verbs {
			if n.name != "" {
				v.name = n.name + " " + v.name
			}
			all = append(all, v)
		}
	}
	return all
}()
