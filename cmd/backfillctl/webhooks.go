package main

import (
	"context"
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

func webhooksAdd(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("webhooks add", "webhooks add URL [--event-type TYPE]... [--description TEXT]", &c.g, c.stderr)
	var types repeated
	fs.Var(&types, "event-type", "an event type to deliver, e.g. backfill.failed (repeatable; default every type)")
	description := fs.String("description", "", "free text")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("expected one URL, got %d arguments", len(pos))
	}
	body := client.WebhookCreate{Url: pos[0]}
	setIf(fs, "description", &body.Description, *description)
	if len(types) > 0 {
		ts := make([]client.WebhookEventType, len(types))
		for i, t := range types {
			ts[i] = client.WebhookEventType(t)
		}
		body.EventTypes = &ts
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	w, err := api.CreateWebhook(ctx, body)
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
	fmt.Fprintln(c.stdout, "(the secret is shown only now: give it to the receiver to verify signatures)")
	return nil
}

func webhooksList(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("webhooks list", "webhooks list [--limit N] [--offset N]", &c.g, c.stderr)
	limit := fs.Int("limit", 50, "page size, 1..1000")
	offset := fs.Int("offset", 0, "entries to skip")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected arguments %q", pos)
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	l, err := api.ListWebhooks(ctx, &client.ListWebhooksParams{Limit: limit, Offset: offset})
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(l)
	}
	rows := [][]string{{"ID", "URL", "EVENT_TYPES", "CREATED_AT", "DESCRIPTION"}}
	for _, w := range l.Webhooks {
		rows = append(rows, []string{fmt.Sprint(w.Id), w.Url, eventTypes(w.EventTypes), stamp(w.CreatedAt), deref(w.Description)})
	}
	if err := c.table(rows); err != nil {
		return err
	}
	c.printPage(len(l.Webhooks), *offset, l.TotalEntries)
	return nil
}

func webhooksRm(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("webhooks rm", "webhooks rm ID", &c.g, c.stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "webhook ID")
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if err := api.DeleteWebhook(ctx, id); err != nil {
		return err
	}
	if c.g.output != "json" {
		fmt.Fprintf(c.stdout, "webhook %d deleted\n", id)
	}
	return nil
}

func webhooksDeliveries(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("webhooks deliveries", "webhooks deliveries ID [--event-id N] [--limit N] [--offset N]", &c.g, c.stderr)
	eventID := fs.Int64("event-id", 0, "only the attempts of this event")
	limit := fs.Int("limit", 50, "page size, 1..1000")
	offset := fs.Int("offset", 0, "entries to skip")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "webhook ID")
	if err != nil {
		return err
	}
	params := &client.ListWebhookDeliveriesParams{Limit: limit, Offset: offset}
	if isSet(fs, "event-id") {
		params.EventId = eventID
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	l, err := api.ListWebhookDeliveries(ctx, id, params)
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(l)
	}
	rows := [][]string{{"EVENT_ID", "ATTEMPT", "ATTEMPTED_AT", "STATUS", "OUTCOME", "NEXT_ATTEMPT_AT"}}
	for _, d := range l.Deliveries {
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
		rows = append(rows, []string{fmt.Sprint(d.EventId), fmt.Sprint(d.Attempt), stamp(d.AttemptedAt), status, outcome, next})
	}
	if err := c.table(rows); err != nil {
		return err
	}
	c.printPage(len(l.Deliveries), *offset, l.TotalEntries)
	return nil
}

func eventTypes(ts []client.WebhookEventType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}
