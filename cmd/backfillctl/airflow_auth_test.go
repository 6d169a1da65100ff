package main

import (
	"context"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/airflowfake"
	"github.com/stretchr/testify/require"
)

// A user's token is bought at POST /auth/token, bought again at 80% of its life (read from
// the JWT's exp and iat), and bought again once when Airflow answers 401 to it; a fixed
// token that Airflow refuses is not retried.
func TestAirflowAuthRenewsTheTokenBeforeItExpiresAndOnceAfter401(t *testing.T) {
	f := airflowfake.New(t, "")
	f.AddUser("bridge", "s3cret", time.Hour)
	f.AddDAG(airflowfake.DAG{DagID: "sales", Timezone: "UTC"})
	ctx := context.Background()

	api := newAirflowAPI(f.URL, "", "bridge", "s3cret")
	clock := time.Now()
	api.auth.now = func() time.Time { return clock }
	require.NoError(t, api.check(ctx))
	require.Equal(t, 1, f.Logins())

	clock = clock.Add(47 * time.Minute)
	require.NoError(t, api.check(ctx))
	require.Equal(t, 1, f.Logins(), "the token is kept before 80% of its hour")

	clock = clock.Add(2 * time.Minute)
	require.NoError(t, api.check(ctx))
	require.Equal(t, 2, f.Logins(), "renewed past 48 minutes")
	require.Zero(t, f.Rejected(), "never sent an expired token")

	f.RevokeTokens()
	require.NoError(t, api.check(ctx), "a 401 buys a new token and the request is sent again")
	require.Equal(t, 3, f.Logins())
	require.Equal(t, 1, f.Rejected())

	wrong := newAirflowAPI(f.URL, "", "bridge", "wrong")
	require.ErrorContains(t, wrong.check(ctx), "Invalid credentials")

	fixed := newAirflowAPI(f.URL, "not-a-token", "", "")
	err := fixed.check(ctx)
	require.ErrorContains(t, err, "refused the credentials")
	require.Equal(t, 2, f.Rejected(), "a fixed token is sent once: no login can mend it")
}

func TestAirflowJWTLifetimeComesFromExpAndIat(t *testing.T) {
	sent := time.Unix(1_700_000_000, 0)
	// {"alg":"none"} . {"iat":1700000100,"exp":1700003700} . sig
	tok := "eyJhbGciOiJub25lIn0.eyJpYXQiOjE3MDAwMDAxMDAsImV4cCI6MTcwMDAwMzcwMH0.c2ln"
	require.Equal(t, time.Hour, jwtLifetime(tok, sent), "iat to exp, whatever this machine's clock says")
	// {"exp":1700000600}
	require.Equal(t, 10*time.Minute, jwtLifetime("e30.eyJleHAiOjE3MDAwMDA2MDB9.c2ln", sent))
	require.Equal(t, time.Minute, jwtLifetime("opaque", sent), "a token without exp is renewed after a minute")
}
