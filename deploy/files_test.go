package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/internal/config"
)

// gatewayVariables are the environment variables the gateway reads.
var gatewayVariables = config.Variables()

// defaultAddr is GATEWAY_ADDR's default, from config.Config's tags.
func defaultAddr(t *testing.T) string {
	t.Helper()
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		if f := ct.Field(i); f.Tag.Get("env") == "GATEWAY_ADDR" {
			return f.Tag.Get("default")
		}
	}
	t.Fatal("config.Config has no GATEWAY_ADDR")
	return ""
}

// port is the port of a listen address (GATEWAY_ADDR's form, ":8080").
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		t.Fatalf("listen address %q has no port", addr)
	}
	return n
}

// checkEnv checks a deployment's environment for the gateway: every name is
// one the gateway reads, the database is given (a deployment never runs the
// private PostgreSQL), and each _FILE variable names a file that secretFile
// says is mounted from a secret. It returns the gateway's listen port.
func checkEnv(t *testing.T, env map[string]string, secretFile func(path string) error) int {
	t.Helper()
	for name, value := range env {
		if !slices.Contains(gatewayVariables, name) {
			t.Errorf("%s is not a variable the gateway reads", name)
		}
		if strings.HasSuffix(name, "_FILE") && slices.Contains(gatewayVariables, name) {
			if err := secretFile(value); err != nil {
				t.Errorf("%s=%s: %v", name, value, err)
			}
		}
	}
	if env["DATABASE_URL"] == "" && env["DATABASE_URL_FILE"] == "" {
		t.Errorf("neither DATABASE_URL nor DATABASE_URL_FILE is set: the gateways must share one database")
	}
	if env["DATABASE_URL"] != "" {
		t.Errorf("DATABASE_URL holds a password: give it as a file (DATABASE_URL_FILE)")
	}
	if env["GATEWAY_METRICS_ADDR"] != "" {
		t.Errorf("the deployment files expect /metrics on GATEWAY_ADDR")
	}
	addr := env["GATEWAY_ADDR"]
	if addr == "" {
		addr = defaultAddr(t)
	}
	return port(t, addr)
}

// runsServe checks that a container given this entrypoint and command runs
// `gateway serve` in the image the Dockerfile builds.
func runsServe(t *testing.T, what string, entrypoint, command []string) {
	t.Helper()
	img := dockerfile(t)
	if len(entrypoint) == 0 {
		entrypoint = img.entrypoint
	}
	if len(command) == 0 {
		command = img.cmd
	}
	if !slices.Equal(entrypoint, []string{"/gateway"}) || !slices.Equal(command, []string{"serve"}) {
		t.Errorf("%s runs %q %q; want /gateway serve", what, entrypoint, command)
	}
}

// image is what the Dockerfile's final stage says.
type image struct {
	entrypoint, cmd, healthcheck []string
	healthOpts                   string
	expose                       []string
}

func dockerfile(t *testing.T) image {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var img image
	execForm := func(s string) []string {
		var v []string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Errorf("Dockerfile: %q is not the exec form (a JSON array): %v", s, err)
		}
		return v
	}
	for line := range strings.SplitSeq(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			img = image{} // the final stage's count
		case "ENTRYPOINT":
			img.entrypoint = execForm(rest)
		case "CMD":
			img.cmd = execForm(rest)
		case "EXPOSE":
			img.expose = strings.Fields(rest)
		case "HEALTHCHECK":
			opts, cmd, ok := strings.Cut(rest, "CMD ")
			if !ok {
				t.Fatalf("Dockerfile: HEALTHCHECK without CMD: %q", rest)
			}
			img.healthOpts, img.healthcheck = opts, execForm(cmd)
		}
	}
	return img
}

// The image runs gateway serve, exposes GATEWAY_ADDR's default port, and its
// HEALTHCHECK runs gateway healthcheck, with a timeout above the command's own.
func TestDockerfile(t *testing.T) {
	img := dockerfile(t)
	runsServe(t, "the image", nil, nil)
	if want := strconv.Itoa(port(t, defaultAddr(t))); !slices.Equal(img.expose, []string{want}) {
		t.Errorf("EXPOSE %v; want %s, GATEWAY_ADDR's default port", img.expose, want)
	}
	if !slices.Equal(img.healthcheck, []string{"/gateway", "healthcheck"}) {
		t.Errorf("HEALTHCHECK runs %q; want /gateway healthcheck", img.healthcheck)
	}
	for _, opt := range []string{"--interval=", "--timeout=5s", "--start-period="} {
		if !strings.Contains(img.healthOpts, opt) {
			t.Errorf("HEALTHCHECK %q lacks %s", img.healthOpts, opt)
		}
	}
}

// decodeAll decodes every YAML document of a file.
func decodeAll(t *testing.T, path string, each func(doc *yaml.Node)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		each(&doc)
	}
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Secrets  map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
	Volumes map[string]any `yaml:"volumes"`
}

