package hookgate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/hookgatetest"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// traceparents are the traceparent headers a target received, in order.
type traceparents struct {
	mu  sync.Mutex
	got []string
}

func (tp *traceparents) server(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		tp.got = append(tp.got, r.Header.Get("Traceparent"))
	}))
	t.Cleanup(s.Close)
	return s
}

func (tp *traceparents) all() []string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]string(nil), tp.got...)
}

// spanNamed is the one ended span of that name, or an error.
func spanNamed(spans tracetest.SpanStubs, name string) (tracetest.SpanStub, error) {
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return tracetest.SpanStub{}, fmt.Errorf("%d spans named %s", len(found), name)
	}
	return found[0], nil
}

// A delivery whose sender sent a traceparent is one trace from the sender
// to the target: the ingest request's span continues the sender's, the
// dispatch attempt's span is in the same trace, and the forward carries a
// traceparent whose parent is the forward's span.
func TestADeliveryIsOneTraceFromSenderToTarget(t *testing.T) {
	var target traceparents
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	g := runGateway(t, hookgate.Config{
		Routes: []hookgate.Route{{Name: "billing", Match: []string{"stripe:invoice.*"}, Target: target.server(t).URL}},
	}, hookgate.WithTracerProvider(tp))

	const senderTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	const senderSpan = "00f067aa0ba902b7"
	req, err := hookgatetest.StripeRequest(context.Background(), "http://"+g.gw.Addr()+"/webhooks/stripe", stripeSecret,
		[]byte(invoice("evt_traced", "invoice.paid")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", "00-"+senderTrace+"-"+senderSpan+"-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("ingest: %d", res.StatusCode)
	}

	var ingest, dispatch, forward tracetest.SpanStub
	dbtest.Eventually(t, 20*time.Second, "the forward's span ended", func() error {
		if len(target.all()) != 1 {
			return fmt.Errorf("the target received %d", len(target.all()))
		}
		spans := exporter.GetSpans()
		for name, into := range map[string]*tracetest.SpanStub{
			"hookgate.ingest": &ingest, "hookgate.dispatch": &dispatch, "hookgate.dispatch.forward": &forward,
		} {
			if *into, err = spanNamed(spans, name); err != nil {
				return err
			}
		}
		return nil
	})

	if got := ingest.SpanContext.TraceID().String(); got != senderTrace {
		t.Errorf("the ingest span's trace is %s, not the sender's", got)
	}
	if got := ingest.Parent.SpanID().String(); got != senderSpan || !ingest.Parent.IsRemote() {
		t.Errorf("the ingest span's parent is %s (remote %t), not the sender's span", got, ingest.Parent.IsRemote())
	}
	if ingest.SpanKind != trace.SpanKindServer {
		t.Errorf("the ingest span is a %s span", ingest.SpanKind)
	}
	for _, name := range []string{"hookgate.ingest.verify", "hookgate.ingest.commit"} {
		s, err := spanNamed(exporter.GetSpans(), name)
		if err != nil {
			t.Error(err)
		} else if s.Parent.SpanID() != ingest.SpanContext.SpanID() {
			t.Errorf("%s is not the ingest span's child", name)
		}
	}
	if dispatch.SpanContext.TraceID() != ingest.SpanContext.TraceID() {
		t.Errorf("the dispatch is in trace %s, the delivery in %s", dispatch.SpanContext.TraceID(), ingest.SpanContext.TraceID())
	}
	if forward.Parent.SpanID() != dispatch.SpanContext.SpanID() {
		t.Error("the forward's span is not the dispatch's child")
	}
	if len(dispatch.Links) != 1 {
		t.Errorf("the dispatch span has %d links, not one to River's span of the job", len(dispatch.Links))
	}
	want := fmt.Sprintf("00-%s-%s-01", senderTrace, forward.SpanContext.SpanID())
	if got := target.all()[0]; got != want {
		t.Errorf("the target received traceparent %q, want %q", got, want)
	}
}

// Without a tracer (and no OTEL_* endpoint) a forward carries no
// traceparent of the gateway's: a sender's is not passed on either, since
// a forward is a request of the gateway's.
func TestWithoutTracingAForwardCarriesNoTraceparent(t *testing.T) {
	var target traceparents
	g := runGateway(t, hookgate.Config{
		Routes: []hookgate.Route{{Name: "billing", Match: []string{"stripe:invoice.*"}, Target: target.server(t).URL}},
	})
	req, err := hookgatetest.StripeRequest(context.Background(), "http://"+g.gw.Addr()+"/webhooks/stripe", stripeSecret,
		[]byte(invoice("evt_untraced", "invoice.paid")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	dbtest.Eventually(t, 20*time.Second, "the forward", func() error {
		if len(target.all()) != 1 {
			return fmt.Errorf("the target received %d", len(target.all()))
		}
		return nil
	})
	if got := target.all()[0]; got != "" {
		t.Errorf("the target received traceparent %q", got)
	}
}
