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
	"net/http"
	"os"
	"strings"

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

// Check reports what in the OTEL_* variables the gateway cannot follow:
// another exporter than otlp, another protocol than http/protobuf.
func Check(getenv func(string) string) error {
	if !Configured(getenv) {
		return nil
	}
	var errs []error
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		errs = append(errs, fmt.Errorf("%w: OTEL_TRACES_EXPORTER: otlp or none, not %q", ErrConfig, e))
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := getenv(v); p != "" && p != "http/protobuf" {
			errs = append(errs, fmt.Errorf("%w: %s: hookgate exports over http/protobuf, not %q", ErrConfig, v, p))
		}
	}
	return errors.Join(errs...)
}

// FromEnv returns a tracer provider exporting as the OTEL_* variables say;
// nil when they ask for no traces. Its Shutdown sends what is left.
func FromEnv(ctx context.Context) (*sdktrace.TracerProvider, error) {
	if !Configured(os.Getenv) {
		return nil, nil
	}
	if err := Check(os.Getenv); err != nil {
		return nil, err
	}
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

// Fail marks span failed with err, when err is not nil.
func Fail(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
