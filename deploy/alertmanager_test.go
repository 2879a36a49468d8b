package deploy

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// amtool returns amtool's path. Without it the test is skipped, except in
// CI (CI set), where the configuration must be checked:
// scripts/ensure-amtool (make test) installs it.
func amtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("amtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "" {
		t.Skip("amtool not found: scripts/ensure-amtool installs it (CI must)")
	}
	t.Fatal("amtool not found and CI is set: scripts/ensure-amtool installs it")
	return ""
}

// The Alertmanager configuration is valid, and routes every shipped alert,
// with the labels its rule gives it, to people: a critical one pages and
// reaches the channel, a warning reaches the channel.
func TestAlertmanagerRoutesEveryShippedAlert(t *testing.T) {
	am := amtool(t)
	const config = "alertmanager/alertmanager.yml"
	if out, err := exec.Command(am, "check-config", config).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "prometheus/alerts.yml", &rules)
	want := map[string]string{"critical": "hookgate-page,hookgate-slack", "warning": "hookgate-slack"}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			receivers, ok := want[r.Labels["severity"]]
			if !ok {
				t.Errorf("%s: severity %q, not one the configuration routes (critical, warning)", r.Alert, r.Labels["severity"])
				continue
			}
			args := []string{"config", "routes", "test", "--config.file=" + config, "--verify.receivers=" + receivers,
				"alertname=" + r.Alert, "job=hookgate", "route=fwd", "provider=github"}
			for k, v := range r.Labels {
				args = append(args, k+"="+v)
			}
			if out, err := exec.Command(am, args...).CombinedOutput(); err != nil {
				t.Errorf("%s (severity %s) is not routed to %s: %v\n%s", r.Alert, r.Labels["severity"], receivers, err,
					strings.TrimSpace(string(out)))
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d alerts in alerts.yml", n)
	}
}
