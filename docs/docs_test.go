package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/config"
)

// cliOnly are the variables the configuration page documents that the
// gateway itself never reads: the operator commands read them.
var cliOnly = []string{cli.URLVariable, cli.TokenVariable, cli.ListenSecretVariable}

// The configuration page's variable tables (those whose first column is
// "variable") list exactly the variables the gateway reads, config.Variables,
// plus the CLI's own, each once, with a meaning and a default; a variable whose
// Config field declares a default shows that default; a CLI-only variable says
// so.
func TestConfigurationListsEveryVariable(t *testing.T) {
	rows := variableRows(t, "configuration.md")
	documented := map[string]row{}
	for _, r := range rows {
		for _, name := range r.names {
			if prev, ok := documented[name]; ok {
				t.Errorf("configuration.md: %s is listed twice (lines %d and %d)", name, prev.line, r.line)
			}
			documented[name] = r
		}
		if len(r.cells) < 3 || strings.TrimSpace(r.cells[1]) == "" || strings.TrimSpace(r.cells[2]) == "" {
			t.Errorf("configuration.md:%d: %v needs a meaning and a default", r.line, r.names)
		}
	}

	want := append(config.Variables(), cliOnly...)
	for _, name := range want {
		if _, ok := documented[name]; !ok {
			t.Errorf("configuration.md does not list %s, which the gateway reads: add a row to a variable table", name)
		}
	}
	for name, r := range documented {
		if !slices.Contains(want, name) {
			t.Errorf("configuration.md:%d lists %s, which neither the gateway nor the CLI reads: remove it, or read it in config.Config", r.line, name)
		}
	}
	for _, name := range cliOnly {
		if r, ok := documented[name]; ok && !strings.Contains(r.text, "CLI only") {
			t.Errorf("configuration.md:%d: %s must say it is read by the CLI only", r.line, name)
		}
	}

	for name, def := range declaredDefaults() {
		r, ok := documented[name]
		if !ok || len(r.cells) < 3 {
			continue // reported above
		}
		if !strings.Contains(r.cells[2], "`"+def+"`") {
			t.Errorf("configuration.md:%d: %s's default is `%s` (config.Config), but the page says %q", r.line, name, def, strings.TrimSpace(r.cells[2]))
		}
	}
}

// declaredDefaults are the defaults config.Config declares, by variable.
func declaredDefaults() map[string]string {
	defaults := map[string]string{}
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		name, def := f.Tag.Get("env"), f.Tag.Get("default")
		if name != "" && def != "" {
			defaults[name] = def
		}
	}
	return defaults
}

// row is one data row of a variable table.
type row struct {
	line  int
	cells []string
	names []string // the variables its first cell names
	text  string
}

var variableName = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")

// variableRows returns the data rows of every table in file whose first
// header cell is "variable".
func variableRows(t *testing.T, file string) []row {
	t.Helper()
	var rows []row
	inTable, isVariables := false, false
	for n, line := range lines(t, file) {
		if line.fenced || !strings.HasPrefix(strings.TrimSpace(line.text), "|") {
			inTable = false
			continue
		}
		cells := splitRow(line.text)
		if !inTable {
			// A header row.
			inTable = true
			isVariables = len(cells) > 0 && strings.EqualFold(strings.TrimSpace(cells[0]), "variable")
			continue
		}
		if !isVariables || separatorRow(cells) {
			continue
		}
		r := row{line: n + 1, cells: cells, text: line.text}
		for _, m := range variableName.FindAllStringSubmatch(cells[0], -1) {
			r.names = append(r.names, m[1])
		}
		if len(r.names) == 0 {
			t.Errorf("%s:%d: a row of a variable table names no variable in its first cell", file, n+1)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no table whose first column is \"variable\"", file)
	}
	return rows
}

// splitRow splits a Markdown table row into its cells; a | inside a code
// span does not separate cells.
func splitRow(s string) []string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "|")
	s = strings.TrimSuffix(s, "|")
	var cells []string
	var cell strings.Builder
	inCode := false
	for _, r := range s {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '|' && !inCode:
			cells = append(cells, cell.String())
			cell.Reset()
			continue
		}
		cell.WriteRune(r)
	}
	return append(cells, cell.String())
}

func separatorRow(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(strings.TrimSpace(c), ":-") != "" {
			return false
		}
	}
	return true
}

// line is one line of a Markdown file, and whether it is inside a fenced
// code block (or is the fence itself).
type line struct {
	text   string
	fenced bool
}

func lines(t *testing.T, file string) []line {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []line
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		text := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(text), "```") {
			fenced = !fenced
			out = append(out, line{text: text, fenced: true})
			continue
		}
		out = append(out, line{text: text, fenced: fenced})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The documentation that links: the README and the changelog at the
// repository's root, and every page here.
func documents(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join("..", "README.md"), filepath.Join("..", "CHANGELOG.md")}, pages...)
}

var (
	link     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Every relative link (and image) in the README, the changelog and the pages
// here leads to a file or directory of the repository, and a link to a
// heading (#...) to one that exists; none leads outside the repository. The
// repository stands alone: no page points at files beside it.
func TestLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	anchorsOf := map[string]map[string]bool{}
	anchors := func(file string) map[string]bool {
		if a, ok := anchorsOf[file]; ok {
			return a
		}
		a := headingAnchors(t, file)
		anchorsOf[file] = a
		return a
	}
	for _, doc := range documents(t) {
		for n, l := range lines(t, doc) {
			for _, outside := range []string{"../shared", "CONTRACT.md", "PRINCIPLES.md", "STYLE.md"} {
				if strings.Contains(l.text, outside) {
					t.Errorf("%s:%d mentions %s, which is not part of the repository", doc, n+1, outside)
				}
			}
			if l.fenced {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.text, ""), -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue // http(s), mailto: not ours to check
				}
				path, fragment, _ := strings.Cut(target, "#")
				file := doc
				if path != "" {
					file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
					abs, err := filepath.Abs(file)
					if err != nil {
						t.Fatal(err)
					}
					if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
						t.Errorf("%s:%d: %s leads outside the repository", doc, n+1, target)
						continue
					}
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s:%d: %s: no such file in the repository", doc, n+1, target)
						continue
					}
				}
				if fragment == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d: %s: a heading link into a file that is not Markdown", doc, n+1, target)
					continue
				}
				if !anchors(file)[fragment] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", doc, n+1, target, file, fragment)
				}
			}
		}
	}
}

// headingAnchors are the anchors GitHub makes of a Markdown file's headings:
// lower case, spaces to hyphens, punctuation but hyphens and underscores
// dropped, and -1, -2, ... for a repeated one.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range lines(t, file) {
		if l.fenced {
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(l.text, "#"), " ")
		if !ok || !strings.HasPrefix(l.text, "#") {
			continue
		}
		anchor := slug(text)
		if n := seen[anchor]; n > 0 {
			anchors[anchor+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[anchor] = true
		}
		seen[anchor]++
	}
	return anchors
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The anchors the tests compute are GitHub's.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Running several gateways": "running-several-gateways",
		"Kind `hmac`":              "kind-hmac",
		"Sources: more senders than GitHub and Stripe":       "sources-more-senders-than-github-and-stripe",
		"2026-12-02 22:31 UTC: verify and parse, under load": "2026-12-02-2231-utc-verify-and-parse-under-load",
		"Routes with queues of their own (issue 11)":         "routes-with-queues-of-their-own-issue-11",
		"What a handler must know":                           "what-a-handler-must-know",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
