package tests

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The deliverer makes the deliveries from committed events, after a cursor, while writers
// commit out of id order: 16 writers change backfills through the API (each change's event
// taking its id from its transaction) while two fan-outs, as two replicas would, run in a
// loop. Afterwards every event has exactly one delivery to the webhook that takes every type,
// and the one that takes only backfill.canceled has exactly the canceled events: the cursor
// skipped none and the fan-outs doubled none.
func TestWebhookFanOutUnderConcurrentWritersMissesNoEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := e.createWebhook("https://example.com/all")
	canceled := e.createWebhook("https://example.com/canceled", "backfill.canceled")
	const writers, rounds = 16, 3
	writing := startEventWriters(e, "f", writers, rounds, "pause", "unpause", "cancel")
	ctx := context.Background()
	stop := make(chan struct{})
	fanOuts := startTogether(2, 2, func(int) error {
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			if err := e.Store.WebhookFanOut(ctx); err != nil {
				return err
			}
		}
	})
	require.NoError(t, <-writing)
	close(stop)
	require.NoError(t, <-fanOuts)
	// What committed after the loops' last pass.
	require.NoError(t, e.Store.WebhookFanOut(ctx))

	events := e.Count(`SELECT count(*) FROM events`)
	require.Equal(t, writers*rounds*4, events, "created, paused, unpaused, canceled per round")
	require.Equal(t, events, e.Count(`SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1`, all.Id),
		"one delivery of every event")
	require.Zero(t, e.Count(`SELECT count(*) FROM events e WHERE NOT EXISTS (
		SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.webhook_id = $1)`, all.Id))
	require.Equal(t, writers*rounds, e.Count(`SELECT count(*) FROM webhook_deliveries d
		JOIN events e ON e.id = d.event_id WHERE d.webhook_id = $1 AND e.type = 'backfill.canceled'`, canceled.Id))
	require.Equal(t, writers*rounds, e.Count(`SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1`, canceled.Id),
		"only the types it takes")
}
