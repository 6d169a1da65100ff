package airflowfake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// login is POST /auth/token of Airflow 3's simple and FAB auth managers: a JSON body with
// username and password, answered 201 with {"access_token": JWT}.
func (f *Fake) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Username == "" {
		answer(w, http.StatusUnprocessableEntity, validation("missing", []any{"body", "username"}, "Field required", nil))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if pw, ok := f.users[body.Username]; !ok || pw != body.Password {
		detail(w, http.StatusUnauthorized, "Invalid credentials")
		return
	}
	now := time.Now()
	exp := now.Add(f.ttl)
	tok := jwt(body.Username, now, exp)
	f.issued[tok] = exp
	f.logins++
	answer(w, http.StatusCreated, map[string]any{"access_token": tok})
}

// jwt makes a token shaped like Airflow's (header.claims.signature, base64url without
// padding); the fake checks it by looking it up, so the signature is random bytes.
func jwt(sub string, iat, exp time.Time) string {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]any{"alg": "HS512", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{
		"sub": sub, "iat": iat.Unix(), "nbf": iat.Unix(), "exp": exp.Unix(),
		"aud": "apache-airflow", "iss": []string{}, "jti": rand.Text(),
	})
	sig := make([]byte, 32)
	_, _ = rand.Read(sig)
	return enc.EncodeToString(header) + "." + enc.EncodeToString(claims) + "." + enc.EncodeToString(sig)
}

// authed answers 401 unless the request carries a bearer token the fake accepts and that
// has not expired.
func (f *Fake) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.mu.Lock()
		exp, issued := f.issued[tok]
		valid := ok && (f.tokens[tok] || (issued && time.Now().Before(exp)))
		if !valid {
			f.rejected++
		}
		f.mu.Unlock()
		if !valid {
			w.Header().Set("WWW-Authenticate", "Bearer")
			detail(w, http.StatusUnauthorized, "Invalid JWT token")
			return
		}
		h(w, r)
	}
}

// RevokeTokens makes every token /auth/token issued so far invalid (as a restart of
// Airflow's API server with a new secret key does): the next request with one gets 401.
func (f *Fake) RevokeTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issued = map[string]time.Time{}
}
