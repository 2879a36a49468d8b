package providers

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/payload"
	"github.com/hookgate/hookgate/internal/verify"
)

// A source is a sender: its kind says how its deliveries are signed and
// read, and Kinds is the one list of kinds, which the configuration, gateway
// send, the bench and the tests read. GitHub and Stripe are kinds too, built
// in: each is the one source named after it, configured by its variables
// (GITHUB_WEBHOOK_SECRET, STRIPE_WEBHOOK_SECRET); the other kinds' sources are
// configured in the configuration file and served at /webhooks/<name>.

// SourceConfig is one configured source.
type SourceConfig struct {
	// Name is the source's provider name in URLs, routes, receipts,
	// operator filters and metrics.
	Name string
	// Kind is one of Kinds' names.
	Kind string
	// Secrets are the source's secrets; any may match (rotation).
	Secrets verify.Secrets
	// Tolerance is how far a signed timestamp may be from the clock, either
	// way; 5 minutes when 0.
	Tolerance time.Duration
	// Order, when set, names the JSON paths of the entity a delivery is
	// about and its time, so that the source's deliveries are order-aware.
	Order *OrderPaths
	// HMAC is the kind hmac's scheme.
	HMAC HMACScheme
}

// OrderPaths are dot-separated JSON paths into a payload.
type OrderPaths struct {
	Entity, Time string
}

// HMACScheme describes a sender's own HMAC header.
type HMACScheme struct {
	SignatureHeader string
	// Algorithm is sha1, sha256 or sha512; Encoding hex or base64.
	Algorithm, Encoding string
	// Prefix is stripped from the header's value before it is decoded.
	Prefix string
	// TimestampHeader, when set, carries unix seconds, and
	// "<timestamp>.<body>" is what was signed.
	TimestampHeader string
	// The delivery id and the event come from a header or a JSON path.
	IDHeader, IDField, EventHeader, EventField string
}

// Kind is one kind of source: everything about a sender that the rest of
// hookgate needs, so that no layer names a sender.
type Kind struct {
	// New returns the source's Provider, or what is wrong with its
	// configuration.
	New func(c SourceConfig) (Provider, error)
	// Sign sets on h what the sender sends with body (content type, id,
	// event, signature), signed with the source's first secret as the
	// sender signs. NewRequest builds a request with it, for gateway send,
	// the bench and the tests.
	Sign func(c SourceConfig, h http.Header, body []byte, id, event string, now time.Time) error
	// Sample is a payload of event for gateway send without --file.
	Sample func(c SourceConfig, id, event string, now time.Time) []byte
	// Timed reports whether c's deliveries carry a signed time, which must
	// be within c's tolerance of the clock: a source of a kind that signs
	// none is refused a tolerance.
	Timed func(c SourceConfig) bool
	// Env, set for a built-in kind only, is the variable that holds its
	// secrets: such a kind is the one source named after it, configured by
	// its variables rather than in the configuration file, and its name is
	// known to routes and filters even while the variable is unset. Empty:
	// the kind's sources are the configuration file's.
	Env string
}

// Kinds are the kinds of sources, by name. A new kind is a file of this
// package and a line here.
var Kinds = map[string]Kind{
	"github":            githubKind,
	"stripe":            stripeKind,
	"standard-webhooks": standardWebhooksKind,
	"shopify":           shopifyKind,
	"slack":             slackKind,
	"gitlab":            gitlabKind,
	"hmac":              hmacKind,
}

// KindNames returns the names of the kinds a configuration file's source may
// have (those without Env), sorted.
func KindNames() []string { return kindNames(false) }

// Builtins returns the built-in kinds' names (those with Env), sorted: each
// is a provider's name whether or not its variable is set.
func Builtins() []string { return kindNames(true) }

