package recovery_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// fakeGitHub is GitHub's webhook deliveries API as its documentation
// describes it (REST API "Repository webhooks", "Organization webhooks" and
// "Webhooks" for Apps, version 2022-11-28): each hook's log of delivery
// attempts listed newest first, paginated by a cursor in the Link header,
// with rate-limit headers on every answer; POST .../attempts queues a
// redelivery (202) and GitHub then sends the original body, signed, to the
// hook's URL, which adds an attempt to the log.
type fakeGitHub struct {
	t      *testing.T
	srv    *httptest.Server
	secret string
	// target is where redeliveries are sent (the gateway's ingest URL).
	target string
	// deliver: redeliveries reach the target; false: GitHub accepts the
	// request and nothing arrives.
	deliver bool
	// pageSize caps per_page, to make listings paginate.
	pageSize int
	// appID and appKey check a GitHub App's JWTs; installation is its
	// installation, whose token is installToken.
	appID        int64
	appKey       *rsa.PublicKey
	installation int64
	installToken string
	token        string

	mu     sync.Mutex
	hooks  map[string][]*fakeDelivery // by "repo/OWNER/NAME/ID", "org/ORG/ID" or "app"
	nextID int64
	asked  map[string]int // redelivery requests by GUID
	lists  int
	// secondaryOnce: the next redelivery request gets a secondary rate
	// limit (403 with Retry-After: 1).
	secondaryOnce bool
	// primaryOnce: the next listing gets the primary limit (403,
	// X-RateLimit-Remaining: 0, a reset a second away).
	primaryOnce bool
	limited     int
	// readOnly makes every redelivery request 403, as GitHub answers a
	// token that may only read webhooks.
	readOnly bool
	// redirect, when set, answers each authenticated request it gives a
	// status for with a redirect of that status to the same path and query
	// at redirectTo (another server).
	redirect   func(r *http.Request) int
	redirectTo string
}

// fakeDelivery is one attempt in a hook's log, with what was sent.
type fakeDelivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
	Redelivery  bool      `json:"redelivery"`
	Duration    float64   `json:"duration"`
	Status      string    `json:"status"`
	StatusCode  int       `json:"status_code"`
	Event       string    `json:"event"`
	Action      *string   `json:"action"`
	// What GitHub sends: not in the listing.
	hookID int64
	body   []byte
}

func newFakeGitHub(t *testing.T, secret string) *fakeGitHub {
	f := &fakeGitHub{t: t, secret: secret, deliver: true, pageSize: 100, hooks: map[string][]*fakeDelivery{},
		nextID: 1000, asked: map[string]int{}, token: "ghp_test"}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// add logs an attempt of a delivery to a hook (newest last in time).
func (f *fakeGitHub) add(hook string, hookID int64, guid, event string, body []byte, at time.Time, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	text := "OK"
	if status == 0 {
		text = "timed out"
	} else if status >= 300 {
		text = "Invalid HTTP Response: " + strconv.Itoa(status)
	}
	f.hooks[hook] = append(f.hooks[hook], &fakeDelivery{ID: f.nextID, GUID: guid, DeliveredAt: at.UTC().Truncate(time.Second),
		Status: text, StatusCode: status, Event: event, hookID: hookID, body: body, Duration: 0.2})
}

func (f *fakeGitHub) askedFor(guid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[guid]
}

func (f *fakeGitHub) totalAsked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.asked {
		n += c
	}
	return n
}

var (
	listPath  = regexp.MustCompile(`^/(repos/[^/]+/[^/]+/hooks/\d+|orgs/[^/]+/hooks/\d+|app/hook)/deliveries$`)
	retryPath = regexp.MustCompile(`^/(repos/[^/]+/[^/]+/hooks/\d+|orgs/[^/]+/hooks/\d+|app/hook)/deliveries/(\d+)/attempts$`)
)

