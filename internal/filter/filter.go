// Package filter evaluates routes' payload filters: CEL expressions
// (https://cel.dev) over a delivery's provider, event name, kept headers and
// parsed JSON payload.
//
// A filter is compiled once, at start: one that does not compile, or whose
// type is not bool (a bare field such as payload.action is dyn), is refused
// there. At run time a filter that fails on a delivery (a field missing, a
// cost or scan limit reached, a payload that is not JSON) is false for that
// delivery, and the caller is told why; it never fails the delivery.
package filter

import (
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"regexp"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"

	"github.com/hookgate/hookgate/internal/payload"
	"github.com/hookgate/hookgate/internal/providers"
)

// CostLimit bounds one evaluation's cost, in CEL's units (about one per
// field read, comparison or list element visited): a filter that would walk
// a large payload's arrays again and again stops there and is false.
const CostLimit = 100_000

// ScanPerByte and ScanSlack bound the bytes one evaluation may scan in the
// payload: ScanPerByte bytes per payload byte, and ScanSlack (1 MiB) more.
// CEL charges each step the same, whether it scans ten bytes or ten
// megabytes; the payload's view charges what it scans (see view.go), so a
// filter's time follows the payload's size, whatever its shape. Past the
// budget the evaluation stops and the filter is false (ErrScanLimit).
const (
	ScanPerByte = 8
	ScanSlack   = 1 << 20
)

// ErrScanLimit means an evaluation scanned more of the payload than its
// budget (ScanPerByte, ScanSlack).
var ErrScanLimit = errors.New("scan limit reached")

// MaxLen bounds a filter's text.
const MaxLen = 4096

// Input is one delivery as filters see it. Its payload is parsed the first
// time a filter needs it, and only once, however many routes have filters;
// the filters evaluated on it, one at a time, share what they found in it.
type Input struct {
	Provider, Event string
	// Headers are the delivery's kept headers; filters see their names in
	// lower case.
	Headers map[string]string
	// ContentType and Body are the request's; a form-encoded body's JSON is
	// its payload field (GitHub's form content type).
	ContentType string
	Body        []byte

	once     sync.Once
	vars     map[string]any
	view     *object
	parseErr error
	// eval makes one evaluation at a time read the payload's view, whose
	// remembered values and scan budget are shared.
	eval sync.Mutex
}

// activation returns the variables a filter sees, parsing the payload once.
func (in *Input) activation() (map[string]any, error) {
	in.once.Do(func() {
		headers := make(map[string]string, len(in.Headers))
		for k, v := range in.Headers {
			headers[strings.ToLower(k)] = v
		}
		in.view, in.parseErr = parse(in.ContentType, in.Body)
		in.vars = map[string]any{"provider": in.Provider, "event": in.Event, "headers": headers, "payload": in.view}
	})
	return in.vars, in.parseErr
}

// parse returns the view of a body's JSON that filters read: the body
// itself, or the payload field of a form-encoded body.
func parse(contentType string, body []byte) (*object, error) {
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/x-www-form-urlencoded" {
		p, err := providers.DecodeGitHubForm(body)
		if err != nil {
			return nil, err
		}
		body = p
	}
	o, err := payload.Parse(body)
	if err != nil {
		return nil, err
	}
	return view(o.Root().Result().Raw), nil
}

// Filter is a compiled filter.
type Filter struct {
	src   string
	prg   cel.Program
	loops bool // it has a comprehension (exists, all, map...): it is evaluated to be interrupted
}

// String returns the filter's text.
func (f *Filter) String() string { return f.src }

var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("provider", cel.StringType),
		cel.Variable("event", cel.StringType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("payload", cel.DynType),
		// JSON numbers are doubles: payload.amount_paid > 1000 compares
		// them with integers as a person means it.
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
		// A literal that can never work is a compile error, not a filter
		// false for every delivery.
		cel.ASTValidators(cel.ValidateRegexLiterals(), cel.ValidateDurationLiterals(), cel.ValidateTimestampLiterals()),
	)
})

// ErrInvalid means a filter does not compile or is not of type bool.
var ErrInvalid = errors.New("invalid filter")

// Compile compiles a filter. Its errors say where in the text it fails.
func Compile(src string) (*Filter, error) {
	return compile(src, func(t *cel.Type) error {
		if !t.IsExactType(cel.BoolType) {
			return fmt.Errorf("its type is %s, not bool (compare the field, or wrap it: payload.draft == true)", t)
		}
		return nil
	})
}

// CompileExpr compiles an expression over the same variables as a filter
// (a route's transformation), whose output type typeOK accepts; Eval
// evaluates it, bounded as filters are.
func CompileExpr(src string, typeOK func(*cel.Type) error) (*Filter, error) {
	return compile(src, typeOK)
}

// inputPosition is where CEL's errors say they are: "<input>:LINE:COLUMN:".
var inputPosition = regexp.MustCompile(`<input>:(\d+):(\d+):`)

