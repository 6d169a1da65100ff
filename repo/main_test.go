package repo

import (
	"testing"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
