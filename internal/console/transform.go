package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/transform"
)

// transformData is the transformation editor: a route's transformation, or
// a text being written, tried on a stored delivery.
type transformData struct {
	Routes                     []string
	Route, Provider, Delivery  string
	Providers                  []string
	Text                       string
	Tried                      bool
	Body, ContentType, Path    string
	Headers                    map[string]string
	Skip                       bool
	Failed                     string
	Line, Column               int
	CanSave, RouteHasTransform bool
}

// handleTransform shows the editor (GET: the route's own transformation,
// tried when a delivery is named) and tries what was written (POST), on a
// stored delivery; it changes nothing. Saving is the route editor's.
func (c *Console) handleTransform(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := transformData{Route: q.Get("route"), Provider: q.Get("provider"), Delivery: q.Get("delivery_id"), Providers: c.Providers.Names(),
		CanSave: c.CheckRoute != nil}
	table := c.Routes.Routes()
	for _, rt := range table {
		d.Routes = append(d.Routes, rt.Name)
	}
	if r.Method == http.MethodPost {
		d.Route, d.Provider, d.Delivery, d.Text = r.PostForm.Get("route"), r.PostForm.Get("provider"), r.PostForm.Get("delivery_id"), r.PostForm.Get("transform")
	}
	if d.Route == "" && len(d.Routes) > 0 {
		d.Route = d.Routes[0]
	}
	route, ok := table.ByName(d.Route)
	if d.Route != "" && !ok {
		c.fail(w, r, http.StatusNotFound, "No route "+d.Route+".")
		return
	}
	d.RouteHasTransform = route.Transform != nil
	if r.Method == http.MethodGet && route.Transform != nil {
		d.Text = route.Transform.String()
	}
	if d.Provider == "" || d.Delivery == "" || !slices.Contains(d.Routes, d.Route) {
		c.render(w, r, http.StatusOK, "transform", page{Title: "Transformation", Nav: "routes", Data: d})
		return
	}
	d.Tried = true
	status := http.StatusOK
	if err := c.try(r, &d); err != nil {
		if errors.Is(err, deliveries.ErrNotFound) {
			status, d.Tried, d.Failed = http.StatusNotFound, false, "No stored delivery "+d.Provider+" "+d.Delivery+"."
		} else if errors.Is(err, transform.ErrInvalid) || errors.Is(err, transform.ErrFailed) {
			status, d.Failed = http.StatusUnprocessableEntity, errtext.Clean(err.Error())
			if p := transform.PositionOf(err); p != nil {
				d.Line, d.Column = p.Line, p.Column
			}
		} else {
			c.serverError(w, r, err)
			return
		}
	}
	c.render(w, r, status, "transform", page{Title: "Transformation", Nav: "routes", Data: d})
}

// try evaluates d's text (none: the delivery as it came) on its delivery.
func (c *Console) try(r *http.Request, d *transformData) error {
	var t *transform.Transform
	if strings.TrimSpace(d.Text) != "" {
		var err error
		if t, err = transform.Compile(d.Text); err != nil {
			return err
		}
	}
	in, err := deliveries.Input(r.Context(), c.Pool, d.Provider, d.Delivery)
	if err != nil {
		return err
	}
	res, err := t.Apply(in)
	if err != nil {
		return err
	}
	d.Body, d.ContentType, d.Headers, d.Path, d.Skip = string(res.Body), res.ContentType, res.Headers, res.Path, res.Skip
	var pretty bytes.Buffer
	if json.Indent(&pretty, res.Body, "", "  ") == nil {
		d.Body = pretty.String()
	}
	return nil
}