func kindNames(builtin bool) []string {
	var names []string
	for name, k := range Kinds {
		if (k.Env != "") == builtin {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// timed and untimed are Timed for a kind that always, or never, signs a time.
func timed(SourceConfig) bool   { return true }
func untimed(SourceConfig) bool { return false }

// KeyError is what is wrong with one key of a source's configuration, the
// key named as the configuration file spells it (secret_env, kind, ...), so
// that the file can say on which line it is. Its message never holds the
// value of secret_env: that may be the secret itself.
type KeyError struct {
	Key, Problem string
}

// Error implements error.
func (e *KeyError) Error() string { return "key " + e.Key + ": " + e.Problem }

// keyError returns a *KeyError.
func keyError(key, format string, args ...any) error {
	return &KeyError{Key: key, Problem: fmt.Sprintf(format, args...)}
}

// sourceNameRE is what a source's name may be: it is a URL path segment,
// a route's provider and a metrics label.
var sourceNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// CheckSourceName reports whether name can name a source (and so be a
// route's provider): 1-32 of a-z, 0-9, _ and -, starting with a letter or
// digit. A name that cannot is never shown in a message: what was written
// there may be a secret.
func CheckSourceName(name string) error {
	if !sourceNameRE.MatchString(name) {
		return errors.New("must be 1-32 of a-z, 0-9, _ and -, starting with a letter or digit")
	}
	return nil
}

// DefaultTolerance is how far a signed timestamp may be from the clock.
const DefaultTolerance = 5 * time.Minute

// NewSource checks a configuration file's source and returns its Provider:
// New, for a kind the file may name (a built-in kind or name is configured by
// its variables).
func NewSource(c SourceConfig) (Provider, error) {
	if err := CheckSourceName(c.Name); err != nil {
		return nil, keyError("name", "%v", err)
	}
	if slices.Contains(Builtins(), c.Name) {
		return nil, keyError("name", "%s is built in; configure it with its variables", c.Name)
	}
	if k, ok := Kinds[c.Kind]; !ok || k.Env != "" {
		return nil, keyError("kind", "must be one of %s, got %q", strings.Join(KindNames(), ", "), c.Kind)
	}
	return New(c)
}

// New checks c, a source of any kind (a built-in kind's from its variables,
// named after it), and returns its Provider.
func New(c SourceConfig) (Provider, error) {
	k, ok := Kinds[c.Kind]
	switch {
	case !ok:
		return nil, keyError("kind", "must be one of %s, got %q", strings.Join(slices.Sorted(maps.Keys(Kinds)), ", "), c.Kind)
	case k.Env != "" && c.Name != c.Kind:
		return nil, keyError("name", "a %s source is named %s", c.Kind, c.Kind)
	case !sourceNameRE.MatchString(c.Name):
		return nil, keyError("name", "must be 1-32 of a-z, 0-9, _ and -, starting with a letter or digit")
	}
	if len(c.Secrets) == 0 {
		return nil, keyError("secret_env", "the variable it names holds no secret")
	}
	if o := c.Order; o != nil && (!validPath(o.Entity) || !validPath(o.Time)) {
		return nil, keyError("order", "entity and time must both be JSON paths such as data.id")
	}
	if c.Kind != "hmac" && c.HMAC != (HMACScheme{}) {
		return nil, fmt.Errorf("the keys of an hmac scheme (signature_header, ...) are for kind hmac, not %s", c.Kind)
	}
	if !k.Timed(c) && c.Tolerance != 0 {
		return nil, keyError("tolerance", "a %s source signs no time", c.Kind)
	}
	if c.Tolerance <= 0 {
		c.Tolerance = DefaultTolerance
	}
	return k.New(c)
}

// validPath accepts a dot-separated JSON path of names.
func validPath(p string) bool {
	if p == "" || len(p) > 256 {
		return false
	}
	for part := range strings.SplitSeq(p, ".") {
		if part == "" || !Printable(part) {
			return false
		}
	}
	return true
}

// source is what every kind's Provider shares: its configuration, and the
// reading of a payload's id, event and order fields.
type source struct {
	cfg SourceConfig
}

// Name implements Provider.
func (s source) Name() string { return s.cfg.Name }

// Source returns the source's configuration: what gateway send signs with.
func (s source) Source() SourceConfig { return s.cfg }

// Configured is a source's Provider.
type Configured interface {
	Provider
	Source() SourceConfig
}

// path returns the value at a dot-separated path.
func path(v payload.Object, p string) payload.Value {
	return v.Get(strings.Split(p, ".")...)
}

// finish reads a verified payload into d: the event and id from paths when
// the headers did not name them, and the order fields. An id or event that
// is required and absent is ErrBadPayload.
func (s source) finish(d *Delivery, idPath, eventPath string, read func(v payload.Object) error) error {
	v, err := readObject(d.Body)
	if err != nil {
		return err
	}
	if idPath != "" {
		d.DeliveryID = idText(path(v, idPath))
	}
	if eventPath != "" {
		d.Event = path(v, eventPath).Text()
	}
	if o := s.cfg.Order; o != nil {
		if e := idText(path(v, o.Entity)); e != "" {
			d.Entity, d.EventTime = s.cfg.Name+":"+e, path(v, o.Time).Time()
			if d.EventTime.IsZero() {
				d.Entity = ""
			}
		}
	}
	if read != nil {
		if err := read(v); err != nil {
			return err
		}
	}
	if idPath != "" && d.DeliveryID == "" {
		return fmt.Errorf("%w: the payload's %s must be a non-empty string or number of at most %d bytes", ErrBadPayload, idPath, MaxIDLen)
	}
	if d.Event == "" || !ValidID(d.Event) {
		what := "the event"
		if eventPath != "" {
			what = "the payload's " + eventPath
		}
		return fmt.Errorf("%w: %s must be a non-empty printable string of at most %d bytes", ErrBadPayload, what, MaxIDLen)
	}
	return nil
}

// delivery starts a verified delivery from what Check read.
func (s source) delivery(req Request, body []byte, idx int) Delivery {
	return Delivery{Provider: s.cfg.Name, Scope: req.Scope, DeliveryID: req.DeliveryID, Event: req.Event,
		ContentType: req.ContentType, Headers: req.Headers, Body: body, SecretIndex: idx}
}

// header reads an optional header the database can store, or fails.
func optionalHeader(h http.Header, name string) (string, error) {
	v := strings.TrimSpace(h.Get(name))
	if !ValidID(v) {
		return "", fmt.Errorf("%w: %s must be printable text of at most %d bytes", ErrMissingHeader, name, MaxIDLen)
	}
	return v, nil
}

// sample is a small JSON payload for gateway send.
func sample(fields map[string]any) []byte {
	b, _ := json.Marshal(fields)
	return b
}

// checkJSON checks that a source's delivery is JSON, as every kind sends.
func (s source) checkJSON(h http.Header) (string, error) {
	contentType, _, err := checkContentType(h, s.cfg.Name, "application/json")
	return contentType, err
}
