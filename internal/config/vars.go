package config

import (
	"reflect"
	"slices"
)

// Variables are the names of the environment variables Load reads: each
// Config field's envconfig name, then each secret's _FILE variant. A
// deployment that sets any other name configures nothing; the deployment
// files' tests check theirs against this list. (A configuration file's
// sources name their own secret variables; those are not here.)
func Variables() []string {
	var names []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		if name := f.Tag.Get("envconfig"); name != "" && f.Tag.Get("ignored") != "true" {
			names = append(names, name)
		}
	}
	for _, name := range secretVars {
		names = append(names, name+"_FILE")
	}
	return slices.Clip(names)
}