type composeService struct {
	Build       any               `yaml:"build"`
	Image       string            `yaml:"image"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Secrets     []string          `yaml:"secrets"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// composeSecret checks that path is where compose mounts one of the
// service's secrets, read from a file.
func composeSecret(f composeFile, s composeService) func(path string) error {
	return func(path string) error {
		name, ok := strings.CutPrefix(path, "/run/secrets/")
		switch {
		case !ok:
			return errors.New("not under /run/secrets")
		case !slices.Contains(s.Secrets, name):
			return errors.New("the service does not mount that secret")
		case f.Secrets[name].File == "":
			return errors.New("no top-level secret of that name read from a file")
		}
		return nil
	}
}

// docker-compose.yml: the gateway (the repository's image, running serve)
// reads its secrets from files, publishes GATEWAY_ADDR's port, is checked by
// gateway healthcheck, and starts once PostgreSQL 15, on a named volume,
// answers pg_isready.
func TestCompose(t *testing.T) {
	var f composeFile
	decodeAll(t, "../docker-compose.yml", func(doc *yaml.Node) {
		if err := doc.Decode(&f); err != nil {
			t.Fatal(err)
		}
	})
	gw, ok := f.Services["gateway"]
	if !ok {
		t.Fatal("no gateway service")
	}
	if gw.Build != "." {
		t.Errorf("the gateway is built from %v; want the repository's Dockerfile (build: .)", gw.Build)
	}
	runsServe(t, "the gateway service", gw.Entrypoint, gw.Command)
	p := checkEnv(t, gw.Environment, composeSecret(f, gw))
	for _, name := range gw.Secrets {
		if f.Secrets[name].File == "" {
			t.Errorf("the gateway mounts secret %s, which no file gives", name)
		}
	}
	if len(gw.Ports) == 0 {
		t.Error("the gateway publishes no port")
	}
	for _, mapping := range gw.Ports {
		parts := strings.Split(mapping, ":")
		if parts[len(parts)-1] != strconv.Itoa(p) {
			t.Errorf("port %q: the container's side is not GATEWAY_ADDR's port %d", mapping, p)
		}
	}
	if test := gw.Healthcheck.Test; test != nil && !slices.Equal(test, []string{"CMD", "/gateway", "healthcheck"}) {
		t.Errorf("the gateway's healthcheck runs %q; want the image's /gateway healthcheck", test)
	}

	pg, ok := f.Services["postgres"]
	if !ok {
		t.Fatal("no postgres service")
	}
	if pg.Image != "postgres:15" {
		t.Errorf("postgres image %q; want postgres:15", pg.Image)
	}
	if gw.DependsOn["postgres"].Condition != "service_healthy" {
		t.Errorf("the gateway does not wait for a healthy postgres: %+v", gw.DependsOn)
	}
	if len(pg.Healthcheck.Test) == 0 || !strings.Contains(strings.Join(pg.Healthcheck.Test, " "), "pg_isready") {
		t.Errorf("postgres's healthcheck %q does not run pg_isready", pg.Healthcheck.Test)
	}
	named := false
	for _, v := range pg.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		_, isNamed := f.Volumes[src]
		named = named || isNamed && dst == "/var/lib/postgresql/data"
	}
	if !named {
		t.Errorf("postgres's data is not on a named volume: %q", pg.Volumes)
	}
	if pw := pg.Environment["POSTGRES_PASSWORD_FILE"]; pw == "" || composeSecret(f, pg)(pw) != nil || pg.Environment["POSTGRES_PASSWORD"] != "" {
		t.Errorf("postgres's password is not read from a secret file: %v", pg.Environment)
	}
}

