package recovery

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stripe/stripe-go/v84"
	"github.com/tidwall/gjson"
)

// Beneath any client, even one that follows every redirect (as
// ghinstallation's own http.Client would), pinned sends nothing to another
// port of the API's host.
func TestPinnedSendsNothingElsewhere(t *testing.T) {
	var got atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	defer other.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/same" {
			return
		}
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer api.Close()
	u, _ := url.Parse(api.URL)
	client := &http.Client{Transport: pinned{origin: originOf(u), next: http.DefaultTransport}}
	req, _ := http.NewRequest(http.MethodGet, api.URL+"/elsewhere", nil)
	req.Header.Set("Authorization", "Bearer secret")
	if _, err := client.Do(req); !errors.Is(err, ErrRedirectRefused) {
		t.Errorf("a redirect to another port: %v, want ErrRedirectRefused", err)
	}
	if got.Load() != 0 {
		t.Errorf("the other server got %d requests", got.Load())
	}
	res, err := client.Get(api.URL + "/same")
	if err != nil {
		t.Fatalf("a request to the API itself: %v", err)
	}
	res.Body.Close()
	// The default ports are the same origin spelled either way.
	if originOf(&url.URL{Scheme: "https", Host: "API.example.com"}) != originOf(&url.URL{Scheme: "https", Host: "api.example.com:443"}) {
		t.Error("https://API.example.com and https://api.example.com:443 are one origin")
	}
	if originOf(&url.URL{Scheme: "http", Host: "api.example.com"}) == originOf(&url.URL{Scheme: "https", Host: "api.example.com"}) {
		t.Error("http and https are two origins")
	}
}

// A page holding an event of a million tiny values is read (the page
// checked, the event's id, type and time taken, its bytes copied) without a
// tree of the event: a few times its size allocated, where stripe-go's
// listing took gigabytes.
func TestAPageIsReadWithoutATreeOfItsEvents(t *testing.T) {
	values := strings.Repeat("0,", 1_000_000) + "0"
	raw := `{"id":"evt_huge","object":"event","type":"invoice.paid","created":1767000000,"data":{"object":{"id":"in_1","v":[` + values + `]}}}`
	body := []byte(`{"object":"list","has_more":false,"url":"/v1/events","data":[` + raw + `]}`)
	s := &Stripe{cfg: StripeConfig{MaxBodyBytes: DefaultMaxBodyBytes}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	data, more, err := page(&stripe.APIResponse{StatusCode: http.StatusOK, Status: "200 OK", RawJSON: body, Header: http.Header{}})
	if err != nil || more {
		t.Fatalf("page: %v, %v", more, err)
	}
	var got []event
	data.ForEach(func(_, v gjson.Result) bool {
		e, why := s.read(v)
		if why != "" {
			t.Fatal(why)
		}
		got = append(got, e)
		return true
	})
	runtime.ReadMemStats(&after)
	if len(got) != 1 || got[0].id != "evt_huge" || got[0].typ != "invoice.paid" || got[0].created.Unix() != 1767000000 || !bytes.Equal(got[0].raw, []byte(raw)) {
		t.Fatalf("read %+v", got)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 8*uint64(len(body)) {
		t.Errorf("reading a page of %d bytes allocated %d bytes", len(body), n)
	}
}
