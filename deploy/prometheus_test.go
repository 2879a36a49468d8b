package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// promtool returns promtool's path. Without it the test is skipped, except
// in CI (CI set), where the rules must be tested: scripts/ensure-promtool
// (make test) installs it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "" {
		t.Skip("promtool not found: scripts/ensure-promtool installs it (CI must)")
	}
	t.Fatal("promtool not found and CI is set: scripts/ensure-promtool installs it")
	return ""
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Errorf("promtool %s: %v", strings.Join(args, " "), err)
	}
}

// ruleFile is a Prometheus rules file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alertRules(t *testing.T) ruleFile {
	t.Helper()
	var rules ruleFile
	readYAML(t, "prometheus/alerts.yml", &rules)
	return rules
}

// The alerting rules are valid and their unit tests pass.
func TestAlertRules(t *testing.T) {
	runPromtool(t, "check", "rules", "--lint-fatal", "prometheus/alerts.yml")
	runPromtool(t, "test", "rules", "prometheus/alerts_test.yml")
}

// Every alert's unit tests show it firing, and not firing.
func TestEveryAlertTestedBothWays(t *testing.T) {
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "prometheus/alerts_test.yml", &tests)
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range alertRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !firing[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: shown firing %v, shown not firing %v; want both", r.Alert, firing[r.Alert], quiet[r.Alert])
			}
		}
	}
	if n == 0 {
		t.Fatal("no alert in alerts.yml")
	}
}

// dashboard is the Grafana dashboard's queries.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("grafana/hookgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/hookgate.json: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// grafanaVariables are the dashboard's variables and what stands for them in
// a query promtool can check.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$job", ".+")

// The dashboard's queries are PromQL: promtool checks them as recording rules.
func TestDashboardQueries(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no query")
	}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: grafanaVariables.Replace(e)})
	}
	// JSON is YAML.
	b, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	path := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", "--lint-fatal", path)
}

// selector is a metric a query reads and the label values it names.
type selector struct {
	metric string
	labels map[string][]string // label: any of these values
}

var (
	metricRe  = regexp.MustCompile(`\b((?:hookgate|go|process)_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	matcherRe = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	wordsRe   = regexp.MustCompile(`^[a-zA-Z0-9_]+(\|[a-zA-Z0-9_]+)*$`)
)

// selectors finds the metrics an expression reads, with the label values
// its = and =~ matchers need (a regular expression that is a plain
// alternation needs each value; job and Grafana's variables are the
// deployment's own).
func selectors(expr string) []selector {
	var out []selector
	for _, m := range metricRe.FindAllStringSubmatch(expr, -1) {
		s := selector{metric: m[1], labels: map[string][]string{}}
		for _, lm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			name, op, value := lm[1], lm[2], lm[3]
			if name == "job" || name == "instance" || strings.Contains(value, "$") {
				continue
			}
			switch {
			case op == "=":
				s.labels[name] = []string{value}
			case op == "=~" && wordsRe.MatchString(value):
				s.labels[name] = strings.Split(value, "|")
			}
		}
		out = append(out, s)
	}
	return out
}

// series parses Prometheus text: each series' name and labels.
func series(text string) map[string][]map[string]string {
	labelRe := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	out := map[string][]map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		if i := strings.IndexByte(name, ' '); i >= 0 {
			name, rest = name[:i], ""
		}
		labels := map[string]string{}
		if end := strings.LastIndexByte(rest, '}'); end >= 0 {
			for _, l := range labelRe.FindAllStringSubmatch(rest[:end], -1) {
				labels[l[1]] = l[2]
			}
		}
		out[name] = append(out[name], labels)
	}
	return out
}

// missing says what a selector needs that the series lack: the metric, or a
// label value.
func (s selector) missing(exported map[string][]map[string]string) []string {
	all, ok := exported[s.metric]
	if !ok {
		return []string{s.metric}
	}
	var out []string
	for name, values := range s.labels {
		for _, v := range values {
			if !slices.ContainsFunc(all, func(l map[string]string) bool { return l[name] == v }) {
				out = append(out, s.metric+"{"+name+`="`+v+`"}`)
			}
		}
	}
	return out
}

// queried are the selectors of every alerting rule and dashboard query.
func queried(t *testing.T) map[string][]selector {
	t.Helper()
	out := map[string][]selector{}
	for _, g := range alertRules(t).Groups {
		for _, r := range g.Rules {
			out["rule "+r.Alert+r.Record] = selectors(r.Expr)
		}
	}
	for _, e := range dashboardExprs(t) {
		out["dashboard query "+e] = selectors(e)
	}
	return out
}

// The selectors are found in queries as a reader sees them.
func TestSelectors(t *testing.T) {
	got := selectors(`max by (route) (hookgate_route_circuit{job=~"$job", state=~"open|probing"}) unless hookgate_route_paused == 1 and rate(hookgate_x_total{outcome="a",route!="b",p=~"c.*"}[5m])`)
	want := []selector{
		{"hookgate_route_circuit", map[string][]string{"state": {"open", "probing"}}},
		{"hookgate_route_paused", map[string][]string{}},
		{"hookgate_x_total", map[string][]string{"outcome": {"a"}}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	for i := range want {
		if got[i].metric != want[i].metric || !maps(got[i].labels, want[i].labels) {
			t.Errorf("got %v; want %v", got[i], want[i])
		}
	}
	exported := series("# HELP x\nhookgate_route_circuit{route=\"ci\",state=\"open\"} 0\nhookgate_route_paused 0\n")
	if m := got[0].missing(exported); !slices.Equal(m, []string{`hookgate_route_circuit{state="probing"}`}) {
		t.Errorf("missing %v", m)
	}
	if m := got[1].missing(exported); m != nil {
		t.Errorf("missing %v", m)
	}
	if m := got[2].missing(exported); !slices.Equal(m, []string{"hookgate_x_total"}) {
		t.Errorf("missing %v", m)
	}
}

func maps(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
