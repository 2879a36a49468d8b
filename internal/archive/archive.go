// Package archive writes days of deliveries to an archive store before
// retention drops them, and brings a day back. An archived (day, provider)
// is one compressed NDJSON object, <provider>/<yyyy-mm-dd>.ndjson.zst: a line
// per receipt received that UTC day (its headers, its body byte for byte in
// base64, its times), the dispatches of its event on the line of the event's
// first receipt of the day; and a manifest beside it,
// <provider>/<yyyy-mm-dd>.manifest.json, {"count","sha256"}: the lines, and
// the SHA-256 of the compressed object. A day counts as archived (and
// retention may drop it) only once the object has been read back from the
// store and matched its manifest.
package archive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/klauspost/compress/zstd"

	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/searchkeys"
	"github.com/hookgate/hookgate/internal/store"
)

// Errors of this package, besides the store's.
var (
	// ErrBadDay means a day that is no yyyy-mm-dd date.
	ErrBadDay = errors.New("bad day")
	// ErrAlreadyPresent means a restore found the day's deliveries stored.
	ErrAlreadyPresent = errors.New("already present")
	// ErrCorrupt means an object does not match its manifest, or what the
	// archive recorded of it, or holds what hookgate did not write.
	ErrCorrupt = errors.New("the archived object does not match its manifest")
	// ErrStore means the archive store failed: unreachable, refusing the
	// credentials, or any other error of its own.
	ErrStore = errors.New("the archive store failed")
)

// ParseDay reads a UTC day, yyyy-mm-dd.
func ParseDay(s string) (time.Time, error) {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil || !providers.StorableTime(d) {
		return time.Time{}, fmt.Errorf("%w: %.40q: a day is yyyy-mm-dd, in the years 1 to 9999", ErrBadDay, s)
	}
	return d, nil
}

// Manifest describes an archived object.
type Manifest struct {
	// Count is how many receipts (lines) the object holds.
	Count int `json:"count"`
	// SHA256 is the hex SHA-256 of the compressed object.
	SHA256 string `json:"sha256"`
}

// objectKey and manifestKey are where a (day, provider) goes.
func objectKey(provider string, day time.Time) string {
	return provider + "/" + day.Format(time.DateOnly) + ".ndjson.zst"
}

func manifestKey(provider string, day time.Time) string {
	return provider + "/" + day.Format(time.DateOnly) + ".manifest.json"
}

// line is one receipt in an archived object.
type line struct {
	Provider    string            `json:"provider"`
	Scope       string            `json:"scope"`
	DeliveryID  string            `json:"delivery_id"`
	Event       string            `json:"event"`
	Entity      string            `json:"entity,omitempty"`
	EventTime   *time.Time        `json:"event_time,omitempty"`
	ContentType string            `json:"content_type"`
	Headers     map[string]string `json:"headers"`
	Body        []byte            `json:"body"` // base64
	BodySHA256  string            `json:"body_sha256"`
	ReceivedAt  time.Time         `json:"received_at"`
	Dispatches  []store.Dispatch  `json:"dispatches,omitempty"`
}

// page is how many receipts an archive reads at a time.
const page = 500

