// Package tracing is the gateway's OpenTelemetry traces: a span per ingest
// request (its verification and its commit), one per dispatch attempt (its
// claim, the forward or handler, its outcome) in the delivery's trace, and
// River's own job spans. A sender's traceparent is continued; a forward
// carries one. The standard OTEL_* variables configure the exporter (OTLP
// over HTTP); without an endpoint nothing is set up, and the gateway does no
// tracing work at all.
package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookgate/hookgate/internal/version"
)

// Name is the instrumentation's name, and the service's unless
// OTEL_SERVICE_NAME says otherwise.
const Name = "hookgate"

// ErrConfig means OTEL_* variables the gateway cannot follow.
var ErrConfig = errors.New("tracing")

// Configured reports whether the environment asks for traces: an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),
// unless OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none.
func Configured(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Check reports what in the OTEL_* variables the gateway cannot follow,
// each variable on a line of its own and never its value (an endpoint or a
// header may hold a credential): another exporter than otlp, another
// protocol than http/protobuf, an endpoint that is no http(s) URL or that
// carries a password, headers, a timeout, a compression or a sampler that
// do not parse. The OpenTelemetry SDK would otherwise skip such a value
// with a log line of its own, printing it.
func Check(getenv func(string) string) error {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return nil
	}
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: "+format, append([]any{ErrConfig, name}, args...)...))
	}
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		bad("OTEL_TRACES_EXPORTER", "otlp or none, not %q", clip(e))
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := getenv(v); p != "" && p != "http/protobuf" {
			bad(v, "hookgate exports over http/protobuf, not %q", clip(p))
		}
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		e := getenv(v)
		if e == "" {
			continue
		}
		u, err := url.Parse(e)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() != "" && !numeric(u.Port()):
			bad(v, "must be an http:// or https:// URL, such as http://otel-collector:4318")
		case u.User != nil:
			bad(v, "must carry no user or password: send a credential with OTEL_EXPORTER_OTLP_HEADERS")
		}
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if h := getenv(v); h != "" && !headersParse(h) {
			bad(v, "must be name=value pairs, comma-separated, each value percent-encoded")
		}
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"} {
		if t := getenv(v); t != "" && !numeric(t) {
			bad(v, "must be a number of milliseconds, such as 10000")
		}
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"} {
		if c := getenv(v); c != "" && c != "gzip" && c != "none" {
			bad(v, "must be gzip or none")
		}
	}
	sampler, arg := getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG")
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if f, err := strconv.ParseFloat(arg, 64); arg != "" && (err != nil || f < 0 || f > 1) {
			bad("OTEL_TRACES_SAMPLER_ARG", "must be a ratio from 0 to 1, such as 0.1")
		}
	default:
		bad("OTEL_TRACES_SAMPLER", "must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
	}
	return errors.Join(errs...)
}

// numeric reports whether s is a whole number, 0 or more.
func numeric(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0
}

// headersParse reports whether the SDK reads every pair of an
// OTEL_EXPORTER_OTLP_HEADERS value (name=value, the value percent-encoded).
func headersParse(h string) bool {
	for _, pair := range strings.Split(h, ",") {
		name, value, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(strings.TrimSpace(name), " \t\r\n\":;") {
			return false
		}
		if _, err := url.PathUnescape(value); err != nil {
			return false
		}
	}
	return true
}

// clip keeps a value told back short and printable.
func clip(s string) string {
	if len(s) > 40 || strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "…"
	}
	return s
}

// FromEnv returns a tracer provider exporting as the OTEL_* variables say;
// nil when they ask for no traces. Its Shutdown sends what is left. What
// could not be sent is logged to logger.
func FromEnv(ctx context.Context, logger *slog.Logger) (*sdktrace.TracerProvider, error) {
	if !Configured(os.Getenv) {
		return nil, nil
	}
	if err := Check(os.Getenv); err != nil {
		return nil, err
	}
	// The SDK's own log lines print what they are about (an endpoint, a
	// header's value): they are dropped, and its errors (spans that could
	// not be sent) reach the gateway's log at most once a minute, without
	// a URL's credentials.
	otel.SetLogger(logr.Discard())
	otel.SetErrorHandler(exportErrors(logger))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: the OTLP exporter: %w", ErrConfig, err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// over hookgate's own name and version.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(Name), semconv.ServiceVersion(version.Number)), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("%w: the resource: %w", ErrConfig, err)
	}
	// The sampler follows OTEL_TRACES_SAMPLER; the batcher OTEL_BSP_*.
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Tracer is the gateway's tracer of tp; nil (tracing off) for a nil tp.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(Name, trace.WithInstrumentationVersion(version.Number))
}

// propagator reads and writes W3C traceparent and tracestate.
var propagator = propagation.TraceContext{}

// FromRequest returns ctx continuing the trace of a sender's traceparent,
// when the request has one.
func FromRequest(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject sets traceparent (and tracestate) on h for ctx's span, when it has
// one: what a forward carries.
func Inject(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// Parent is ctx's span as a W3C traceparent, "" when it has none: what a
// delivery's dispatches keep (in their River jobs' metadata) to join its
// trace.
func Parent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// metadataKey is where a dispatch job's metadata keeps its delivery's
// traceparent: River's OpenTelemetry middleware reads the same key.
const metadataKey = "traceparent"

// Metadata is a River job's metadata holding parent; nil for none.
func Metadata(parent string) []byte {
	if parent == "" {
		return nil
	}
	b, _ := json.Marshal(map[string]string{metadataKey: parent})
	return b
}

// FromMetadata returns ctx continuing the trace a River job's metadata
// keeps (Metadata), when it keeps one.
func FromMetadata(ctx context.Context, metadata []byte) context.Context {
	var m map[string]any
	if len(metadata) == 0 || json.Unmarshal(metadata, &m) != nil {
		return ctx
	}
	s, _ := m[metadataKey].(string)
	if s == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{metadataKey: s})
}

// Step starts a span named name, a part of ctx's, with tracer, and returns
// what ends it, failed with its error if any; with no tracer (tracing
// off), both do nothing.
func Step(tracer trace.Tracer, ctx context.Context, name string) func(error) {
	if tracer == nil {
		return func(error) {}
	}
	_, span := tracer.Start(ctx, name)
	return func(err error) {
		Fail(span, err)
		span.End()
	}
}

// Fail marks span failed with err, when err is not nil.
func Fail(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// exportErrors logs the SDK's errors (spans that could not be sent: the
// collector down, say) at most once a minute, with a count, and without the
// credentials a URL in them might carry.
func exportErrors(logger *slog.Logger) otel.ErrorHandlerFunc {
	var mu sync.Mutex
	var last time.Time
	var dropped int
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		dropped++
		if time.Since(last) < time.Minute {
			return
		}
		logger.Warn("tracing: spans not sent", "error", userinfo.ReplaceAllString(err.Error(), "://"), "errors", dropped)
		last, dropped = time.Now(), 0
	}
}

// userinfo is a URL's user and password, as an error may quote them.
var userinfo = regexp.MustCompile(`://[^/@\s]*@`)