// Explain is a Compile or CompileExpr error as a person reads it: without
// ErrInvalid's words, each place as "line L, column C:", and CEL's limits on
// nesting (which name no place) as "the expression as a whole:".
func Explain(err error) string {
	msg := strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
	msg = strings.ReplaceAll(msg, "ERROR: <input>:", "<input>:")
	msg = strings.ReplaceAll(msg, "<input>:-1:0:", "the expression as a whole:")
	return inputPosition.ReplaceAllString(msg, "line $1, column $2:")
}

func compile(src string, typeOK func(*cel.Type) error) (*Filter, error) {
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(src) > MaxLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxLen)
	}
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("filter environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if err := checkPatterns(ast); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := typeOK(ast.OutputType()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	prg, err := e.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Filter{src: src, prg: prg, loops: loops(ast)}, nil
}

// loops reports whether a filter has a comprehension, whose steps CEL checks
// for an interruption.
func loops(a *cel.Ast) bool {
	found := false
	celast.PreOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		found = found || e.Kind() == celast.ComprehensionKind
	}))
	return found
}

// checkPatterns compiles every constant pattern of matches(), in either form
// (text.matches(p) or matches(text, p)): one that cannot compile would make
// the filter fail on every delivery.
func checkPatterns(a *cel.Ast) error {
	var bad error
	celast.PreOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if bad != nil || e.Kind() != celast.CallKind || e.AsCall().FunctionName() != "matches" {
			return
		}
		args := e.AsCall().Args()
		if len(args) == 0 {
			return
		}
		p := args[len(args)-1]
		if p.Kind() != celast.LiteralKind {
			return
		}
		if pattern, ok := p.AsLiteral().Value().(string); ok {
			if _, err := regexp.Compile(pattern); err != nil {
				bad = fmt.Errorf("matches: %w", err)
			}
		}
	}))
	return bad
}

// Match reports whether the filter is true for the delivery. An error says
// why it could not be evaluated; the filter is then false. An evaluation
// that ran past its scan budget is false with ErrScanLimit, whatever CEL
// made of the errors the view gave it.
func (f *Filter) Match(in *Input) (bool, error) {
	var b bool
	err := f.Eval(in, func(out ref.Val) error {
		var ok bool
		if b, ok = out.Value().(bool); !ok {
			return fmt.Errorf("the filter gave %v, not a bool", out.Value())
		}
		return nil
	})
	return b && err == nil, err
}

// Eval evaluates the expression on the delivery and passes its value to
// use, while the payload's view is still the evaluation's: use may read
// the value's views (RawJSON), charged to the same scan budget. An error
// says why it could not be evaluated, or is use's; past its scan budget it
// is ErrScanLimit, whatever CEL made of the errors the view gave it.
func (f *Filter) Eval(in *Input, use func(ref.Val) error) error {
	vars, err := in.activation()
	if err != nil {
		return err
	}
	in.eval.Lock()
	defer in.eval.Unlock()
	// The view interrupts a filter that loops when its budget runs out; until
	// CEL sees it, and in a filter without loops, every read of the view is
	// an error made without scanning.
	ctx := in.view.s.begin(f.loops)
	var out ref.Val
	if f.loops {
		out, _, err = f.prg.ContextEval(ctx, vars)
	} else {
		out, _, err = f.prg.Eval(vars)
	}
	if in.view.s.over {
		return in.view.s.failure()
	}
	if err != nil {
		return err
	}
	err = use(out)
	if in.view.s.over {
		return in.view.s.failure()
	}
	return err
}

// Reporter is told of filters that failed on a delivery: it counts each
// failure and logs at most one a minute per route, so that a filter failing
// on every delivery of a busy route does not flood the log.
type Reporter struct {
	// Count, when set, counts one failure of the route's filter.
	Count  func(route string)
	Logger *slog.Logger
	// Every is the least time between two log lines of one route; a minute
	// when 0.
	Every time.Duration

	mu     sync.Mutex
	logged map[string]time.Time
	quiet  map[string]int // failures not logged since the last line
}

// Failed records one failure of route's filter.
func (r *Reporter) Failed(route string, err error) {
	if r == nil {
		return
	}
	if r.Count != nil {
		r.Count(route)
	}
	every := r.Every
	if every <= 0 {
		every = time.Minute
	}
	r.mu.Lock()
	if r.logged == nil {
		r.logged, r.quiet = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if now.Sub(r.logged[route]) < every {
		r.quiet[route]++
		r.mu.Unlock()
		return
	}
	r.logged[route] = now
	quiet := r.quiet[route]
	r.quiet[route] = 0
	r.mu.Unlock()
	if r.Logger != nil {
		r.Logger.Warn("a route's filter failed on a delivery; the route does not take it", "route", route, "error", err,
			"failures_not_logged", quiet)
	}
}