// The Kubernetes objects this test reads.
type (
	object struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec       yaml.Node         `yaml:"spec"`
		StringData map[string]string `yaml:"stringData"`
	}
	deployment struct {
		Replicas int           `yaml:"replicas"`
		Selector labelSelector `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	}
	labelSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	podSpec struct {
		SecurityContext struct {
			RunAsNonRoot bool  `yaml:"runAsNonRoot"`
			RunAsUser    int64 `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name   string `yaml:"name"`
			Secret *struct {
				SecretName string `yaml:"secretName"`
			} `yaml:"secret"`
		} `yaml:"volumes"`
	}
	container struct {
		Name    string   `yaml:"name"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Ports   []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom any    `yaml:"valueFrom"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		StartupProbe   *probe `yaml:"startupProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		} `yaml:"securityContext"`
	}
	probe struct {
		HTTPGet *struct {
			Path string    `yaml:"path"`
			Port yaml.Node `yaml:"port"`
		} `yaml:"httpGet"`
	}
	service struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Port       int       `yaml:"port"`
			TargetPort yaml.Node `yaml:"targetPort"`
		} `yaml:"ports"`
	}
	pdb struct {
		Selector labelSelector `yaml:"selector"`
	}
)

// port resolves a probe's or a service's port, a number or a port's name.
func (c container) port(n yaml.Node) int {
	if p, err := strconv.Atoi(n.Value); err == nil {
		return p
	}
	for _, p := range c.Ports {
		if p.Name == n.Value {
			return p.ContainerPort
		}
	}
	return 0
}

// kubernetes reads every object in deploy/kubernetes, by kind.
func kubernetes(t *testing.T) map[string][]object {
	t.Helper()
	paths, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	objects := map[string][]object{}
	for _, path := range paths {
		decodeAll(t, path, func(doc *yaml.Node) {
			var o object
			if err := doc.Decode(&o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			objects[o.Kind] = append(objects[o.Kind], o)
		})
	}
	return objects
}

func decodeSpec[T any](t *testing.T, o object) T {
	t.Helper()
	var spec T
	if err := o.Spec.Decode(&spec); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
	return spec
}

// matches reports whether a selector selects labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// deploy/kubernetes: two gateways running serve on one database, probed on
// /readyz and /healthz at GATEWAY_ADDR's port, their secrets mounted as files
// from the example Secret's keys, non-root, with resources; the Service and
// the PodDisruptionBudget select them.
func TestKubernetes(t *testing.T) {
	objects := kubernetes(t)
	if len(objects["Deployment"]) != 1 {
		t.Fatalf("%d Deployments; want 1", len(objects["Deployment"]))
	}
	d := decodeSpec[deployment](t, objects["Deployment"][0])
	pod := d.Template.Spec
	if d.Replicas != 2 {
		t.Errorf("replicas %d; want 2", d.Replicas)
	}
	if !matches(d.Selector.MatchLabels, d.Template.Metadata.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Selector.MatchLabels, d.Template.Metadata.Labels)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers; want the gateway alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	runsServe(t, "the Deployment's container", c.Command, c.Args)

	secretKeys := map[string][]string{} // the example Secrets' keys, by name
	for _, s := range objects["Secret"] {
		for k, v := range s.StringData {
			secretKeys[s.Metadata.Name] = append(secretKeys[s.Metadata.Name], k)
			if !strings.Contains(v, "REPLACE_ME") {
				t.Errorf("Secret %s's %s is not marked as a placeholder (REPLACE_ME)", s.Metadata.Name, k)
			}
		}
	}
	mounted := func(path string) error {
		for _, m := range c.VolumeMounts {
			key, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
			if !ok {
				continue
			}
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					if !slices.Contains(secretKeys[v.Secret.SecretName], key) {
						return errors.New("the example Secret " + v.Secret.SecretName + " has no key " + key)
					}
					return nil
				}
			}
		}
		return errors.New("not a file of a mounted Secret")
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("%s comes from valueFrom: secrets are mounted as files", e.Name)
		}
		env[e.Name] = e.Value
	}
	p := checkEnv(t, env, mounted)

	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != p {
		t.Errorf("container ports %+v; want GATEWAY_ADDR's %d", c.Ports, p)
	}
	for name, pr := range map[string]struct {
		probe *probe
		paths []string
	}{
		"readinessProbe": {c.ReadinessProbe, []string{"/readyz"}},
		"livenessProbe":  {c.LivenessProbe, []string{"/healthz"}},
		"startupProbe":   {c.StartupProbe, []string{"/healthz", "/readyz", ""}}, // optional
	} {
		if pr.probe == nil && slices.Contains(pr.paths, "") {
			continue
		}
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("no %s over HTTP", name)
			continue
		}
		if g := pr.probe.HTTPGet; !slices.Contains(pr.paths, g.Path) || c.port(g.Port) != p {
			t.Errorf("%s GETs %s on port %q; want %s on %d", name, g.Path, g.Port.Value, pr.paths[0], p)
		}
	}
	if a := d.Template.Metadata.Annotations["prometheus.io/port"]; a != "" && a != strconv.Itoa(p) {
		t.Errorf("prometheus.io/port %s; /metrics is on %d", a, p)
	}

	if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser == 0 {
		t.Errorf("the pod may run as root: %+v", pod.SecurityContext)
	}
	if e := c.SecurityContext.AllowPrivilegeEscalation; e == nil || *e || !c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("the container may escalate privileges or write its image: %+v", c.SecurityContext)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v; want cpu and memory requests and a memory limit", c.Resources)
	}

	if len(objects["Service"]) != 1 {
		t.Fatalf("%d Services; want 1", len(objects["Service"]))
	}
	svc := decodeSpec[service](t, objects["Service"][0])
	if !matches(svc.Selector, d.Template.Metadata.Labels) {
		t.Errorf("the Service's selector %v does not select the gateways %v", svc.Selector, d.Template.Metadata.Labels)
	}
	for _, sp := range svc.Ports {
		if c.port(sp.TargetPort) != p {
			t.Errorf("the Service sends port %d to %q, not GATEWAY_ADDR's %d", sp.Port, sp.TargetPort.Value, p)
		}
	}
	for _, o := range objects["PodDisruptionBudget"] {
		if !matches(decodeSpec[pdb](t, o).Selector.MatchLabels, d.Template.Metadata.Labels) {
			t.Errorf("PodDisruptionBudget %s does not select the gateways", o.Metadata.Name)
		}
	}
}
