package fanout

import (
	"slices"
	"sync/atomic"
)

// Source gives the fan-out table in force: a Table is its own, fixed; a
// *Live changes while the gateway runs (routes edited through the API).
// Whoever decides from it reads Routes once per decision, so that one
// decision sees one table.
type Source interface {
	// Routes is the table in force now.
	Routes() Table
	// Route is the route named name: in force, or retired (removed while
	// dispatches of it may still wait: they finish as it was).
	Route(name string) (Route, bool)
	// Known is the routes in force, then those retired.
	Known() Table
}

// Routes implements Source: the table itself.
func (rs Table) Routes() Table { return rs }

// Route implements Source: ByName.
func (rs Table) Route(name string) (Route, bool) { return rs.ByName(name) }

// Known implements Source: the table itself.
func (rs Table) Known() Table { return rs }

// Live is a table that changes while the gateway runs; its zero value
// holds no routes. It is safe for concurrent use.
type Live struct {
	p atomic.Pointer[liveTable]
}

type liveTable struct {
	table   Table
	retired Table // routes removed from an earlier table, newest first
}

// NewLive returns a Live holding t, and retired, routes no longer in force
// whose dispatches may still wait.
func NewLive(t, retired Table) *Live {
	l := &Live{}
	l.p.Store(&liveTable{table: t, retired: retired})
	return l
}

// Routes implements Source.
func (l *Live) Routes() Table {
	if lt := l.p.Load(); lt != nil {
		return lt.table
	}
	return nil
}

// Route implements Source: a route in force, else one retired.
func (l *Live) Route(name string) (Route, bool) {
	lt := l.p.Load()
	if lt == nil {
		return Route{}, false
	}
	if r, ok := lt.table.ByName(name); ok {
		return r, true
	}
	return lt.retired.ByName(name)
}

// Known implements Source.
func (l *Live) Known() Table {
	lt := l.p.Load()
	if lt == nil {
		return nil
	}
	return append(append(Table{}, lt.table...), lt.retired...)
}

// Set puts t in force, with retired. The routes of the table before that t
// lacks are retired too: Route still finds them, for the dispatches they
// left.
func (l *Live) Set(t, retired Table) {
	gone := retired
	if old := l.p.Load(); old != nil {
		gone = slices.Concat(retired, old.table, old.retired)
	}
	next := &liveTable{table: t}
	for _, r := range gone {
		_, kept := t.ByName(r.Name)
		_, already := next.retired.ByName(r.Name)
		if !kept && !already {
			next.retired = append(next.retired, r)
		}
	}
	l.p.Store(next)
}
