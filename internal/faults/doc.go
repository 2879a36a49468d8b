// Package faults proves hookgate's promises under faults. Its test starts a
// PostgreSQL server, two gateway processes (the real binary) on one database, a
// forward target and a sender that behaves like GitHub and Stripe (it retries
// every non-2xx and every connection error until it gets a 2xx, and sends some
// deliveries twice on purpose). While traffic flows, good and bad, it kills
// gateway processes with SIGKILL and restarts PostgreSQL; afterwards it checks
// and prints, as figures, that every acknowledged delivery is stored, every
// dispatch reached its target or was superseded, builtin effects happened
// exactly once, no target saw an older event after a newer one, no dispatch is
// stuck, and no bad request was stored.
//
//	make faults                                   # a few minutes
//	go test -v -run TestFaults ./internal/faults  # the short form make test runs
//
// HOOKGATE_FAULTS_DURATION sets how long traffic and faults last (default 15s).
//
// Its gateway processes are Gateway, built by Build: other tests that run
// the binary as an operator does (internal/upgrade) use them too.
package faults
