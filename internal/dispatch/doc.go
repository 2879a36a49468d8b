// Package dispatch carries each stored event to the routes that take it,
// exactly once per route and in order per entity. It holds the dispatch
// vocabulary (Args, Kind, the states a dispatch goes through), the dispatch
// rows of hookgate_dispatches with their River jobs (Enqueuer), the Worker
// that runs a route's target (a builtin handler inside the dispatch's
// transaction, or a forward under the entity's lease and watermark), the
// reconcile job that records what River decided without the worker, and the
// River client that works it all.
//
// A dispatch row is keyed by (provider, delivery id, route, generation) and is
// inserted in the same transaction as the receipt that implies it, together
// with its River job (River's transactional insert is the outbox). Its primary
// key is the inbox: another hook's copy of an event adds no second dispatch.
//
// Package replay makes new generations of dispatches; package retention
// deletes those of events whose receipts expired, through this package's
// functions.
package dispatch
