package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// airflowAuth gives the bearer token of Airflow's API: a fixed one (--token), or one that
// a user and password buy at POST /auth/token and that is bought again before it expires.
type airflowAuth struct {
	base, user, password string
	http                 *http.Client
	now                  func() time.Time

	mu      sync.Mutex
	token   string
	renewAt time.Time // zero for a fixed token: never renewed
}

// renewFraction is how far into a token's life it is renewed: early enough that a request
// sent with it lands before it expires, late enough not to log in on every request.
const renewFraction = 0.8

// bearer answers the token to send, logging in first when there is none or it is due.
func (a *airflowAuth) bearer(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.user == "" {
		return a.token, nil
	}
	if a.token == "" || !a.now().Before(a.renewAt) {
		if err := a.login(ctx); err != nil {
			return "", err
		}
	}
	return a.token, nil
}

// rejected is told that Airflow answered 401 to token: a user's token is bought again at
// the next bearer (unless another request already did). It reports whether a retry can
// help, which a fixed token cannot.
func (a *airflowAuth) rejected(token string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.user == "" {
		return false
	}
	if a.token == token {
		a.token = ""
	}
	return true
}

// login exchanges the user and password for a token (POST /auth/token, answered 200 or
// 201 with {"access_token": ...}) and sets when to renew it from the JWT's exp, read
// without verifying: only Airflow needs to trust it, the bridge only needs its lifetime.
func (a *airflowAuth) login(ctx context.Context) error {
	body, _ := json.Marshal(map[string]string{"username": a.user, "password": a.password})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/auth/token", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	sent := a.now()
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("airflow login: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("airflow login: %w", readAirflowError(resp))
	}
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.AccessToken == "" {
		return fmt.Errorf("airflow login: no access_token in the answer")
	}
	life := jwtLifetime(out.AccessToken, sent)
	a.token = out.AccessToken
	a.renewAt = sent.Add(time.Duration(float64(life) * renewFraction))
	return nil
}

// jwtLifetime is how long a JWT lasts from sent, from its exp (and iat, when it has one,
// so that a clock offset between Airflow and this machine does not shorten or stretch it).
// A token without a readable exp is renewed after a minute: only a 401 would say more.
func jwtLifetime(token string, sent time.Time) time.Duration {
	const unknown = time.Minute
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return unknown
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return unknown
	}
	var claims struct {
		Exp *float64 `json:"exp"`
		Iat *float64 `json:"iat"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return unknown
	}
	exp := time.Unix(0, int64(*claims.Exp*1e9))
	if claims.Iat != nil {
		return exp.Sub(time.Unix(0, int64(*claims.Iat*1e9)))
	}
	return exp.Sub(sent)
}
