package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Lookup reads a variable: os.LookupEnv, or a map in a test.
type Lookup func(name string) (string, bool)

// FromEnv fills a Config from the variables lookup reads (each field's env
// tag) and from the configuration file GATEWAY_CONFIG_FILE names: its routes
// when it lists routes, else GATEWAY_ROUTES; its sources. A secret's variable
// may instead name a file through its _FILE variant (GITHUB_WEBHOOK_SECRET_FILE),
// which is read here: the environment is never written. A variable unset or
// empty leaves its field at zero, for Resolve's default. The error names
// every variable, file line and key that could not be read, one line each,
// never a value that may be a secret; what the values mean is Resolve's to
// check.
//
// On error the Config holds what could be read: a value that could not is
// left at zero, a route or source that could not is left out (a route
// naming such a source is not reported for it by Resolve). Remember makes
// it keep the error too.
func FromEnv(lookup Lookup) (Config, error) {
	var c Config
	errs := readVars(&c, lookup)
	spec, _ := lookup(routesVariable)
	path, _ := lookup(configFileVariable)
	read, err := routesAndSources(spec, path, lookup, c.configured(nil))
	if err != nil {
		errs = append(errs, err)
	}
	c.Routes, c.Sources, c.unreadSources = read.routes, read.sources, read.unreadSources
	if read.searchKeys != nil {
		c.SearchKeys, c.keysFile, c.keyLines = read.searchKeys, path, read.keyLines
	}
	if len(read.routes) > 0 {
		c.routesFrom, c.routesFile = read.from, read.file
	}
	if read.schemas != nil {
		c.Schemas, c.schemasFile = read.schemas, path
	}
	c.Notifications = read.notifications
	return c, errors.Join(errs...)
}

// Remember returns c keeping unread, what FromEnv could not read of it:
// Resolve reports it first, beside its own errors. So a Config read in part
// is never run, and whoever resolves it (hookgate.New) reports every error
// at once.
func Remember(c Config, unread error) Config {
	c.unread = unread
	return c
}

// Load is FromEnv with the process's environment, then Resolve: the
// configuration the operator commands that need one run by. Its error holds
// both's, every one.
func Load() (Resolved, error) {
	c, err := FromEnv(os.LookupEnv)
	r, rerr := Remember(c, err).Resolve()
	if rerr != nil {
		return Resolved{}, rerr
	}
	return r, nil
}

// readVars sets c's fields from their variables, and returns what could not
// be read.
func readVars(c *Config, lookup Lookup) []error {
	var errs []error
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("env")
		if name == "" || name == "-" {
			continue
		}
		raw, err := variable(name, f.Tag.Get("secret") == "true", lookup)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if raw == "" {
			continue
		}
		if err := decode(v.Field(i), raw); err != nil {
			// Not the value: it may be a secret.
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if zero := f.Tag.Get("zero"); zero != "" && v.Field(i).IsZero() {
			// Zero is a field's "default" in code; written out, it is a
			// mistake.
			errs = append(errs, fmt.Errorf("%s: %s, got %s", name, zero, strings.TrimSpace(raw)))
		}
	}
	return errs
}

// variable reads name, or for a secret the file its _FILE variant names
// (setting both is an error). Its errors do not show the _FILE variant's
// value: the secret itself may have been put there instead of its file's
// path.
func variable(name string, secret bool, lookup Lookup) (string, error) {
	v, _ := lookup(name)
	if !secret {
		return v, nil
	}
	path, _ := lookup(name + "_FILE")
	if path == "" {
		return v, nil
	}
	if v != "" {
		return "", fmt.Errorf("%s and %s_FILE are both set; set one", name, name)
	}
	b, err := readBounded(path, MaxSecretFileBytes)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: the file it names %w", name, err)
	}
	value := strings.TrimSpace(string(b))
	if value == "" {
		// A secret not mounted yet must not pass for a choice to leave it unset.
		return "", fmt.Errorf("%s_FILE: the file it names is empty", name)
	}
	return value, nil
}

// decode sets field from raw by its type.
func decode(field reflect.Value, raw string) error {
	switch p := field.Addr().Interface().(type) {
	case *SecretList:
		return p.decode(raw)
	case *ByteRate:
		return p.Decode(raw)
	case *time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return errors.New("must be a duration such as 30s, 5m or 72h")
		}
		*p = d
		return nil
	}
	switch field.Kind() {
	case reflect.String:
		field.SetString(raw)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil || field.OverflowInt(n) {
			return errors.New("must be a whole number")
		}
		field.SetInt(n)
	default:
		return fmt.Errorf("no reader for %s", field.Type())
	}
	return nil
}

// The most a file the configuration names may hold. Reading stops past it
// and the file is refused, unread: a _FILE variant naming /dev/zero, or a
// log by mistake, must not fill the memory at start.
const (
	// MaxSecretFileBytes bounds a secret's file (a _FILE variant, of a
	// variable hookgate reads or of one the configuration file names): 64
	// KiB, far more than any secret, URL or key list.
	MaxSecretFileBytes = 64 << 10
	// MaxConfigFileBytes bounds the configuration file GATEWAY_CONFIG_FILE
	// names: 1 MiB, some thousands of routes.
	MaxConfigFileBytes = 1 << 20
)

// readBounded reads the file at path, refusing one that holds more than
// limit bytes. Its errors complete "the file it names ...", and show neither
// the path (a secret may have been put where a path belongs) nor anything
// read.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", withoutPath(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", withoutPath(err))
	}
	if int64(len(b)) > limit {
		size := fmt.Sprintf("%d KiB", limit>>10)
		if limit >= 1<<20 {
			size = fmt.Sprintf("%d MiB", limit>>20)
		}
		return nil, fmt.Errorf("holds more than %s, the most it may; is it the right file? (nothing of it is shown)", size)
	}
	return b, nil
}
