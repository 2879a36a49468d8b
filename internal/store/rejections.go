package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The ring of the newest rejected ingest requests (hookgate_rejections):
// a fixed number of slots, each rejection taking the next in turn.

// Rejection is one rejected ingest request.
type Rejection struct {
	At          time.Time `json:"at"`
	Provider    string    `json:"provider"`
	Status      int       `json:"status"`
	Reason      string    `json:"reason"`
	RemoteAddr  string    `json:"remote_addr"`
	HeaderNames []string  `json:"header_names"`
}

// InsertRejections writes rejections into the ring of slots slots in one
// statement, oldest first, each taking the next slot (the next value of
// hookgate_rejection_seq, modulo slots) and replacing what was there.
func InsertRejections(ctx context.Context, db Querier, batch []Rejection, slots int) error {
	at := make([]time.Time, len(batch))
	provider := make([]string, len(batch))
	status := make([]int32, len(batch))
	reason := make([]string, len(batch))
	remote := make([]string, len(batch))
	headers := make([]string, len(batch)) // each a JSON array: text[][] cannot be ragged
	for i, b := range batch {
		at[i], provider[i], status[i], reason[i], remote[i] = b.At, b.Provider, int32(b.Status), b.Reason, b.RemoteAddr
		headers[i] = headerNamesJSON(b.HeaderNames)
	}
	_, err := db.Exec(ctx, `
		INSERT INTO hookgate_rejections AS x (slot, seq, at, provider, status, reason, remote_addr, header_names)
		SELECT s.seq % $7, s.seq, s.at, s.provider, s.status, s.reason, s.remote_addr,
			ARRAY(SELECT jsonb_array_elements_text(s.headers::jsonb))
		FROM (
			SELECT nextval('hookgate_rejection_seq') AS seq, t.*
			FROM unnest($1::timestamptz[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[])
				WITH ORDINALITY AS t(at, provider, status, reason, remote_addr, headers, ord)
			ORDER BY t.ord
		) s
		ON CONFLICT (slot) DO UPDATE SET seq = excluded.seq, at = excluded.at, provider = excluded.provider,
			status = excluded.status, reason = excluded.reason, remote_addr = excluded.remote_addr,
			header_names = excluded.header_names`,
		at, provider, status, reason, remote, headers, slots)
	if err != nil {
		return fmt.Errorf("insert rejections: %w", err)
	}
	return nil
}

// headerNamesJSON is the header names as a JSON array, [] for none.
func headerNamesJSON(ss []string) string {
	if ss == nil {
		ss = []string{}
	}
	b, _ := json.Marshal(ss)
	return string(b)
}

// Rejections returns the rejections in the ring, newest first.
func Rejections(ctx context.Context, db Querier) ([]Rejection, error) {
	rows, err := db.Query(ctx, `
		SELECT at, provider, status, reason, remote_addr, header_names FROM hookgate_rejections ORDER BY seq DESC`)
	if err != nil {
		return nil, fmt.Errorf("list rejections: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Rejection, error) {
		var x Rejection
		err := row.Scan(&x.At, &x.Provider, &x.Status, &x.Reason, &x.RemoteAddr, &x.HeaderNames)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list rejections: %w", err)
	}
	return list, nil
}
