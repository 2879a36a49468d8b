// Package deploy holds hookgate's deployment files and no code: the
// Kubernetes manifests (kubernetes/), the Prometheus alerting rules and
// their unit tests (prometheus/), the Grafana dashboard (grafana/). Its Go
// tests check those files, the repository's docker-compose.yml and its
// Dockerfile against the gateway itself: every variable they set is one the
// gateway reads, their ports and probes are the gateway's, and every metric a
// rule or a panel queries is one a gateway exports from its start.
package deploy