func (f *fakeGitHub) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reset := time.Now().Add(time.Hour).Unix()
	w.Header().Set("X-RateLimit-Limit", "5000")
	w.Header().Set("X-RateLimit-Remaining", "4000")
	w.Header().Set("X-RateLimit-Used", "1000")
	w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	w.Header().Set("X-RateLimit-Resource", "core")

	// Authentication: the App's JWT for /app/..., else a token.
	app := strings.HasPrefix(r.URL.Path, "/app/") || strings.HasSuffix(r.URL.Path, "/installation")
	auth := r.Header.Get("Authorization")
	switch {
	case app && !f.validJWT(strings.TrimPrefix(auth, "Bearer ")):
		f.answer(w, http.StatusUnauthorized, map[string]string{"message": "A JSON web token could not be decoded"})
		return
	case !app && auth != "Bearer "+f.token && auth != "token "+f.token && (f.installToken == "" || auth != "token "+f.installToken):
		f.answer(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
		return
	}
	if f.redirect != nil {
		if code := f.redirect(r); code != 0 {
			w.Header().Set("Location", f.redirectTo+r.URL.RequestURI())
			w.WriteHeader(code)
			return
		}
	}

	switch {
	case r.Method == http.MethodPost && regexp.MustCompile(`^/app/installations/\d+/access_tokens$`).MatchString(r.URL.Path):
		f.answer(w, http.StatusCreated, map[string]any{"token": f.installToken, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	case r.Method == http.MethodGet && regexp.MustCompile(`^/(repos/[^/]+/[^/]+|orgs/[^/]+)/installation$`).MatchString(r.URL.Path):
		f.answer(w, http.StatusOK, map[string]any{"id": f.installation, "app_id": f.appID})
	case r.Method == http.MethodGet && listPath.MatchString(r.URL.Path):
		f.lists++
		if f.primaryOnce {
			f.primaryOnce = false
			f.limited++
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10))
			f.answer(w, http.StatusForbidden, map[string]string{"message": "API rate limit exceeded for user ID 1.",
				"documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"})
			return
		}
		f.list(w, r, hookKey(listPath.FindStringSubmatch(r.URL.Path)[1]))
	case r.Method == http.MethodPost && retryPath.MatchString(r.URL.Path):
		if f.secondaryOnce {
			f.secondaryOnce = false
			f.limited++
			w.Header().Set("Retry-After", "1")
			f.answer(w, http.StatusForbidden, map[string]string{"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
				"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"})
			return
		}
		m := retryPath.FindStringSubmatch(r.URL.Path)
		id, _ := strconv.ParseInt(m[2], 10, 64)
		f.redeliver(w, hookKey(m[1]), id)
	default:
		f.answer(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
	}
}

// hookKey turns an API path's hook part into the fake's key.
func hookKey(p string) string {
	if p == "app/hook" {
		return "app"
	}
	p = strings.Replace(p, "/hooks/", "/", 1)
	return strings.TrimSuffix(strings.TrimPrefix(p, "repos/"), "")
}

func (f *fakeGitHub) answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// list answers one page: newest first, per_page at most pageSize, the
// cursor an opaque offset, and a Link header with rel="next" when more.
func (f *fakeGitHub) list(w http.ResponseWriter, r *http.Request, key string) {
	log := slices.Clone(f.hooks[key])
	slices.SortStableFunc(log, func(a, b *fakeDelivery) int { return b.DeliveredAt.Compare(a.DeliveredAt) })
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 || per > f.pageSize {
		per = min(30, f.pageSize)
	}
	from := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			f.answer(w, http.StatusUnprocessableEntity, map[string]string{"message": "Validation Failed"})
			return
		}
		from, _ = strconv.Atoi(strings.TrimPrefix(string(b), "v1_"))
	}
	to := min(from+per, len(log))
	if to < len(log) {
		next := *r.URL
		q := next.Query()
		q.Set("cursor", base64.RawURLEncoding.EncodeToString([]byte("v1_"+strconv.Itoa(to))))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, f.srv.URL, next.String()))
	}
	page := []*fakeDelivery{}
	if from < len(log) {
		page = log[from:to]
	}
	f.answer(w, http.StatusOK, page)
}

