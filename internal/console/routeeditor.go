package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/store"
)

// editorData is the route editor: a route the database owns, as the
// configuration file has it, in JSON.
type editorData struct {
	// New says the route is being made: its name is asked for.
	New  bool
	Name string
	// Spec is the route's JSON, without its name, as shown or as sent back.
	Spec string
}

// newRouteSpec is what the editor offers for a new route.
const newRouteSpec = `{
  "match": ["github:push"],
  "target": "https://ci.internal.example/hooks",
  "filter": "payload.ref == \"refs/heads/main\""
}`

// editable answers 409 when the configuration owns the routes, and reports
// whether the database does.
func (c *Console) editable(w http.ResponseWriter, r *http.Request) bool {
	if c.CheckRoute == nil {
		c.fail(w, r, http.StatusConflict, "The configuration owns the routes (GATEWAY_ROUTES_FROM=config): change the configuration file and restart, "+
			"or set GATEWAY_ROUTES_FROM=database to edit them here.")
		return false
	}
	return true
}

// handleRouteEditor shows the editor of a route, or of a new one.
func (c *Console) handleRouteEditor(w http.ResponseWriter, r *http.Request) {
	if !c.editable(w, r) {
		return
	}
	name := chi.URLParam(r, "name")
	if name == "" {
		c.renderEditor(w, r, http.StatusOK, editorData{New: true, Spec: newRouteSpec}, "")
		return
	}
	if fanout.CheckName(name) != nil {
		c.fail(w, r, http.StatusNotFound, "No route of that name is stored.")
		return
	}
	spec, found, err := store.LiveRouteSpec(r.Context(), c.Pool, name)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	if !found {
		c.fail(w, r, http.StatusNotFound, "No route "+name+" is stored: routes made here are edited here.")
		return
	}
	c.renderEditor(w, r, http.StatusOK, editorData{Name: name, Spec: shown(spec)}, "")
}

// shown is a stored spec as the editor shows it: indented, without its name
// (the page's).
func shown(spec []byte) string {
	var m map[string]any
	if json.Unmarshal(spec, &m) != nil {
		return string(spec)
	}
	delete(m, "name")
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(m)
	return strings.TrimSpace(b.String())
}

func (c *Console) renderEditor(w http.ResponseWriter, r *http.Request, status int, d editorData, problem string) {
	title := "Route " + d.Name
	if d.New {
		title = "New route"
	}
	c.render(w, r, status, "routeeditor", page{Title: title, Nav: "routes", Problem: problem, Data: d})
}

// handleSaveRoute checks the editor's route as the configuration's are
// checked, and stores it; a route that does not check comes back in the
// editor as it was typed, with what is wrong (its filter's CEL error with
// its line and column) above it.
func (c *Console) handleSaveRoute(w http.ResponseWriter, r *http.Request) {
	if !c.editable(w, r) {
		return
	}
	d := editorData{Name: chi.URLParam(r, "name"), Spec: r.PostForm.Get("spec")}
	if d.Name == "" {
		d.New, d.Name = true, strings.TrimSpace(r.PostForm.Get("name"))
	}
	spec, err := c.CheckRoute(d.Name, []byte(d.Spec))
	if err == nil && d.New {
		// A new route's name must be new: the editor of the one there
		// replaces it, knowingly.
		if _, exists, lerr := store.LiveRouteSpec(r.Context(), c.Pool, d.Name); lerr != nil {
			err = lerr
		} else if exists {
			c.renderEditor(w, r, http.StatusConflict, d, "A route named "+d.Name+" exists: edit it from the routes page, or choose another name.")
			return
		}
	}
	if errors.Is(err, config.ErrBadLiveRoute) {
		c.renderEditor(w, r, http.StatusBadRequest, d, errtext.Clean(err.Error()))
		return
	}
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	created, err := routes.Put(r.Context(), c.Pool, d.Name, spec, c.actor(r))
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	if c.RoutesChanged != nil {
		c.RoutesChanged()
	}
	done := "saved"
	if created {
		done = "made"
	}
	http.Redirect(w, r, "/admin/ui/routes?"+url.Values{"done": {done}, "route": {d.Name}}.Encode(), http.StatusSeeOther)
}

// handleDeleteRoute deletes a route from its editor.
func (c *Console) handleDeleteRoute(w http.ResponseWriter, r *http.Request) {
	if !c.editable(w, r) {
		return
	}
	name := chi.URLParam(r, "name")
	if _, err := routes.Delete(r.Context(), c.Pool, name, c.actor(r)); err != nil {
		c.failWith(w, r, err)
		return
	}
	if c.RoutesChanged != nil {
		c.RoutesChanged()
	}
	http.Redirect(w, r, "/admin/ui/routes?"+url.Values{"done": {"deleted"}, "route": {name}}.Encode(), http.StatusSeeOther)
}