// Day writes the provider's deliveries received on day (a UTC date) to s,
// reads the object back against its manifest, writes the manifest and
// records the day in db (hookgate_archive). A day with no delivery is
// recorded with a count of 0 and written all the same, so that a day's
// absence from the archive never passes for an empty day.
func Day(ctx context.Context, db *pgxpool.Pool, s Store, provider string, day time.Time) (Manifest, error) {
	// The day is recorded as of when its reading began: a dispatch that
	// changes after that is newer than the archive, and retention archives
	// the day again before it drops it.
	began, err := store.DatabaseNow(ctx, db)
	if err != nil {
		return Manifest{}, err
	}
	tmp, err := os.CreateTemp("", "hookgate-archive-*")
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	// A day archived before keeps what retention has dropped of it since:
	// its earlier object's lines of deliveries no longer stored are written
	// again, after what is stored now.
	var earlier func(each func(line) error) error
	if rec, err := store.ArchivedDayOf(ctx, db, provider, day); err != nil {
		return Manifest{}, err
	} else if rec != nil {
		earlier = func(each func(line) error) error {
			return read(ctx, s, objectKey(provider, day), Manifest{Count: rec.Count, SHA256: rec.SHA256}, each)
		}
	}
	m, err := write(ctx, db, tmp, provider, day, earlier)
	if err != nil {
		return Manifest{}, err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	key := objectKey(provider, day)
	if err := s.Put(ctx, key, tmp, size); err != nil {
		return Manifest{}, err
	}
	if err := verify(ctx, s, key, m); err != nil {
		return Manifest{}, err
	}
	mj, _ := json.Marshal(m)
	if err := s.Put(ctx, manifestKey(provider, day), bytes.NewReader(mj), int64(len(mj))); err != nil {
		return Manifest{}, err
	}
	err = store.RecordArchivedDay(ctx, db, store.ArchivedDay{Day: day, Provider: provider, Count: m.Count, SHA256: m.SHA256, Object: key, ArchivedAt: began})
	return m, err
}

// write writes the day's object to w, compressed, and returns its manifest:
// the day's stored receipts, then those of earlier's lines (an earlier
// object of the day, when there is one) that are no longer stored.
func write(ctx context.Context, db *pgxpool.Pool, w io.Writer, provider string, day time.Time, earlier func(each func(line) error) error) (Manifest, error) {
	sum := sha256.New()
	zw, err := zstd.NewWriter(io.MultiWriter(w, sum))
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	enc := json.NewEncoder(zw)
	var m Manifest
	var after *store.DayReceiptCursor
	seen := map[[2]string]bool{}   // the events whose dispatches are written
	stored := map[[3]string]bool{} // the receipts written
	for {
		rs, err := store.DayReceipts(ctx, db, provider, day, after, page)
		if err != nil {
			return Manifest{}, err
		}
		if len(rs) == 0 {
			break
		}
		var ps, ids []string
		for _, r := range rs {
			ps, ids = append(ps, r.Provider), append(ids, r.DeliveryID)
		}
		rows, err := store.DispatchRowsOf(ctx, db, ps, ids)
		if err != nil {
			return Manifest{}, err
		}
		byEvent := map[[2]string][]store.Dispatch{}
		for _, d := range rows {
			k := [2]string{d.Provider, d.DeliveryID}
			byEvent[k] = append(byEvent[k], d.Dispatch)
		}
		for _, r := range rs {
			l := line{Provider: r.Provider, Scope: r.Scope, DeliveryID: r.DeliveryID, Event: r.Event, Entity: r.Entity,
				ContentType: r.ContentType, Headers: r.Headers, Body: r.Body, BodySHA256: hex.EncodeToString(r.BodySHA256), ReceivedAt: r.ReceivedAt}
			if !r.EventTime.IsZero() {
				l.EventTime = &r.EventTime
			}
			if k := [2]string{r.Provider, r.DeliveryID}; !seen[k] {
				seen[k], l.Dispatches = true, byEvent[k]
			}
			if err := enc.Encode(l); err != nil {
				return Manifest{}, fmt.Errorf("archive: %w", err)
			}
			stored[[3]string{r.Provider, r.Scope, r.DeliveryID}] = true
			m.Count++
		}
		last := rs[len(rs)-1]
		after = &store.DayReceiptCursor{ReceivedAt: last.ReceivedAt, Scope: last.Scope, DeliveryID: last.DeliveryID}
	}
	if earlier != nil {
		err := earlier(func(l line) error {
			if stored[[3]string{l.Provider, l.Scope, l.DeliveryID}] {
				return nil
			}
			m.Count++
			return enc.Encode(l)
		})
		if err != nil {
			return Manifest{}, fmt.Errorf("archive: the day's earlier object: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	m.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return m, nil
}

// verify reads the object key back from s and checks it against m: its
// SHA-256, each line's body against its hash, the lines' count.
func verify(ctx context.Context, s Store, key string, m Manifest) error {
	return read(ctx, s, key, m, func(line) error { return nil })
}

// read reads the object key from s, checks its SHA-256 against m, and then
// passes each of its lines to each.
func read(ctx context.Context, s Store, key string, m Manifest, each func(line) error) error {
	tmp, err := os.CreateTemp("", "hookgate-restore-*")
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	obj, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	sum := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, sum), obj)
	obj.Close()
	if err != nil {
		return fmt.Errorf("archive: read %s: %w", key, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != m.SHA256 {
		return fmt.Errorf("%w: %s has SHA-256 %s, its manifest says %s", ErrCorrupt, key, got, m.SHA256)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	zr, err := zstd.NewReader(tmp)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, key, err)
	}
	defer zr.Close()
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a line holds a body of up to 25 MiB, in base64
	lines := 0
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("%w: %s, line %d: %w", ErrCorrupt, key, lines+1, err)
		}
		if sum := sha256.Sum256(l.Body); hex.EncodeToString(sum[:]) != l.BodySHA256 {
			return fmt.Errorf("%w: %s, line %d: the body does not hash to its body_sha256", ErrCorrupt, key, lines+1)
		}
		lines++
		if err := each(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, key, err)
	}
	if lines != m.Count {
		return fmt.Errorf("%w: %s holds %d lines, its manifest says %d", ErrCorrupt, key, lines, m.Count)
	}
	return nil
}

// Restore brings the archived deliveries of day of each of providers back
// into db, from s, in one transaction: all of them or none. Each object is
// checked against its manifest, and the manifest against what the archive
// recorded (hookgate_archive), each line's body against its hash. Their
// receipts are kept retention from now; their search keys are read again
// with keys; their dispatches come back as history (one still in progress
// when archived comes back cancelled). It returns how many receipts it
// restored of each provider. A day of which any provider's deliveries are
// stored is ErrAlreadyPresent, checked first; a provider's day never
// archived, ErrNoObject.
func Restore(ctx context.Context, db *pgxpool.Pool, s Store, keys *searchkeys.Set, providers []string, day time.Time, retention time.Duration) ([]int, error) {
	counts := make([]int, len(providers))
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, p := range providers {
			present, err := store.DayPresent(ctx, tx, p, day)
			if err != nil {
				return err
			}
			if present {
				return fmt.Errorf("%w: %s's deliveries of %s are stored", ErrAlreadyPresent, p, day.Format(time.DateOnly))
			}
		}
		for i, p := range providers {
			n, err := restoreTx(ctx, tx, s, keys, p, day, retention)
			if err != nil {
				return err
			}
			counts[i] = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// restoreTx restores one provider's day in tx, a page at a time.
func restoreTx(ctx context.Context, tx pgx.Tx, s Store, keys *searchkeys.Set, provider string, day time.Time, retention time.Duration) (int, error) {
	mr, err := s.Get(ctx, manifestKey(provider, day))
	if err != nil {
		return 0, err
	}
	var m Manifest
	err = json.NewDecoder(io.LimitReader(mr, 1<<20)).Decode(&m)
	mr.Close()
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrCorrupt, manifestKey(provider, day), err)
	}
	recorded, err := store.ArchivedDayOf(ctx, tx, provider, day)
	if err != nil {
		return 0, err
	}
	if recorded != nil && recorded.SHA256 != m.SHA256 {
		return 0, fmt.Errorf("%w: %s says SHA-256 %s, and the archive recorded %s when it wrote the day", ErrCorrupt,
			manifestKey(provider, day), m.SHA256, recorded.SHA256)
	}
	var n int
	var rs []store.RestoredReceipt
	var ds []store.EventDispatch
	flush := func() error {
		done, err := store.RestoreTx(ctx, tx, rs, ds, retention)
		n, rs, ds = n+done, rs[:0], ds[:0]
		return err
	}
	err = read(ctx, s, objectKey(provider, day), m, func(l line) error {
		r, lds, err := restored(l, provider, day, keys)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCorrupt, objectKey(provider, day), err)
		}
		rs, ds = append(rs, r), append(ds, lds...)
		if len(rs) == page {
			return flush()
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, flush()
}

// restored is an archived line as a restore inserts it: its receipt, with
// its search keys read again, and its dispatches, as history (one still in
// progress when archived comes back cancelled).
func restored(l line, provider string, day time.Time, keys *searchkeys.Set) (store.RestoredReceipt, []store.EventDispatch, error) {
	sum, err := hex.DecodeString(l.BodySHA256)
	if err != nil || len(sum) != sha256.Size || l.Provider != provider || !providers.ValidID(l.DeliveryID) ||
		l.ReceivedAt.Before(day) || !l.ReceivedAt.Before(day.AddDate(0, 0, 1)) {
		return store.RestoredReceipt{}, nil, errors.New("a line hookgate did not write")
	}
	r := store.RestoredReceipt{Receipt: store.Receipt{Provider: l.Provider, Scope: l.Scope, DeliveryID: l.DeliveryID, Event: l.Event,
		Entity: l.Entity, ContentType: l.ContentType, Headers: l.Headers, Body: l.Body, BodySHA256: sum, ReceivedAt: l.ReceivedAt}}
	if l.EventTime != nil {
		r.EventTime = *l.EventTime
	}
	for _, k := range keys.Of(l.Provider, l.ContentType, l.Body) {
		r.Keys = append(r.Keys, store.KeyValue{Name: k.Name, Value: k.Value})
	}
	var ds []store.EventDispatch
	for _, d := range l.Dispatches {
		if dispatch.IsInProgress(d.State) {
			d.State = dispatch.Cancelled
		}
		ds = append(ds, store.EventDispatch{Provider: l.Provider, DeliveryID: l.DeliveryID, Dispatch: d})
	}
	return r, ds, nil
}
