package handlers

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// allEventTypes is a webhook's event_types when the request names none: every type the
// service writes, in the spec's order (a test holds domain.EventTypes to the spec's enum).
var allEventTypes = func() []string {
	types := make([]string, len(domain.EventTypes))
	for i, t := range domain.EventTypes {
		types[i] = string(t)
	}
	return types
}()

// newWebhookSecret is a Standard Webhooks secret: whsec_ + base64 of 32 random bytes.
func newWebhookSecret() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key), nil
}

// checkWebhookURL accepts absolute http and https URLs with a host and, if any, a port in
// 1..65535, and returns the URL with its scheme and host in lower case: both are
// case-insensitive (RFC 3986, 3.1 and 3.2.2), and the database keeps the lower-case form
// (its CHECK spells the schemes so). A host that names a local address literally is refused
// here unless allowLocal (see localHost); where any other name points is judged at delivery,
// on the address actually dialed.
func checkWebhookURL(raw string, allowLocal bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: url is not a URL: %w", repo.ErrInvalidWebhook, err)
	}
	// url.Parse has lowered the scheme already.
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: url must be an absolute http or https URL", repo.ErrInvalidWebhook)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("%w: url has no host", repo.ErrInvalidWebhook)
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: url must not carry credentials; the signature authenticates deliveries", repo.ErrInvalidWebhook)
	}
	if kind := localHost(u.Hostname()); kind != "" && !allowLocal {
		return "", fmt.Errorf("%w: url names a %s address (%s), which deliveries refuse; register a public address, or run the server with WEBHOOK_ALLOW_LOCAL=true for development",
			repo.ErrInvalidWebhook, kind, u.Hostname())
	}
	if p := u.Port(); p != "" {
		// url.Parse checks only that a port is digits.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%w: url's port must be from 1 to 65535", repo.ErrInvalidWebhook)
		}
	}
	return lowerSchemeAndHost(raw, u), nil
}

// lowerSchemeAndHost lowers "scheme://host" at the start of raw and keeps the rest as sent
// (re-encoding the URL could change its path or query). A host that url.Parse unescaped (an
// IPv6 zone, "%25eth0") does not match raw and is left as sent.
func lowerSchemeAndHost(raw string, u *url.URL) string {
	n := len(u.Scheme) + len("://") + len(u.Host)
	if n > len(raw) || !strings.EqualFold(raw[:n], u.Scheme+"://"+u.Host) {
		return raw
	}
	return strings.ToLower(raw[:n]) + raw[n:]
}

// CreateWebhook registers a webhook and answers its secret, the only time it is shown.
func (s *Server) CreateWebhook(w http.ResponseWriter, r *http.Request, params api.CreateWebhookParams) {
	var body api.WebhookCreate
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	hookURL, err := checkWebhookURL(body.Url, s.webhookAllowLocal)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	types := allEventTypes
	if body.EventTypes != nil {
		types = nil
		for _, t := range *body.EventTypes {
			if !slices.Contains(types, string(t)) {
				types = append(types, string(t))
			}
		}
	}
	secret, err := newWebhookSecret()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p := repo.WebhookCreateParams{URL: hookURL, EventTypes: types, Description: body.Description, Secret: secret}
	if params.IdempotencyKey != nil {
		p.IdempotencyKey = *params.IdempotencyKey
	}
	wh, replayed, err := s.store.WebhookCreate(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	out := webhookOut(wh)
	w.Header().Set("Location", "/api/v1/webhooks/"+strconv.FormatInt(wh.ID, 10))
	w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(w, r, http.StatusCreated, api.WebhookWithSecret{
		Id: out.Id, Url: out.Url, EventTypes: out.EventTypes, Description: out.Description,
		CreatedAt: out.CreatedAt, Secret: wh.Secret,
	})
}

// ListWebhooks pages webhooks by id.
func (s *Server) ListWebhooks(w http.ResponseWriter, r *http.Request, params api.ListWebhooksParams) {
	answerOffsetPage(s, w, r, params.Limit, params.Offset, s.store.WebhookList,
		func(hooks []repo.Webhook, total int64) api.WebhookCollection {
			return api.WebhookCollection{Webhooks: convertAll(hooks, webhookOut), TotalEntries: total}
		})
}

// GetWebhook answers one webhook, without its secret.
func (s *Server) GetWebhook(w http.ResponseWriter, r *http.Request, webhookID int64) {
	wh, err := s.store.WebhookGet(r.Context(), webhookID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, webhookOut(wh))
}

// DeleteWebhook removes a webhook with its deliveries.
func (s *Server) DeleteWebhook(w http.ResponseWriter, r *http.Request, webhookID int64) {
	if err := s.store.WebhookDelete(r.Context(), webhookID); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ListWebhookDeliveries pages a webhook's delivery log.
func (s *Server) ListWebhookDeliveries(w http.ResponseWriter, r *http.Request, webhookID int64, params api.ListWebhookDeliveriesParams) {
	limit, offset := s.page(params.Limit, params.Offset)
	attempts, total, err := s.store.WebhookAttemptList(r.Context(), repo.WebhookAttemptListParams{
		WebhookID: webhookID, EventID: params.EventId, Limit: limit, Offset: offset,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, api.WebhookDeliveryCollection{Deliveries: convertAll(attempts, attemptOut), TotalEntries: int64(total)})
}

func webhookOut(w repo.Webhook) api.Webhook {
	types := make([]api.WebhookEventType, len(w.EventTypes))
	for i, t := range w.EventTypes {
		types[i] = api.WebhookEventType(t)
	}
	return api.Webhook{Id: w.ID, Url: w.URL, EventTypes: types, Description: w.Description, CreatedAt: utc(w.CreatedAt)}
}

func attemptOut(a repo.WebhookAttempt) api.WebhookDelivery {
	out := api.WebhookDelivery{
		EventId:       a.EventID,
		Attempt:       int32(a.Attempt),
		Error:         (*api.WebhookDeliveryError)(a.Error),
		AttemptedAt:   utc(a.AttemptedAt),
		NextAttemptAt: utcPtr(a.NextAttemptAt),
		DeliveredAt:   utcPtr(a.DeliveredAt),
	}
	if a.StatusCode != nil {
		code := int32(*a.StatusCode)
		out.StatusCode = &code
	}
	return out
}

// localHost names the kind of address a URL's host states literally that deliveries refuse
// (domain.RefusedAddressKind: loopback, link-local, unspecified, cloud metadata,
// carrier-grade NAT), or "" for any other host. `localhost` and names under it are loopback
// by definition (RFC 6761). Such a URL can only ever be refused at delivery, so it is refused
// at creation, where the person registering it sees why; names that merely resolve there are
// still caught at delivery, on the address dialed.
func localHost(host string) string {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return domain.AddressLoopback
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	return domain.RefusedAddressKind(addr)
}
