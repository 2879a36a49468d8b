// Package jobs owns everything River does for hookgate: the schema migrations
// (River's and hookgate's), the route table, the dispatch rows that record each
// route's handling of each event, the River jobs that carry them out, and the
// builtin Go handlers.
//
// A dispatch row is keyed by (provider, delivery id, route, generation) and is
// inserted in the same transaction as the receipt that implies it, together
// with its River job (River's transactional insert is the outbox). Its primary
// key is the inbox: another hook's copy of an event adds no second dispatch.
package jobs
