package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/repo"
)

// slowPurges is a Store whose purge batches each take took, left batches of them, and which
// records when each batch began and ended.
type slowPurges struct {
	took        time.Duration
	left        int
	began, over []time.Time
}

func (s *slowPurges) WebhookDeliveryClaim(context.Context, repo.WebhookClaimParams) ([]repo.WebhookDue, error) {
	return nil, nil
}

func (s *slowPurges) WebhookDeliveryRecord(context.Context, repo.WebhookOutcome) (bool, error) {
	return true, nil
}

func (s *slowPurges) WebhookFanOut(context.Context) error { return nil }

func (s *slowPurges) WebhookPurgeDeleted(context.Context, int) (int, error) {
	s.began = append(s.began, time.Now())
	defer func() { s.over = append(s.over, time.Now()) }()
	if s.left == 0 {
		return 0, nil
	}
	s.left--
	time.Sleep(s.took)
	return 1, nil
}

// A purge whose batches are slow rests after each as long as it took, so that it holds the
// database for at most half of its time however much a batch costs.
func TestPurgeRestsAsLongAsEachBatchTook(t *testing.T) {
	store := &slowPurges{took: 60 * time.Millisecond, left: 3}
	n, err := New(store, Config{}).PurgeOnce(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("PurgeOnce = %d, %v; want 3 rows", n, err)
	}
	for i := 1; i < len(store.began); i++ {
		took := store.over[i-1].Sub(store.began[i-1])
		if rest := store.began[i].Sub(store.over[i-1]); rest < took {
			t.Errorf("rest after batch %d: %s, less than the %s it took", i, rest, took)
		}
	}
}