// redeliver queues a redelivery of attempt id: GitHub answers 202 and sends
// the original body with its original GUID, signed, as a new attempt.
func (f *fakeGitHub) redeliver(w http.ResponseWriter, key string, id int64) {
	var orig *fakeDelivery
	for _, d := range f.hooks[key] {
		if d.ID == id {
			orig = d
		}
	}
	if orig == nil {
		f.answer(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
		return
	}
	if f.readOnly {
		f.answer(w, http.StatusForbidden, map[string]string{"message": "Resource not accessible by personal access token",
			"documentation_url": "https://docs.github.com/rest/repos/webhooks#redeliver-a-delivery-for-a-repository-webhook"})
		return
	}
	f.asked[orig.GUID]++
	f.answer(w, http.StatusAccepted, map[string]any{})
	if !f.deliver {
		return
	}
	status := f.send(orig)
	f.nextID++
	f.hooks[key] = append(f.hooks[key], &fakeDelivery{ID: f.nextID, GUID: orig.GUID, DeliveredAt: time.Now().UTC(), Redelivery: true,
		Status: "OK", StatusCode: status, Event: orig.Event, hookID: orig.hookID, body: orig.body})
}

// send posts a delivery to the target as GitHub does.
func (f *fakeGitHub) send(d *fakeDelivery) int {
	req, err := providers.NewRequest(context.Background(), providers.GitHub{Secrets: verify.Secrets{f.secret}}.Source(), f.target, d.body, d.GUID, d.Event, time.Now())
	if err != nil {
		f.t.Error(err)
		return 0
	}
	req.Header.Set("X-GitHub-Hook-ID", strconv.FormatInt(d.hookID, 10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// validJWT checks an App's JWT: RS256 by the App's key, iss the App's id.
func (f *fakeGitHub) validJWT(tok string) bool {
	if f.appKey == nil {
		return false
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(f.appKey, crypto.SHA256, sum[:], sig) != nil {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Iss json.RawMessage `json:"iss"`
	}
	_ = json.Unmarshal(payload, &claims)
	return strings.Trim(string(claims.Iss), `"`) == strconv.FormatInt(f.appID, 10)
}

// fakeStripe is Stripe's GET /v1/events as its API reference describes it:
// newest first, limit (1-100, default 10), starting_after an event id,
// created[gte], and a list object with has_more. Events are pretty-printed
// as Stripe prints them.
type fakeStripe struct {
	srv    *httptest.Server
	key    string
	mu     sync.Mutex
	events []map[string]any // oldest first
	calls  int
	// tooMany is how many requests, from the first, are answered 429 with
	// Retry-After: 1.
	tooMany int
	// redirect, when not 0, answers each authenticated listing with a
	// redirect of that status to the same path and query at redirectTo.
	redirect   int
	redirectTo string
}

func newFakeStripe(t *testing.T, key string) *fakeStripe {
	f := &fakeStripe{key: key}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// event returns a Stripe event as the API shows it.
func stripeEvent(id, typ, object string, created time.Time) map[string]any {
	return map[string]any{
		"id": id, "object": "event", "api_version": "2024-06-20", "created": created.Unix(),
		"data":     map[string]any{"object": map[string]any{"id": object, "object": "invoice", "amount_paid": 4200, "currency": "eur"}},
		"livemode": false, "pending_webhooks": 1, "request": map[string]any{"id": nil, "idempotency_key": nil}, "type": typ,
	}
}

// raw is an event's bytes as the fake's listing prints them.
func (f *fakeStripe) raw(e map[string]any) []byte {
	b, _ := json.MarshalIndent(e, "    ", "  ")
	return b
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake")
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Invalid API Key provided","type":"invalid_request_error"}}`)
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"message":"Unrecognized request URL","type":"invalid_request_error"}}`)
		return
	}
	f.calls++
	if f.redirect != 0 {
		w.Header().Set("Location", f.redirectTo+r.URL.RequestURI())
		w.WriteHeader(f.redirect)
		return
	}
	if f.calls <= f.tooMany {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"Too many requests hit the API too quickly.","type":"invalid_request_error","code":"rate_limit"}}`)
		return
	}
	q, _ := url.ParseQuery(r.URL.RawQuery)
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, 2) // small pages, so that the client pages
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	var list []map[string]any
	for i := len(f.events) - 1; i >= 0; i-- {
		if f.events[i]["created"].(int64) >= gte {
			list = append(list, f.events[i])
		}
	}
	if after := q.Get("starting_after"); after != "" {
		i := slices.IndexFunc(list, func(e map[string]any) bool { return e["id"] == after })
		list = list[i+1:]
	}
	more := len(list) > limit
	list = list[:min(limit, len(list))]
	var b bytes.Buffer
	b.WriteString("{\n  \"object\": \"list\",\n  \"data\": [\n")
	for i, e := range list {
		if i > 0 {
			b.WriteString(",\n")
		}
		b.WriteString("    ")
		b.Write(f.raw(e))
	}
	fmt.Fprintf(&b, "\n  ],\n  \"has_more\": %t,\n  \"url\": \"/v1/events\"\n}", more)
	_, _ = w.Write(b.Bytes())
}

// elsewhere is another server, on another port of the same host, where a
// fake API's redirects point. It records every request it gets, with its
// Authorization header, and answers as the API would with nothing to
// recover: an empty listing of deliveries or events, a redelivery queued,
// an installation token. A client that followed a redirect there would take
// that for the truth.
type elsewhere struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []string // "METHOD PATH Authorization: VALUE" of each request
}

func newElsewhere(t *testing.T) *elsewhere {
	e := &elsewhere{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.requests = append(e.requests, r.Method+" "+r.URL.Path+" Authorization: "+r.Header.Get("Authorization"))
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/deliveries"):
			fmt.Fprint(w, `[]`)
		case strings.HasSuffix(r.URL.Path, "/attempts"):
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprint(w, `{}`)
		case strings.HasSuffix(r.URL.Path, "/access_tokens"):
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"token":"ghs_elsewhere","expires_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		case strings.HasSuffix(r.URL.Path, "/installation"):
			fmt.Fprint(w, `{"id":99,"app_id":314}`)
		case r.URL.Path == "/v1/events":
			fmt.Fprint(w, `{"object":"list","data":[],"has_more":false,"url":"/v1/events"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"Not Found"}`)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// seen returns the requests elsewhere got.
func (e *elsewhere) seen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.requests)
}
