package tracing_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/hookgate/hookgate/internal/tracing"
)

// env is a getenv of a fixed set of variables.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// Traces are asked for by an OTLP endpoint; the SDK's own switches turn
// them off again.
func TestConfiguredByAnEndpoint(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "gw"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		if got := tracing.Configured(env(c.vars)); got != c.want {
			t.Errorf("%v: configured %t", c.vars, got)
		}
	}
}

// What the gateway cannot export is refused at start, not dropped silently.
func TestCheckRefusesWhatTheGatewayCannotExport(t *testing.T) {
	const endpoint = "http://collector:4318"
	for _, c := range []struct {
		vars map[string]string
		ok   bool
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "zipkin"}, false},
		// Refused without an endpoint too: the next person to set one
		// would find out only then.
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false},
		// Turned off: nothing to refuse.
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SDK_DISABLED": "true"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_HEADERS": "api-key=abc%20def,x-team=hooks",
			"OTEL_EXPORTER_OTLP_TIMEOUT": "5000", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, true},
	} {
		err := tracing.Check(env(c.vars))
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, tracing.ErrConfig)) {
			t.Errorf("%v: %v", c.vars, err)
		}
	}
}

// Values the SDK would skip with a log line printing them are refused at
// start, each variable named on a line of its own and no value told: an
// endpoint or a header may carry a credential.
func TestCheckNamesEveryBadValueAndTellsNone(t *testing.T) {
	err := tracing.Check(env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "https://u:SECRET1@collector:43x18",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://u:SECRET2@collector:4318/v1/traces",
		"OTEL_EXPORTER_OTLP_HEADERS":         "api-key=SECRET3%zz",
		"OTEL_EXPORTER_OTLP_TIMEOUT":         "SECRET4",
		"OTEL_EXPORTER_OTLP_COMPRESSION":     "SECRET5",
		"OTEL_TRACES_SAMPLER":                "SECRET6",
	}))
	want := []string{
		"tracing: OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL, such as http://otel-collector:4318",
		"tracing: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: must carry no user or password: send a credential with OTEL_EXPORTER_OTLP_HEADERS",
		"tracing: OTEL_EXPORTER_OTLP_HEADERS: must be name=value pairs, comma-separated, each value percent-encoded",
		"tracing: OTEL_EXPORTER_OTLP_TIMEOUT: must be a number of milliseconds, such as 10000",
		"tracing: OTEL_EXPORTER_OTLP_COMPRESSION: must be gzip or none",
		"tracing: OTEL_TRACES_SAMPLER: must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("got:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	if err := tracing.Check(env(map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"})); err == nil ||
		!strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER_ARG: must be a ratio from 0 to 1") {
		t.Errorf("a ratio of 2: %v", err)
	}
}

// With an endpoint, the gateway's spans reach the collector over OTLP/HTTP
// by the time the provider is shut down.
func TestFromEnvExportsToTheCollector(t *testing.T) {
	var mu sync.Mutex
	var posts []string
	var services, spans []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts = append(posts, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("not an OTLP export: %v", err)
			return
		}
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					services = append(services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					spans = append(spans, ss.GetScope().GetName()+" "+sp.GetName())
				}
			}
		}
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "hookgate-test")

	tp, err := tracing.FromEnv(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil || tp == nil {
		t.Fatalf("FromEnv: %v, %v", tp, err)
	}
	_, span := tracing.Tracer(tp).Start(context.Background(), "hookgate.ingest")
	span.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 || posts[0] != "POST /v1/traces application/x-protobuf" {
		t.Fatalf("the collector received %q", posts)
	}
	// OTEL_SERVICE_NAME names the service; the instrumentation is hookgate.
	if !slices.Equal(services, []string{"hookgate-test"}) || !slices.Equal(spans, []string{"hookgate hookgate.ingest"}) {
		t.Errorf("exported services %q, spans %q", services, spans)
	}
}

// Without an endpoint there is no provider, and a nil provider is no
// tracer: the gateway does no tracing work.
func TestFromEnvWithoutAnEndpointIsNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, err := tracing.FromEnv(context.Background(), slog.New(slog.DiscardHandler))
	if tp != nil || err != nil {
		t.Fatalf("FromEnv: %v, %v", tp, err)
	}
	if tracing.Tracer(nil) != nil {
		t.Fatal("a tracer of no provider")
	}
}

// A dispatch job's metadata carries its delivery's traceparent to the
// attempt, whatever else the metadata holds; metadata without one, or not
// JSON, leaves the attempt without a parent.
func TestMetadataCarriesTheDeliverysTrace(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := trace.SpanContextFromContext(tracing.FromMetadata(context.Background(), tracing.Metadata(parent)))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() {
		t.Fatalf("from metadata: %v", sc)
	}
	if tracing.Metadata("") != nil {
		t.Error("metadata for no trace")
	}
	for _, m := range []string{``, `{}`, `{"traceparent": 7}`, `not json`, `{"traceparent": "00-garbage"}`} {
		if sc := trace.SpanContextFromContext(tracing.FromMetadata(context.Background(), []byte(m))); sc.IsValid() {
			t.Errorf("%q: a parent %v", m, sc)
		}
	}
}
