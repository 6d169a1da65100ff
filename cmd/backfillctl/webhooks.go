package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/backfillsvc/backfill/client"
)

// webhooksUsage is the usage section of the `webhooks` commands.
const webhooksUsage = `Webhooks (Standard Webhooks; receivers verify with the Go SDK's client.NewWebhookVerifier):
  webhooks add URL [--event-type TYPE]... [--description TEXT]
        Registers URL for events (every type unless --event-type is given, repeatable) and
        prints its secret (whsec_...), which is shown only once.
  webhooks list [--limit N] [--offset N]
  webhooks rm ID
  webhooks deliveries ID [--event-id N] [--limit N] [--offset N]
        The delivery log: every attempt, its status or error, and when the next is due.
`

// repeated collects a flag given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

var webhookID = number("webhook ID")

var webhooksAdd = do(word("URL"), func(fs *flag.FlagSet) action[string] {
	var types repeated
	fs.Var(&types, "event-type", "an event type to deliver, e.g. backfill.failed (repeatable; default every type)")
	description := fs.String("description", "", "free text")
	return func(ctx context.Context, c *cli, api *client.Client, url string) error {
		body := client.WebhookCreate{Url: url}
		setIf(fs, "description", &body.Description, *description)
		if len(types) > 0 {
			ts := make([]client.WebhookEventType, len(types))
			for i, t := range types {
				ts[i] = client.WebhookEventType(t)
			}
			body.EventTypes = &ts
		}
		w, err := api.CreateWebhook(ctx, body, client.KeyOptions{})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.printJSON(w)
		}
		if err := c.table([][]string{
			{"ID:", fmt.Sprint(w.Id)},
			{"URL:", w.Url},
			{"EVENT TYPES:", eventTypes(w.EventTypes)},
			{"DESCRIPTION:", deref(w.Description)},
			{"CREATED AT:", stamp(w.CreatedAt)},
			{"SECRET:", w.Secret},
		}); err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.stdout, "(the secret is shown only now: give it to the receiver to verify signatures)")
		return err
	}
})

var webhooksList = list(listing[struct{}, client.WebhookCollection, client.Webhook]{
	arg: none,
	read: func(ctx context.Context, api *client.Client, _ struct{}, pg *pageFlags) (client.WebhookCollection, error) {
		return api.ListWebhooks(ctx, &client.ListWebhooksParams{Limit: pg.limitP, Offset: pg.offsetP})
	},
	page: func(l client.WebhookCollection) page[client.Webhook] {
		return page[client.Webhook]{items: l.Webhooks, total: l.TotalEntries}
	},
	cols: columns[client.Webhook]{
		header: []string{"ID", "URL", "EVENT_TYPES", "CREATED_AT", "DESCRIPTION"},
		row: func(w client.Webhook) []string {
			return []string{fmt.Sprint(w.Id), w.Url, eventTypes(w.EventTypes), stamp(w.CreatedAt), deref(w.Description)}
		},
	},
})

var webhooksRm = remove(webhookID, (*client.Client).DeleteWebhook, func(c *cli, id int64) error {
	if c.g.output != "json" {
		fmt.Fprintf(c.stdout, "webhook %d deleted\n", id)
	}
	return nil
})

var webhooksDeliveries = list(listing[int64, client.WebhookDeliveryCollection, client.WebhookDelivery]{
	arg: webhookID,
	flags: func(fs *flag.FlagSet, pg *pageFlags) func(context.Context, *client.Client, int64) (client.WebhookDeliveryCollection, error) {
		eventID := fs.Int64("event-id", 0, "only the attempts of this event")
		return func(ctx context.Context, api *client.Client, id int64) (client.WebhookDeliveryCollection, error) {
			params := &client.ListWebhookDeliveriesParams{Limit: pg.limitP, Offset: pg.offsetP}
			setIf(fs, "event-id", &params.EventId, *eventID)
			return api.ListWebhookDeliveries(ctx, id, params)
		}
	},
	page: func(l client.WebhookDeliveryCollection) page[client.WebhookDelivery] {
		return page[client.WebhookDelivery]{items: l.Deliveries, total: l.TotalEntries}
	},
	cols: columns[client.WebhookDelivery]{
		header: []string{"EVENT_ID", "ATTEMPT", "ATTEMPTED_AT", "STATUS", "OUTCOME", "NEXT_ATTEMPT_AT"},
		row: func(d client.WebhookDelivery) []string {
			status, outcome, next := "-", "delivered", "-"
			if d.StatusCode != nil {
				status = fmt.Sprint(*d.StatusCode)
			}
			if d.Error != nil {
				outcome = string(*d.Error)
			}
			if d.NextAttemptAt != nil {
				next = stamp(*d.NextAttemptAt)
			}
			return []string{fmt.Sprint(d.EventId), fmt.Sprint(d.Attempt), stamp(d.AttemptedAt), status, outcome, next}
		},
	},
})

func eventTypes(ts []client.WebhookEventType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}
